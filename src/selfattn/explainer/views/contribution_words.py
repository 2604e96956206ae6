"""What each key contributes to the shown head (value-weighted attention, `analysis.contributions`), as the export
dict's `contributions` field, and its one sentence.

    contributions {layer, head,                  the shown head
                   norms [H][L]                  ‖v_j W_O^h‖ of every head of the shown layer (6 significant digits)
                   first [H] {weight, share, oversold} | null   the first token's mean weight and contribution share
                   first_type [H] {score, chance, rows, p, credited}   the head type "first" on the shares
                   text {zh, en} | null          the shown head's sentence, where its first token is looked at
                   shares? [L][L]                the shown head's per-row shares, 4 decimals (L <= STAGES_MAX_LEN)
                   packed? {b64, shape, dtype "u16", digits}   the same shares for the page, to 4 decimals
                                                 (`export.packed_weights`, as the shown head's weights)}

Absent where the capture found no output projection for the shown layer. Computed for the shown layer only: the
norms of one layer cost H·L numbers, the shares of one head L².
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..analysis import contributions as contrib
from . import texts
from .head_words import percent

if TYPE_CHECKING:
    from ..result import Explanation

__all__ = ["field", "sentence", "values", "SHARE_DIGITS", "NORM_DIGITS"]

SHARE_DIGITS = 4
"""Shares are shown as percentages with 2 decimals at most: 4 decimals of the share, as the weights."""
NORM_DIGITS = 6
"""Significant digits of each ‖v_j W_O^h‖."""


def field(e: Explanation, *, max_len: int, pack: Callable[[np.ndarray], dict] | None = None) -> dict | None:
    """The export's `contributions` (module doc) of `e`'s shown head, or None without an output projection.
    max_len: the longest text whose shares go as lists; pack(shares (L, L)) -> {"packed"}: the page's
    packing of numbers in [0, 1] (`export.packed_weights`); None leaves them out."""
    layer_index, head = e.shown.layer, e.shown.head
    layer = e.trace.layers[layer_index]
    if not contrib.available(layer):
        return None
    heads = range(layer.n_heads)
    weights = [e.weights(layer_index, h) for h in heads]  # (L, L) each, float64
    norms = [contrib.norms(layer, h) for h in heads]
    ids = [int(i) for i in e.tokens.ids]
    first = [contrib.first_token(layer, h, weights[h]) for h in heads]
    share = contrib.shares(weights[head] * norms[head][None, :])
    out = {
        "layer": layer_index,
        "head": head,
        "norms": [[float(f"{x:.{NORM_DIGITS}g}") for x in n.tolist()] for n in norms],
        "first": first,
        "first_type": contrib.first_type(layer, ids, torch.stack(weights)),
        "text": sentence(first[head], e.names[0]),
    }
    if len(e.tokens) <= max_len:
        out["shares"] = np.round(share.numpy(), SHARE_DIGITS).tolist()
    if pack is not None:
        out |= pack(share.numpy())
    return out


def sentence(first: dict | None, token: str) -> dict | None:
    """{zh, en}: how much of the head's weight falls on the first token `token` and how much of what it moves comes
    from there (oversold: "but only"; else "and"), or None where its rows do not look there (weight below
    `contributions.OVERSOLD_WEIGHT`)."""
    if first is None or first["weight"] < contrib.OVERSOLD_WEIGHT:
        return None
    key = "heads.contribution_oversold" if first["oversold"] else "heads.contribution_holds"
    return texts.both(key, token=token, weight=percent(first["weight"]), share=percent(first["share"]))


def values(e: Explanation, digits: int) -> list[list[float]]:
    """[L][L] the shown head's contributions ‖α_ij · v_j W_O^h‖ rounded to `digits` decimals (`--json`)."""
    return np.round(e.contributions(e.shown.layer, e.shown.head).numpy(), digits).tolist()
