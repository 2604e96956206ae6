"""Every window on every length: what one spawned group of W ranks runs (see test_ring.py).

For each layout and each length L = 1 … 3·2W (so every rank holds padding at some lengths, and
whole ranks hold nothing but padding at the short ones), the ring's forward and backward are
checked, on this rank's rows, against the float64 spec and its gradients (spec_grads.py):

    no window      causal and not
    every length   windows 1, 2, one past a chunk, half the sequence, the whole sequence, beyond it
    two lengths    (3·2W − 1 and 3·2W) every window that ends on a chunk edge or one past it,
                   m·c and m·c + 1 for m = 1 … (chunks): blocks 0 … W − 1 hops away

A window implies the causal order (p − w < j <= p), so windowed cases alternate causal=True and
False to cover both arguments. Each rank compares its own rows (no all_gather): output, lse (−inf
exactly on padding rows), dq, and dk / dv of the K/V rows it owns; and the bytes it sent forward
against the plan. The named regressions of issue 18 (items 1 and 7) run first.
"""

from __future__ import annotations

import numpy as np
import torch

from selfattn.distributed import count_traffic, padded_length, ring_attention, shard
from selfattn.distributed.layout import units
from selfattn.distributed.plan import RingPlan, Rule
from tests.helpers import make_inputs
from tests.tolerances import FLOOR, max_error

from .spec_grads import spec_with_grads

__all__ = ["REGRESSIONS", "cases", "sweep"]

REGRESSIONS = (
    # (world, layout, L, causal, window): wrong outputs (the window was clamped to one rank's rows)
    (2, "contiguous", 8, True, 5),
    (3, "contiguous", 6, True, 3),
    (3, "zigzag", 12, True, 5),
    (4, "zigzag", 16, True, 6),
    # crashes: a rank receives a block after holding none (empty_like(None)), the others then hang
    (3, "zigzag", 2, False, None),
    (5, "zigzag", 7, True, 2),
    (5, "contiguous", 7, False, 2),
)

MAX_REPORTED = 20
"""Failures reported per rank in full; the rest are counted (one wrong rule fails hundreds of cases)."""

HQ, HKV, D, DV = 2, 1, 4, 3
"""Small heads (GQA: K/V travel with one head for two query heads): the sweep is about positions."""

SEED = 300


def _windows(L: int, chunk: int, n_chunks: int, every_edge: bool) -> list[int]:
    picks = {1, 2, chunk + 1, L // 2 + 1, L, L + 1, 2 * L}
    if every_edge:
        picks |= {m * chunk + d for m in range(1, n_chunks + 1) for d in (0, 1)}
    return sorted(picks)


def cases(world: int) -> list[tuple[str, int, bool, int | None]]:
    """(layout, L, causal, window) for this world size, regressions first."""
    out = [(layout, L, causal, w) for W, layout, L, causal, w in REGRESSIONS if W == world]
    longest = 3 * 2 * world
    for layout in ("zigzag", "contiguous"):
        n_chunks = units(world, layout)
        for L in range(1, longest + 1):
            chunk = padded_length(L, world, layout) // n_chunks
            out += [(layout, L, True, None), (layout, L, False, None)]
            windows = _windows(L, chunk, n_chunks, every_edge=L >= longest - 1)
            out += [(layout, L, i % 2 == 0, w) for i, w in enumerate(windows)]
    return out


def _padded(a: np.ndarray, Lp: int, axis: int, fill: float) -> np.ndarray:
    pad = [(0, 0)] * a.ndim
    pad[axis] = (0, Lp - a.shape[axis])
    return np.pad(a, pad, constant_values=fill)


def _one(rank: int, world: int, layout: str, L: int, causal: bool, window, seed: int) -> list[str]:
    q, k, v = make_inputs(1, HQ, HKV, L, L, D, DV, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    do = torch.randn(1, HQ, L, DV, generator=g, dtype=torch.float64)
    dl = torch.randn(1, HQ, L, generator=g, dtype=torch.float64)
    Lp = padded_length(L, world, layout)
    want = spec_with_grads(q, k, v, do, dl, causal=causal, window=window)
    fills = (0.0, -np.inf, 0.0, 0.0, 0.0)
    want = [_padded(a, Lp, 2, f) for a, f in zip(want, fills, strict=True)]
    sq, sk, sv = (shard(t, layout=layout) for t in (q, k, v))
    leaves = [t.tensor.requires_grad_() for t in (sq, sk, sv)]
    with count_traffic() as traffic:
        res = ring_attention(sq, sk, sv, causal=causal, window=window, return_lse=True)
        lse = res.lse.tensor
        sdo, sdl = shard(do, layout=layout).tensor, shard(dl, layout=layout).tensor
        loss = (res.output.tensor * sdo).sum() + (torch.where(torch.isfinite(lse), lse, 0) * sdl).sum()
        loss.backward()
    rows = sq.positions.numpy()
    failures = []
    got_lse, want_lse = lse.detach().numpy(), want[1][:, :, rows]
    if not (np.isneginf(got_lse) == np.isneginf(want_lse)).all():
        failures.append("lse is not -inf exactly on the rows that see nothing")
    finite = np.isfinite(want_lse)
    got = (res.output.tensor.detach(), got_lse[finite], *(t.grad for t in leaves))
    for name, a, b in zip(
        ("output", "lse", "dq", "dk", "dv"), got, (want[0], want_lse[finite], *want[2:]), strict=True
    ):
        b = b if name == "lse" else b[:, :, rows]
        err = max_error(torch.as_tensor(a), torch.from_numpy(np.ascontiguousarray(b)))
        if not err <= FLOOR[torch.float64]:
            failures.append(f"{name} off by {err:.3g}")
    plan = RingPlan(world, Lp // world, layout, Rule(causal, None if window is None else min(window, L), L))
    expect = plan.elements_sent(rank) * HKV * (D + DV) * 8
    if traffic.forward != expect:
        failures.append(f"sent {traffic.forward} bytes forward, the plan says {expect}")
    return failures


def sweep(rank: int, world: int) -> list[str]:
    """Failure strings of every case of `cases(world)` on this rank (empty when all hold)."""
    failures: list[str] = []
    for i, (layout, L, causal, window) in enumerate(cases(world)):
        for f in _one(rank, world, layout, L, causal, window, SEED + i):
            failures.append(f"W={world} {layout} L={L} causal={causal} window={window}: {f}")
    if len(failures) > MAX_REPORTED:
        failures = failures[:MAX_REPORTED] + [f"... and {len(failures) - MAX_REPORTED} more"]
    return failures
