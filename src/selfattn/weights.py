"""`attention_weights(q, k, lse, rows=...)`: the exact weights of chosen query rows, from the saved lse.

A fused kernel (SDPA, FlashAttention, the tiled backend) never builds the (Lq × Lk) weight
matrix, so it cannot show it. But it can return the log-sum-exp of every row,

    lse_i = log Σ_j exp(s_ij)        s_ij = the scaled, softcapped, masked score of query i, key j

and with it any row of weights is one matrix-vector product away, exactly:

    weights_ij = exp(s_ij − lse_i)

no second pass for the row maximum, no renormalisation, O(len(rows) · Lk) memory.
`masked_scores` gives s_ij by the request's score rule (`selfattn.scores.ScoreRule`, the naive
backend's scores too), and `weights_from_lse` is the one copy of that formula (with its rule for a
row that sees nothing); the tiled backward and the ring's blocks recompute their probabilities
with it, and anything else that turns a saved lse into weights should import it. For inputs far
too long for the full matrix:

    out = selfattn.attention(q, k, v, causal=True, return_lse=True, backend="tiled")
    w = selfattn.attention_weights(q, k, out.lse, rows=[0, -1], causal=True)   # (B, H, 2, Lk)
"""

from __future__ import annotations

import numbers

import torch

from . import checks
from .request import Request, build_request, check_dense

__all__ = ["attention_weights", "masked_scores", "row_index", "weights_from_lse"]

NEG_INF = float("-inf")


def weights_from_lse(
    masked_scores: torch.Tensor, lse: torch.Tensor, *, base2: bool = False, inplace: bool = False
) -> torch.Tensor:
    """exp(s − lse) by row: the weights of scores whose log-sum-exp is known.

    masked_scores  (..., R, Lk)  scaled, softcapped, masked scores (−inf where hidden)
    lse            (..., R)      log Σ_j exp(s_ij) of each row; −inf for a row that sees nothing
    base2          scores and lse in base 2 (the tiled kernel's): 2^(s − lse₂)
    inplace        overwrite masked_scores with the weights (no new tile)

    A row whose lse is −inf gets weights 0 (its scores are all −inf: exp(−inf − (−inf)) would be
    NaN, so the lse is taken as +inf there). Returns weights (..., R, Lk).
    """
    offset = lse.masked_fill(lse == NEG_INF, float("inf"))[..., None]  # (..., R, 1)
    if inplace:
        s = masked_scores.sub_(offset)
        return s.exp2_() if base2 else s.exp_()
    s = masked_scores - offset
    return torch.exp2(s) if base2 else torch.exp(s)


def masked_scores(r: Request, rows: torch.Tensor | None = None) -> torch.Tensor:
    """s_ij of query rows `rows` (all Lq if None), in r.accumulate_dtype: Q Kᵀ, then the request's score
    rule (`r.rule.logits`: × scale, softcapped, the mask added, −inf wherever the mask, the causal rule or
    the window hides the key).

    rows     (R,) int64 query indices in [0, Lq), or None
    returns  (B, Hq, R, Lk)
    """
    acc = r.accumulate_dtype
    q = r.q if rows is None else r.q[:, :, rows]
    R = q.shape[2]
    q = q.to(acc).reshape(r.B, r.Hkv, r.G * R, r.D)  # (B, Hkv, G·R, D): a group's queries as rows
    raw = (q @ r.k.to(acc).transpose(-1, -2)).view(r.B, r.Hq, R, r.Lk)  # k shared, not copied
    return r.rule.logits(raw, rows, None, r.Lq, r.Lk)


def attention_weights(q, k, lse, rows=None, *, causal=False, mask=None, window=None, scale=None, softcap=None):
    """The attention weights of query rows `rows`, recomputed from the log-sum-exp `lse`.

    q     (B, Hq, Lq, D)    the queries given to `attention`
    k     (B, Hkv, Lk, D)   the keys given to `attention`
    lse   (B, Hq, Lq)       `attention(..., return_lse=True).lse` of the same call
    rows  None (all rows), an int, a sequence of ints, a slice, or a 1-D integer tensor of query
          indices; negative indices count from the end, as in Python
    causal, mask, window, scale, softcap   the masking arguments of that same `attention` call

    Returns weights (B, Hq, len(rows), Lk): float64 for float64 inputs, else float32. A row that
    may look at nothing is all 0. Equal to `attention(..., return_weights=True).weights[:, :, rows]`.
    """
    # v is not needed: k stands in for it, so that every argument is checked by the one validator
    r = build_request(q, k, k, causal=causal, mask=mask, window=window, scale=scale, softcap=softcap)
    _check_lse(lse, (r.B, r.Hq, r.Lq), r.q.device)
    index = row_index(rows, r.Lq, r.q.device)
    s = masked_scores(r, index)  # (B, Hq, R, Lk)
    return weights_from_lse(s, lse[:, :, index].to(r.accumulate_dtype))


def _check_lse(lse, shape: tuple[int, int, int], device: torch.device) -> None:
    if not isinstance(lse, torch.Tensor):
        raise TypeError(f"lse must be a torch.Tensor (attention(..., return_lse=True).lse), got {type(lse).__name__}")
    check_dense("lse", lse)
    if not lse.dtype.is_floating_point:
        raise TypeError(f"lse must be a float tensor, got dtype {lse.dtype}")
    if tuple(lse.shape) != shape:
        raise ValueError(f"lse has shape {tuple(lse.shape)} but q and k need (B, Hq, Lq) = {shape}")
    if lse.device != device:
        raise ValueError(f"lse is on {lse.device} but q is on {device}")
    if bool((torch.isnan(lse) | torch.isposinf(lse)).any()):
        raise ValueError(
            "lse holds NaN or +inf; a log-sum-exp from attention(..., return_lse=True) is finite, or "
            "-inf for a row that may look at nothing"
        )


def row_index(rows, n: int, device: torch.device) -> torch.Tensor:
    """rows (None / int / sequence / slice / 1-D tensor) → int64 index tensor (R,) into [0, n)."""
    if rows is None:
        return torch.arange(n, device=device)
    if isinstance(rows, slice):
        return torch.arange(n, device=device)[rows]
    if isinstance(rows, torch.Tensor):
        if rows.dim() != 1 or rows.dtype.is_floating_point or rows.dtype.is_complex or rows.dtype == torch.bool:
            raise TypeError(f"rows as a tensor must be 1-D and integer, got shape {tuple(rows.shape)} {rows.dtype}")
        values = rows.tolist()
    elif isinstance(rows, numbers.Integral) and not isinstance(rows, bool):
        values = [int(rows)]
    else:
        try:
            values = list(rows)
        except TypeError:
            raise TypeError(
                f"rows must be None, an int, a sequence of ints, a slice or a 1-D tensor, "
                f"got {type(rows).__name__} {rows!r}"
            ) from None
    values = [checks.integer(f"rows[{i}]", x) for i, x in enumerate(values)]
    for x in values:
        if not -n <= x < n:
            raise ValueError(f"row {x} is out of range for Lq={n} query rows (valid: {-n} to {n - 1})")
    return torch.tensor([x % n for x in values], dtype=torch.long, device=device)
