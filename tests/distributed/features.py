"""Ring attention with the score features (sinks, ALiBi, two-sided windows): what a spawned group runs.

Each case is checked on the whole sequence (`unshard`) against the float64 spec and its gradients
(spec_grads.py, `selfattn.reference`), by the tolerance rule against the naive backend in the case's
dtype: output, lse, dq, dk, dv, and dsinks — each rank's sinks.grad is its rows' share, so the
all_reduce of it is the whole. Layouts zigzag and contiguous (zigzag puts late chunks before early ones
in a rank's rows, so a block that scored with local positions would be wrong), lengths that leave padding,
GQA and MQA, float64, float32 and bfloat16. Then the refusals: segments and the mods (mask_mod, score_mod) by
name, and ranks that disagree on the sinks or the slopes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfattn import attention
from selfattn.distributed import ring_attention, shard, unshard
from tests.helpers import make_inputs
from tests.tolerances import max_error, tolerance

from .spec_grads import spec_with_grads

__all__ = ["CASES", "group"]


@dataclass(frozen=True)
class Case:
    L: int
    layout: str = "zigzag"
    causal: bool = False
    window: int | tuple | None = None
    sinks: bool = False
    alibi: bool = False
    softcap: float | None = None
    Hq: int = 2
    Hkv: int = 1
    dtype: torch.dtype = torch.float64
    lse_grad: bool = True


CASES = (
    Case(13, sinks=True, causal=True, Hq=4, Hkv=2),
    Case(17, layout="contiguous", sinks=True, window=(3, 4), dtype=torch.float32),
    Case(19, alibi=True, causal=True, Hq=3, Hkv=1),
    Case(14, alibi=True, window=(None, 2), softcap=1.5),  # keys after the query, zigzag: positions out of order
    Case(23, layout="contiguous", alibi=True, sinks=True, window=(5, 1), Hq=4, Hkv=2, dtype=torch.float32),
    Case(11, window=(0, 3), sinks=True, alibi=True, dtype=torch.bfloat16),
    Case(21, causal=True, window=4, sinks=True, alibi=True, dtype=torch.bfloat16, layout="contiguous"),
    Case(9, window=(2, None), alibi=True, Hq=2, Hkv=2),
)

NAMES = ("output", "lse", "dq", "dk", "dv", "dsinks")


def _inputs(case: Case, seed: int):
    q, k, v = make_inputs(1, case.Hq, case.Hkv, case.L, case.L, 6, 5, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    do = torch.randn(1, case.Hq, case.L, 5, generator=g, dtype=torch.float64)
    dl = torch.randn(1, case.Hq, case.L, generator=g, dtype=torch.float64) if case.lse_grad else None
    sinks = torch.randn(case.Hq, generator=g, dtype=torch.float64) * 2 if case.sinks else None
    alibi = torch.rand(case.Hq, generator=g, dtype=torch.float64) * 0.6 + 0.05 if case.alibi else None
    return q, k, v, do, dl, sinks, alibi


def _opts(case: Case) -> dict:
    return dict(causal=case.causal, window=case.window, softcap=case.softcap)


def _loss(out, lse, do, dl):
    loss = (out * do.to(out.dtype)).sum()
    if dl is not None:
        loss = loss + (torch.where(torch.isfinite(lse), lse, 0) * dl.to(lse.dtype)).sum()
    return loss


def _naive(case: Case, q, k, v, do, dl, sinks, alibi) -> list[torch.Tensor]:
    """Output, lse and gradients of the naive backend on the whole sequence in the case's dtype (the baseline)."""
    leaves = [t.detach().to(case.dtype).requires_grad_() for t in (q, k, v)]
    s = None if sinks is None else sinks.clone().requires_grad_()
    a = None if alibi is None else alibi.to(case.dtype)
    res = attention(*leaves, sinks=s, alibi=a, return_lse=True, backend="naive", **_opts(case))
    _loss(res.output, res.lse, do, dl).backward()
    got = [res.output.detach(), res.lse.detach(), *(t.grad for t in leaves)]
    return got + ([s.grad] if s is not None else [])


def _one(case: Case, seed: int) -> list[str]:
    q, k, v, do, dl, sinks, alibi = _inputs(case, seed)
    want = [torch.from_numpy(a) for a in spec_with_grads(q, k, v, do, dl, sinks=sinks, alibi=alibi, **_opts(case))]
    naive = _naive(case, q, k, v, do, dl, sinks, alibi)
    sq, sk, sv = (shard(t.to(case.dtype), layout=case.layout) for t in (q, k, v))
    leaves = [t.tensor.requires_grad_() for t in (sq, sk, sv)]
    s = None if sinks is None else sinks.clone().requires_grad_()
    a = None if alibi is None else alibi.to(case.dtype)
    res = ring_attention(sq, sk, sv, sinks=s, alibi=a, return_lse=True, **_opts(case))
    sdo = shard(do, layout=case.layout).tensor
    sdl = None if dl is None else shard(dl, layout=case.layout).tensor
    _loss(res.output.tensor, res.lse.tensor, sdo, sdl).backward()
    got = [unshard(res.output), unshard(res.lse)]
    got += [unshard(t.like(leaf.grad)) for t, leaf in zip((sq, sk, sv), leaves, strict=True)]
    if s is not None:
        torch.distributed.all_reduce(s.grad)
        got.append(s.grad)
    failures = []
    for name, g, w, b in zip(NAMES, got, want, naive, strict=False):
        err, tol = max_error(g, w), tolerance(case.dtype, max_error(b, w))
        if not err <= tol:
            failures.append(f"{case}: {name} error {err:.3g} > tolerance {tol:.3g}")
    pad = sq.positions >= case.L
    if bool(pad.any()) and not bool(torch.isneginf(res.lse.tensor[..., pad]).all()):
        failures.append(f"{case}: padding rows must keep lse -inf (the sink joins real rows only)")
    return failures


def _refusals(rank: int) -> list[str]:
    failures = []
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    checks = (
        ("segments", dict(segments=torch.zeros(1, 8, dtype=torch.int64)), "segments"),
        ("sinks that differ across ranks", dict(sinks=torch.tensor([0.5, float(rank)])), "sinks[1]"),
        ("slopes that differ across ranks", dict(alibi=torch.tensor([0.5, 0.25 * (rank + 1)])), "alibi[1]"),
        ("a window side < 0", dict(window=(2, -2)), "window right"),  # (-1: unbounded, as flash)
        ("per-batch slopes", dict(alibi=torch.full((2, 2), 0.5, dtype=torch.float64)), "slopes of shape (Hq,)"),
        ("a mask_mod", dict(mask_mod=lambda b, h, q, kv: q >= kv), "mask_mod="),
        ("a score_mod", dict(score_mod=lambda s, b, h, q, kv: s - (q - kv).abs()), "score_mod="),
    )
    for what, kwargs, named in checks:
        try:
            ring_attention(x, x, x, **kwargs)
            failures.append(f"{what}: accepted")
        except ValueError as e:
            if named not in str(e):
                failures.append(f"{what}: the error does not name {named!r}: {e}")
    return failures


def group(rank: int, world: int, first: int = 0, count: int = len(CASES)) -> list[str]:
    """Failure strings of CASES[first : first + count] and the refusals, on this rank."""
    failures = []
    for i, case in enumerate(CASES[first : first + count], start=first):
        failures += [f"W={world} case {i}: {f}" for f in _one(case, seed=500 + i)]
    return failures + _refusals(rank)
