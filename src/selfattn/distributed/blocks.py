"""One block of the ring: this rank's queries against one travelling K/V block, forward and backward.

Forward: `selfattn.attention(..., return_lse=True)` on the box of the block that can see
anything (`plan.box`), and the exact merge of partial results through their log-sum-exp.
Every score is a function of global positions (the causal / window rule, ALiBi's |p − j|), so a box
passes the ring's own rule to `attention` only when its query and key runs end at one position (then
the box's bottom-right alignment is the global one, shifted); any other box gets its rule as a mask
built from global positions by the score rule: bool for visibility, additive for ALiBi (in strips of
query rows, at most BACKWARD_TILE_BYTES each). Sinks are not a block's business: the ring joins them
once to the merged lse (`ring._RingFunction`):

    lse  = log(e^lse_a + e^lse_b)
    out  = out_a · e^(lse_a − lse) + out_b · e^(lse_b − lse)

Backward: the FlashAttention-2 formulas from the saved final lse, in PyTorch ops, a strip of query
rows at a time (at most BACKWARD_TILE_BYTES per score tile), so no kernel's own backward is needed.
The logits are the score rule's (`selfattn.scores.ScoreRule`: scale, softcap, ALiBi and the ring's
causal / window rule, in global positions), the probabilities `weights.weights_from_lse` (the lse holds
the sinks, so p are the true weights), and the G query heads of a group are the rows of one matmul
against their shared K/V (no copies):

    t  = logits (s = scale · q kᵀ, c·tanh(s/c) with softcap c, − slope·|p − j|, −inf where hidden)
    p  = exp(t − lse)
    δ  = rowsum(dO ∘ O) − dlse
    dP = dO vᵀ,   dT = p ∘ (dP − δ),   dS = dT ∘ (1 − tanh²(s/c)) with softcap, else dT
    dq += scale · dS k,   dk += scale · dSᵀ q,   dv += pᵀ dO      (summed over the G heads of a group)
"""

from __future__ import annotations

import torch

from ..functional import attention
from ..limits import BACKWARD_TILE_BYTES
from ..request import accumulate_dtype
from ..scores import ScoreRule
from ..weights import weights_from_lse
from .plan import Box, Rule

__all__ = ["BACKWARD_TILE_BYTES", "block_backward", "block_forward", "merge"]


MIN_BACKWARD_ROWS = 16
"""Fewest query rows per strip (very long blocks): a strip of fewer rows would be all overhead."""


def _score_rule(b: Box, rule: Rule, score: ScoreRule) -> ScoreRule:
    """The score rule of box `b`: the ring's `score` (scale, softcap, its per-head terms), and, unless the box is
    "full", the ring's causal / window rule — on global positions, so it is used with n_q = n_k = L (no
    bottom-right shift)."""
    if b.kind == "full":
        return score
    return score.replace(causal=rule.causal, window=rule.window)


