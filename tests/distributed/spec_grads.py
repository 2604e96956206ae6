"""Gradients of the float64 spec (`selfattn.reference.attention`), in NumPy: what the ring's backward must give.

The spec returns output O, weights P and lse for a loss Σ O·dO + Σ lse·dlse; its gradients follow from
P alone (t = the logits after scale and softcap, r = scale · q kᵀ before the softcap):

    dV = Pᵀ dO                         (summed over the G query heads of a key/value head)
    dT = P ∘ (dO Vᵀ − rowsum(dO ∘ O) + dlse)
    dR = dT ∘ (1 − tanh²(r / c))       with softcap c, else dT
    dQ = scale · dR K,   dK = scale · dRᵀ Q      (dK summed over the G heads)
    dsink_h = −Σ_{b,i} exp(sink_h − lse) · (rowsum(dO ∘ O) − dlse)     (the sink: a key whose value is 0)

ALiBi slopes are constants (they only change P); with sinks, lse includes the sink and P's rows sum to
less than 1, and the formulas above hold as written.

Hidden keys have P = 0, so they get no gradient; a row that sees nothing (lse −inf) passes none.
No selfattn kernel is involved: the ring's gradients are checked against these, and these are
checked once against torch autograd of a plain PyTorch softmax (test_spec_grads.py).
"""

from __future__ import annotations

import numpy as np

from selfattn import reference

__all__ = ["spec_with_grads"]


def spec_with_grads(
    q, k, v, do, dlse=None, *, causal=False, window=None, scale=None, softcap=None, sinks=None, alibi=None
):
    """(output, lse, dq, dk, dv) of the float64 spec, as NumPy arrays, and dsinks (Hq,) after them when
    sinks are given.

    q (B, Hq, L, D), k (B, Hkv, L, D), v (B, Hkv, L, Dv), do (B, Hq, L, Dv), dlse (B, Hq, L) or None,
    sinks / alibi (Hq,) or None: float64 arrays (or tensors: anything `np.asarray` takes).
    """
    q, k, v, do = (np.asarray(a, dtype=np.float64) for a in (q, k, v, do))
    sinks = None if sinks is None else np.asarray(sinks, dtype=np.float64)
    alibi = None if alibi is None else np.asarray(alibi, dtype=np.float64)
    out, p, lse = reference.attention(
        q, k, v, causal=causal, window=window, scale=scale, softcap=softcap, sinks=sinks, alibi=alibi
    )
    groups = q.shape[1] // k.shape[1]
    kr, vr = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)  # (B, Hq, L, D|Dv)
    multiplier = 1.0 / np.sqrt(q.shape[-1]) if scale is None else float(scale)
    dp = np.einsum("bhid,bhjd->bhij", do, vr)
    row = np.sum(do * out, axis=-1, keepdims=True)
    if dlse is not None:
        row = row - np.asarray(dlse, dtype=np.float64)[..., None]
    dt = p * (dp - row)
    if softcap is not None:
        raw = np.einsum("bhid,bhjd->bhij", q, kr) * multiplier
        dt = dt * (1.0 - np.tanh(raw / softcap) ** 2)
    dq = multiplier * np.einsum("bhij,bhjd->bhid", dt, kr)
    dk_rep = multiplier * np.einsum("bhij,bhid->bhjd", dt, q)
    dv_rep = np.einsum("bhij,bhid->bhjd", p, do)
    B, Hkv = k.shape[0], k.shape[1]
    dk = dk_rep.reshape(B, Hkv, groups, *dk_rep.shape[2:]).sum(axis=2)
    dv = dv_rep.reshape(B, Hkv, groups, *dv_rep.shape[2:]).sum(axis=2)
    if sinks is None:
        return out, lse, dq, dk, dv
    with np.errstate(over="ignore"):  # a row that sees nothing has lse −inf and no row term
        w_sink = np.where(np.isfinite(lse), np.exp(sinks[None, :, None] - lse), 0.0)
    dsinks = -np.sum(w_sink * row[..., 0], axis=(0, 2))
    return out, lse, dq, dk, dv, dsinks
