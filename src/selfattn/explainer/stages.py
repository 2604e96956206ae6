"""`head_stages`: the tutorial's stages of some query rows of one head, recomputed from its Q and K.

The explainer keeps no N×N matrix (`trace`): every view that shows scores, masked scores or weights asks
this function for the rows it shows, and it applies the one score rule (`selfattn.scores.ScoreRule`)
with everything the attention call had — scale, softcap, the head's per-head score features (its sink), visibility
(causal rule, window, padding, packed sequences). A row's weights are the softmax of its masked scores in the
stages' dtype (float64 for what is shown): each row's lse is taken from those scores (and the sink), so a shown row
sums to 1 (1 − the sink's share) to float64's rounding and no weight exceeds 1, whatever precision the model ran in.
`heads_weights` (every head of a layer at once, for the head types' measures) reads the call's own lse instead.
"""

from __future__ import annotations

from typing import Any

import torch

from ..scores import ScoreRule
from ..weights import weights_from_lse  # the one formula: exp(s − lse), 0 for a row that sees nothing

__all__ = ["head_stages", "heads_weights", "sink_share"]


def head_stages(
    q, k, *, scale: float, softcap: float | None, visible, v=None, rows=None, **features: float | None
) -> dict[str, torch.Tensor]:
    """The tutorial's stages of R query rows of one head, in the dtype of q, by the score rule
    (`selfattn.scores.ScoreRule`, the one copy of the formula every backend uses).

    q (R, D), k (L, D), visible (R, L) bool (True = may
    look: causal rule, window, padding, packed sequences), v (L, Dv) or None; rows (R,) the query positions of q's
    rows (default 0 … R − 1; a per-head position term such as ALiBi's |i − j| needs them); features the
    head's value of each per-head score feature by name (`scores.FEATURES`; None: not set), e.g. its sink logit.
    scores (R, L) = Q Kᵀ;  scaled (R, L) = scores · scale (then softcap·tanh(·/softcap) if a softcap
    is set);  mask (R, L) = visible;  masked (R, L) = scaled + the head's position terms, −inf where hidden;
    weights (R, L) = exp(masked − lse_row), lse_row = log(Σ_j exp(masked_j) + exp(sink)) in q's dtype;
    weighted (R, Dv) = weights · V (only when v is given);  sink (R,) = exp(sink − lse_row), the sink's share
    (only with a sink): weights.sum(−1) + sink = 1.
    """
    scores = q @ k.T
    per_head = {
        name: torch.tensor([x], dtype=q.dtype, device=q.device) for name, x in features.items() if x is not None
    }
    scaled, masked = _scored(scores[None], scale, softcap, visible, rows, per_head)
    masked = masked[0]
    sink = features.get("sinks")
    row_lse = torch.logsumexp(masked, dim=-1)  # (R,): −inf for a row that sees nothing
    if sink is not None:
        row_lse = torch.logaddexp(row_lse, torch.full_like(row_lse, sink))
    weights = weights_from_lse(masked, row_lse)
    out = {"scores": scores, "scaled": scaled[0], "mask": visible, "masked": masked, "weights": weights}
    if sink is not None:
        out["sink"] = sink_share(sink, row_lse)
    return out if v is None else out | {"weighted": weights @ v}


def heads_weights(
    q, k, lse, *, scale: float, softcap: float | None, visible, **features: torch.Tensor | None
) -> torch.Tensor:
    """(H, L, L) the weights of every query row of H heads of one layer that share the scale, softcap and
    visibility (the heads an intervention left alone), in q's dtype: `head_stages`' weights, by the same score
    rule, for all H at once — one batched product and one exp instead of H (what the head-type measures read).

    q (H, L, D), k (H, L, D) (each head's kv head), lse (H, L), visible (L, L) bool; features each per-head
    score feature's (H,) values by name (None: not set)."""
    _, masked = _scored(q @ k.transpose(-1, -2), scale, softcap, visible, None, features)
    return weights_from_lse(masked, lse, inplace=True)


def _scored(scores, scale: float, softcap: float | None, visible, rows, features: dict) -> tuple:
    """(scaled, masked), each (H, R, L), of the raw scores (H, R, L) of H heads by the one score rule: scale,
    softcap, the per-head features ((H,) tensors by name; None: not set) and the positions `rows` (None: all), −inf
    where `visible` (R, L) hides (it holds every position rule)."""
    per_head: dict[str, Any] = {name: t for name, t in features.items() if t is not None}
    rule = ScoreRule(scale=scale, softcap=softcap, **per_head)
    L = scores.shape[-1]
    stages = rule.stages(scores[None], rows, None, L, L)  # (1, H, R, L)
    return stages["scaled"][0], rule.hide(stages["masked"], visible[None, None])[0]


def sink_share(sink: float, lse: torch.Tensor) -> torch.Tensor:
    """(R,) each row's weight on the sink, exp(sink − lse) (the one formula, `weights_from_lse`): O(R), no
    scores needed — the lse the kernel returned already holds the sink."""
    return weights_from_lse(torch.full_like(lse, sink)[:, None], lse)[:, 0]
