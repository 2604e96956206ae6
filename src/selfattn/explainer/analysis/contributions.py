"""Value-weighted attention: what each key contributes to a head's output, not only how much it is looked at.

A head's output at query i is Σ_j α_ij · v_j W_O^h (its weights times its values, through its slice of the
output projection), so key j moves the residual stream by the vector α_ij · v_j W_O^h, whose norm is

    C_ij = ‖α_ij · v_j W_O^h‖ = α_ij · ‖v_j W_O^h‖        (α_ij ≥ 0)

(Kobayashi et al. 2020, "Attention is not only a weight"). A key looked at with a large weight but a value
that W_O maps to almost nothing (an attention sink: <bos>, [CLS]) contributes little; the raw weights oversell
it. Shapes: v_j is the value vector of the key/value head query head h reads (GQA), (Dv,); W_O^h =
out_proj[:, h·Dv:(h+1)·Dv]ᵀ, (Dv, d_model), the model's own output projection (`LayerTrace.out_proj`).

    norms(layer, head)          (L,)   ‖v_j W_O^h‖ per key
    contributions(layer, head)  (L, L) C_ij, rows = queries (0 where the key is not visible)
    shares(c)                   (L, L) each row of C divided by its sum: the share of the row's contribution
    first_token(layer, head)    {weight, share, oversold}: the first token's mean weight and contribution share
    first_type(layer, ids)      [H] the head type "first" (`head_types.measure`) measured on each head's shares

Computed for one head on demand: O(L·d_model) memory for the norms, O(L²) for the one head's matrix.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..trace_types import LayerTrace
from . import head_types

__all__ = [
    "available",
    "norms",
    "contributions",
    "shares",
    "first_token_share",
    "first_token",
    "first_type",
    "OVERSOLD_WEIGHT",
    "OVERSOLD_RATIO",
]

OVERSOLD_WEIGHT = 0.3
"""A head whose rows put at least this mean weight on the first token is read as looking at it (a sink)."""
OVERSOLD_RATIO = 0.5
"""... and its weight oversells the first token when the token's mean share of the contribution is at most this
fraction of its mean weight (62 % of the weight, under 31 % of what the head moves)."""


def available(layer: LayerTrace) -> bool:
    """Whether the capture found the layer's output projection (`LayerTrace.out_proj`)."""
    return layer.out_proj is not None


def norms(layer: LayerTrace, head: int, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """(L,) ‖v_j W_O^h‖ for every key j of head `head`, in `dtype`. A ValueError where the layer has no output
    projection or its width is not H·Dv."""
    if layer.out_proj is None:
        raise ValueError("this layer's output projection was not found: no value-weighted contributions")
    H, Dv = layer.n_heads, layer.v.shape[-1]
    if layer.out_proj.shape[1] != H * Dv:
        raise ValueError(f"out_proj has {layer.out_proj.shape[1]} inputs, not H·Dv = {H}·{Dv} = {H * Dv}")
    if not 0 <= head < H:
        raise ValueError(f"head must be in [0, {H - 1}], got {head}")
    w = layer.out_proj[:, head * Dv : (head + 1) * Dv].to(device=layer.v.device, dtype=dtype)  # (d_model, Dv)
    v = layer.v[layer.kv_head(head)].to(dtype)  # (L, Dv)
    return torch.linalg.vector_norm(v @ w.T, dim=-1)  # (L,)


def contributions(layer: LayerTrace, head: int, weights: torch.Tensor | None = None) -> torch.Tensor:
    """(L, L) float64 C_ij = α_ij · ‖v_j W_O^h‖ of head `head` (`weights`: its (L, L) weights when already
    computed, else recomputed by `LayerTrace.stages`)."""
    if weights is None:
        weights = layer.stages(head, weighted=False)["weights"]
    return weights.to(torch.float64) * norms(layer, head)[None, :].to(weights.device)


def shares(c: torch.Tensor) -> torch.Tensor:
    """(R, L) each row of contributions `c` divided by its sum (a row that contributes nothing stays 0)."""
    total = c.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, c / torch.where(total > 0, total, torch.ones_like(total)), torch.zeros_like(c))


def first_token_share(weights: torch.Tensor, c: torch.Tensor) -> tuple[float, float] | None:
    """(mean weight on key 0, mean share of contribution from key 0) over the rows i ≥ 1, or None with one row:
    how much a first-token head's raw weight oversells its first token."""
    if weights.shape[0] < 2:
        return None
    return float(weights[1:, 0].mean()), float(shares(c[1:])[:, 0].mean())


def first_token(layer: LayerTrace, head: int, weights: torch.Tensor | None = None) -> dict | None:
    """{"weight", "share", "oversold"} of head `head`: the mean weight its rows i ≥ 1 put on the first token, the
    mean share of their contribution that comes from it, and whether the weight oversells it (weight ≥
    OVERSOLD_WEIGHT and share ≤ OVERSOLD_RATIO × weight); None with one token or no output projection."""
    if not available(layer):
        return None
    if weights is None:
        weights = layer.stages(head, weighted=False)["weights"]
    measured = first_token_share(weights, contributions(layer, head, weights))
    if measured is None:
        return None
    weight, share = measured
    return {
        "weight": weight,
        "share": share,
        "oversold": weight >= OVERSOLD_WEIGHT and share <= OVERSOLD_RATIO * weight,
    }


def first_type(layer: LayerTrace, ids: Sequence[int], weights: torch.Tensor | None = None) -> list[dict] | None:
    """[H] the head type "first" (`head_types.measure`: score, chance, rows, p, credited) measured on each head's
    contribution shares instead of its weights: whether a first-token head stays one when what each key moves is
    counted. weights: the layer's (H, L, L) weights when already computed. None without an output projection."""
    if not available(layer):
        return None
    every = []
    for h in range(layer.n_heads):
        w = layer.stages(h, weighted=False)["weights"] if weights is None else weights[h]
        every.append(shares(contributions(layer, h, w)))
    measured = head_types.measure(torch.stack(every), ids, causal=layer.causal, visible=layer.visible)  # one layout
    return [types["first"] for types in measured]