def _strip_rows(per_row: int) -> int:
    """Query rows per strip so one strip's tile of `per_row` bytes a row stays within BACKWARD_TILE_BYTES."""
    return max(MIN_BACKWARD_ROWS, BACKWARD_TILE_BYTES // max(1, per_row))


def _positions(b: Box, device, r0: int = 0, r1: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Global query positions of rows [r0, r1) of the box, and the box's global key positions."""
    r1 = b.q1 - b.q0 if r1 is None else r1
    return torch.arange(b.q0 + r0, b.q0 + r1, device=device), torch.arange(b.k0, b.k1, device=device)


def block_forward(q, k, v, b: Box, qoff: int, koff: int, rule: Rule, score: ScoreRule, backend: str):
    """Partial attention of the box's queries over the box's keys.

    q (B, Hq, Lr, D) local queries; k (B, Hkv, Lr, D), v (B, Hkv, Lr, Dv) the travelling block;
    qoff / koff turn global positions into local rows; score the ring's score rule without causal, window
    or sinks. Returns output (B, Hq, n, Dv) and lse (B, Hq, n) (no sinks) for the n = b.q1 − b.q0 rows from
    local row b.q0 + qoff.
    """
    qs = q[:, :, b.q0 + qoff : b.q1 + qoff]
    ks = k[:, :, b.k0 + koff : b.k1 + koff]
    vs = v[:, :, b.k0 + koff : b.k1 + koff]
    if b.q1 == b.k1:  # aligned: query p_local − key j_local = p − j (global), so the ring's rule is the box's
        aligned = score.replace(causal=rule.causal, window=rule.window)
        res = attention(qs, ks, vs, **aligned.keywords(), return_lse=True, backend=backend)
        return res.output, res.lse
    common = dict(score.without_positions().keywords(), return_lse=True, backend=backend)
    if b.kind == "full" and not score.biased:
        res = attention(qs, ks, vs, **common)
        return res.output, res.lse
    score_rule = _score_rule(b, rule, score)
    L = rule.seq_len
    if not score.biased:
        rows, cols = _positions(b, q.device)
        res = attention(qs, ks, vs, mask=score_rule.visible(rows, cols, L, L), **common)
        return res.output, res.lse
    acc = accumulate_dtype(q.dtype)
    strip = _strip_rows(q.shape[1] * (b.k1 - b.k0) * acc.itemsize)
    outs, lses = [], []
    for r0 in range(0, b.q1 - b.q0, strip):
        r1 = min(b.q1 - b.q0, r0 + strip)
        rows, cols = _positions(b, q.device, r0, r1)
        bias = score_rule.bias(rows, cols, L, L, dtype=acc, device=q.device)  # (Hq, m, n): biased
        assert bias is not None
        hidden = ~score_rule.visible(rows, cols, L, L) if score_rule.limited else None
        res = attention(qs[:, :, r0:r1], ks, vs, mask=score_rule.hide(bias, hidden=hidden)[None], **common)
        outs.append(res.output)
        lses.append(res.lse)
    return torch.cat(outs, dim=2), torch.cat(lses, dim=2)


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


def _grouped(x: torch.Tensor, Hkv: int) -> torch.Tensor:
    """(B, Hq, m, E) → (B, Hkv, G·m, E): the G query heads of a kv head as the rows of one matrix."""
    B, Hq, m, E = x.shape
    return x.reshape(B, Hkv, (Hq // Hkv) * m, E)


def block_backward(
    q, k, v, do, lse, delta, dq, dk, dv, b: Box, qoff: int, koff: int, rule: Rule, score: ScoreRule
) -> None:
    """Add this box's contribution to dq (this rank's rows) and dk / dv (the travelling block), in place.

    q (B, Hq, Lr, D), do (B, Hq, Lr, Dv), lse / delta (B, Hq, Lr), dq (B, Hq, Lr, D): this rank's,
    in the accumulation dtype. k (B, Hkv, Lr, D), v (B, Hkv, Lr, Dv), dk, dv: the block's.
    """
    B, Hq, Hkv = q.shape[0], q.shape[1], k.shape[1]
    G = Hq // Hkv
    keys = slice(b.k0 + koff, b.k1 + koff)
    ks, vs = k[:, :, keys], v[:, :, keys]  # (B, Hkv, n, D|Dv): shared by the G heads of a group
    n = ks.shape[2]
    score_rule, scale = _score_rule(b, rule, score), score.scale
    strip = _strip_rows(B * Hq * max(1, n) * q.element_size())  # bytes of one row of a tile
    by_position = score_rule.limited or score_rule.biased
    for r0 in range(0, b.q1 - b.q0, strip):
        r1 = min(b.q1 - b.q0, r0 + strip)
        m = r1 - r0
        rows = slice(b.q0 + qoff + r0, b.q0 + qoff + r1)
        qs, dos = _grouped(q[:, :, rows], Hkv), _grouped(do[:, :, rows], Hkv)  # (B, Hkv, G·m, D|Dv)
        raw = torch.matmul(qs, ks.transpose(-1, -2)).view(B, Hkv, G, m, n)
        positions: tuple[torch.Tensor | None, torch.Tensor | None] = (
            _positions(b, q.device, r0, r1) if by_position else (None, None)
        )
        heads = raw.view(B, Hq, m, n)  # the rule's per-head terms line up with Hq = Hkv · G
        t, tanh = score_rule.logits(heads, *positions, rule.seq_len, rule.seq_len, keep_tanh=True)
        t = t.view(B, Hkv, G, m, n)
        tanh = None if tanh is None else tanh.view(B, Hkv, G, m, n)
        p = weights_from_lse(t, lse[:, :, rows].view(B, Hkv, G, m))  # (B, Hkv, G, m, n)
        dp = torch.matmul(dos, vs.transpose(-1, -2)).view(B, Hkv, G, m, n)
        ds = p * (dp - delta[:, :, rows].view(B, Hkv, G, m, 1))
        if tanh is not None:
            ds = ds * (1 - tanh * tanh)
        ds, p = ds.view(B, Hkv, G * m, n), p.view(B, Hkv, G * m, n)
        dq[:, :, rows] += torch.matmul(ds, ks).view(B, Hq, m, -1) * scale
        dk[:, :, keys] += torch.matmul(ds.transpose(-1, -2), qs) * scale
        dv[:, :, keys] += torch.matmul(p.transpose(-1, -2), dos)
