"""One block of the ring: this rank's queries against one travelling K/V block, forward and backward.

Forward: `selfattn.attention(..., return_lse=True)` on the box of the block that can see
anything (`plan.box`), and the exact merge of partial results through their log-sum-exp:

    lse  = log(e^lse_a + e^lse_b)
    out  = out_a · e^(lse_a − lse) + out_b · e^(lse_b − lse)

Backward: the FlashAttention-2 formulas from the saved final lse, in PyTorch ops, a strip of query
rows at a time (at most BACKWARD_TILE_BYTES per score tile), so no kernel's own backward is needed:

    s  = scale · q kᵀ   (t = c·tanh(s/c) with softcap c)
    p  = exp(t − lse)   masked to 0 where hidden
    δ  = rowsum(dO ∘ O) − dlse
    dP = dO vᵀ,   dT = p ∘ (dP − δ),   dS = dT ∘ (1 − tanh²(s/c)) with softcap, else dT
    dq += scale · dS k,   dk += scale · dSᵀ q,   dv += pᵀ dO      (summed over the G heads of a group)
"""

from __future__ import annotations

import torch

from ..functional import attention
from .plan import Box, Rule

__all__ = ["BACKWARD_TILE_BYTES", "accumulate_dtype", "block_backward", "block_forward", "merge"]

BACKWARD_TILE_BYTES = 8 << 20
"""Most bytes one score tile (B, Hq, rows, block keys) of the backward may take: the strip's rows are
chosen so, whatever the block's length, so a rank's peak memory follows its O(Lr) tensors, not Lr²."""

MIN_BACKWARD_ROWS = 16
"""Fewest query rows per strip (very long blocks): a strip of fewer rows would be all overhead."""


def accumulate_dtype(dtype: torch.dtype) -> torch.dtype:
    """Sums run in float32 for half types, else in the input dtype (as in `attention`)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _visible(b: Box, rule: Rule, device) -> torch.Tensor | None:
    if b.kind == "full":
        return None
    return b.mask(rule, device)


def block_forward(q, k, v, b: Box, qoff: int, koff: int, rule: Rule, scale: float, softcap, backend: str):
    """Partial attention of the box's queries over the box's keys.

    q (B, Hq, Lr, D) local queries; k (B, Hkv, Lr, D), v (B, Hkv, Lr, Dv) the travelling block;
    qoff / koff turn global positions into local rows. Returns output (B, Hq, n, Dv) and
    lse (B, Hq, n) for the n = b.q1 − b.q0 rows starting at local row b.q0 + qoff.
    """
    qs = q[:, :, b.q0 + qoff : b.q1 + qoff]
    ks = k[:, :, b.k0 + koff : b.k1 + koff]
    vs = v[:, :, b.k0 + koff : b.k1 + koff]
    if b.kind == "causal":
        res = attention(qs, ks, vs, causal=True, scale=scale, softcap=softcap, return_lse=True, backend=backend)
    else:
        res = attention(
            qs, ks, vs, mask=_visible(b, rule, q.device), scale=scale, softcap=softcap, return_lse=True, backend=backend
        )
    return res.output, res.lse


def merge(out: torch.Tensor, lse: torch.Tensor, start: int, part_out: torch.Tensor, part_lse: torch.Tensor) -> None:
    """Fold a partial result into the running (out, lse) of rows [start, start + n), in place.

    out (B, Hq, Lr, Dv), lse (B, Hq, Lr) running; part_out (B, Hq, n, Dv), part_lse (B, Hq, n).
    Rows that have seen nothing keep lse −inf and output 0.
    """
    n = part_lse.shape[-1]
    old = lse[:, :, start : start + n]
    new = torch.logaddexp(old, part_lse.to(lse.dtype))
    safe = torch.where(torch.isfinite(new), new, torch.zeros_like(new))
    keep, take = torch.exp(old - safe)[..., None], torch.exp(part_lse.to(lse.dtype) - safe)[..., None]
    out[:, :, start : start + n] = out[:, :, start : start + n] * keep + part_out.to(out.dtype) * take
    lse[:, :, start : start + n] = new


def block_backward(
    q, k, v, do, lse, delta, dq, dk, dv, b: Box, qoff: int, koff: int, rule: Rule, scale: float, softcap
) -> None:
    """Add this box's contribution to dq (this rank's rows) and dk / dv (the travelling block), in place.

    q (B, Hq, Lr, D), do (B, Hq, Lr, Dv), lse / delta (B, Hq, Lr), dq (B, Hq, Lr, D): this rank's,
    in the accumulation dtype. k (B, Hkv, Lr, D), v (B, Hkv, Lr, Dv), dk, dv: the block's.
    """
    Hq, Hkv = q.shape[1], k.shape[1]
    groups = Hq // Hkv
    ks = k[:, :, b.k0 + koff : b.k1 + koff].repeat_interleave(groups, dim=1)  # (B, Hq, n, D)
    vs = v[:, :, b.k0 + koff : b.k1 + koff].repeat_interleave(groups, dim=1)  # (B, Hq, n, Dv)
    visible = _visible(b, rule, q.device)  # (n_q, n_k) or None for a "full" box
    dks = torch.zeros_like(ks)
    dvs = torch.zeros_like(vs)
    per_row = ks.shape[0] * Hq * max(1, ks.shape[2]) * q.element_size()  # bytes of one row of a tile
    strip = max(MIN_BACKWARD_ROWS, BACKWARD_TILE_BYTES // per_row)
    for r0 in range(0, b.q1 - b.q0, strip):
        r1 = min(b.q1 - b.q0, r0 + strip)
        rows = slice(b.q0 + qoff + r0, b.q0 + qoff + r1)
        qs, dos = q[:, :, rows], do[:, :, rows]  # (B, Hq, m, D|Dv)
        s = torch.matmul(qs, ks.transpose(-1, -2)) * scale  # (B, Hq, m, n)
        if softcap is not None:
            t = torch.tanh(s / softcap)
            s = softcap * t
        p = torch.exp(s - lse[:, :, rows, None])
        if visible is not None:
            p = torch.where(visible[r0:r1], p, torch.zeros((), dtype=p.dtype, device=p.device))
        dp = torch.matmul(dos, vs.transpose(-1, -2))  # (B, Hq, m, n)
        ds = p * (dp - delta[:, :, rows, None])
        if softcap is not None:
            ds = ds * (1 - t * t)
        dq[:, :, rows] += torch.matmul(ds, ks) * scale
        dks += torch.matmul(ds.transpose(-1, -2), qs) * scale
        dvs += torch.matmul(p.transpose(-1, -2), dos)
    B, n = ks.shape[0], ks.shape[2]
    dk[:, :, b.k0 + koff : b.k1 + koff] += dks.view(B, Hkv, groups, n, -1).sum(2)
    dv[:, :, b.k0 + koff : b.k1 + koff] += dvs.view(B, Hkv, groups, n, -1).sum(2)
