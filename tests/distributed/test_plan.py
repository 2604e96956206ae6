"""The ring's schedule and layouts as pure functions (no processes): what is computed and sent."""

from __future__ import annotations

import itertools

import pytest
import torch

from selfattn.bench.ring_case import formula_bytes, simulate
from selfattn.distributed.layout import padded_length, positions, segments
from selfattn.distributed.plan import Box, RingPlan, Rule, box
from selfattn.masks import visibility


def test_zigzag_holds_chunks_i_and_2w_minus_1_minus_i():
    assert segments(0, 2, 4, "zigzag") == [(0, 2), (6, 8)]
    assert segments(1, 2, 4, "zigzag") == [(2, 4), (4, 6)]
    assert segments(1, 2, 4, "contiguous") == [(4, 8)]
    every = torch.cat([positions(r, 4, 6, "zigzag") for r in range(4)])
    assert sorted(every.tolist()) == list(range(24))


@pytest.mark.parametrize(
    "L, world, layout, want",
    [
        (37, 2, "zigzag", 40),
        (37, 4, "zigzag", 40),
        (9, 4, "zigzag", 16),
        (9, 4, "contiguous", 12),
        (16, 4, "zigzag", 16),
    ],
)
def test_padded_length(L, world, layout, want):
    assert padded_length(L, world, layout) == want


@pytest.mark.parametrize(
    "causal, window",
    [(True, None), (False, None), (True, 3), (False, 5), (True, 1), (False, (2, 3)), (False, (0, 4)), (True, (6, 2))],
)
def test_boxes_cover_exactly_the_visible_pairs(causal, window):
    """Every visible (query, key) pair lies in exactly one box, with the box's mask; nothing hidden leaks in."""
    L, world, layout = 21, 3, "zigzag"
    Lr = padded_length(L, world, layout) // world
    plan = RingPlan(world, Lr, layout, Rule(causal, window, L))
    truth = visibility(L, L, causal=causal, window=window)
    assert torch.equal(_covered(plan, L), truth.long())


def _covered(plan: RingPlan, L: int) -> torch.Tensor:
    covered = torch.zeros(L, L, dtype=torch.int64)
    for dst, src in itertools.product(range(plan.world), repeat=2):
        for _, _, b in plan.boxes(dst, src):
            if b.kind == "full":
                m = torch.ones(b.q1 - b.q0, b.k1 - b.k0, dtype=torch.bool)
            elif b.kind == "causal":
                m = torch.ones(b.q1 - b.q0, b.k1 - b.k0, dtype=torch.bool).tril()
            else:
                m = b.mask(plan.rule)
            covered[b.q0 : b.q1, b.k0 : b.k1] += m.long()
    return covered


@pytest.mark.parametrize("world", [2, 3, 4, 5])
@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
def test_boxes_cover_every_window_at_every_length(world, layout):
    """Lengths 1 … 3·2W and windows 1 … L + 1 (wider than any chunk, the whole sequence and beyond), and
    two-sided windows (left, right) — each side 0 … L + 1 or unbounded, so blocks after a rank's rows are
    needed too: every visible pair in exactly one box; and each block travels exactly as far as its last user."""
    for L in range(1, 3 * 2 * world + 1):
        Lr = padded_length(L, world, layout) // world
        sides = sorted({0, 1, 2, L // 2, L, L + 1}) + [None]
        pairs = [(False, (a, b)) for a in sides for b in sides if (a, b) != (None, None) and b != 0]
        pairs += [(True, (a, b)) for a, b in ((0, 3), (None, 5), (2, 1))]  # causal caps right at 0
        for causal, window in [(True, None), (False, None)] + [(w % 2 == 0, w) for w in range(1, L + 2)] + pairs:
            plan = RingPlan(world, Lr, layout, Rule(causal, window, L))
            truth = visibility(L, L, causal=causal, window=window)
            assert torch.equal(_covered(plan, L), truth.long()), (L, causal, window)
            padded = torch.zeros(Lr * world, Lr * world, dtype=torch.bool)
            padded[:L, :L] = truth  # padding positions see nothing and are seen by nobody
            pos = [positions(r, world, Lr, layout) for r in range(world)]
            for src in range(world):
                users = [s for s in range(world) if bool(padded[pos[(src + s) % world]][:, pos[src]].any())]
                assert plan.hops(src) == max(users, default=0), (L, causal, window, src)


def test_blocks_nobody_needs_are_not_sent():
    # contiguous causal: rank r only needs the blocks of ranks <= r, so the block of rank 3 never moves
    plan = RingPlan(4, 8, "contiguous", Rule(True, None, 32))
    assert [plan.hops(src) for src in range(4)] == [3, 2, 1, 0]
    assert plan.elements_sent(3) == 0 and plan.elements_sent(0) == 8
    # a window shorter than a chunk: each block goes one hop, to the next rank
    plan = RingPlan(4, 8, "contiguous", Rule(True, 4, 32))
    assert [plan.hops(src) for src in range(4)] == [1, 1, 1, 0]
    # a window wider than a chunk: blocks travel as far as it reaches (window 6 spans two ranks of 4 rows)
    plan = RingPlan(4, 4, "contiguous", Rule(True, 6, 16))
    assert [plan.hops(src) for src in range(4)] == [2, 2, 1, 0]
    # a two-sided window (2, 3) on contiguous ranks of 4 rows: each rank needs its neighbours on both sides,
    # so a block goes one hop forward and W − 1 hops round to reach the rank before it (the ring turns one way)
    plan = RingPlan(4, 4, "contiguous", Rule(False, (2, 3), 16))
    assert [plan.hops(src) for src in range(4)] == [1, 3, 3, 3]
    # zigzag causal: every rank sees every other rank's early chunk: all blocks go round
    plan = RingPlan(4, 8, "zigzag", Rule(True, None, 32))
    assert [plan.hops(src) for src in range(4)] == [3, 3, 3, 3]


def test_box_kinds():
    rule = Rule(True, None, 100)
    assert box((4, 8), (4, 8), rule).kind == "causal"
    assert box((4, 8), (0, 4), rule).kind == "full"
    assert box((0, 4), (4, 8), rule) is None
    assert box((4, 8), (0, 4), Rule(True, 3, 100)).kind == "mask"
    assert box((0, 4), (4, 8), Rule(False, (None, 2), 100)) == Box(2, 4, 4, 6, "mask")  # keys after the query
    assert box((0, 4), (4, 8), Rule(False, (0, 8), 100)).kind == "full"
    assert box((0, 4), (8, 12), Rule(False, (0, 4), 100)) is None
    assert box((0, 4), (0, 4), Rule(False, (1, 1), 100)).kind == "mask"
    assert box((96, 104), (96, 104), rule) == box((96, 100), (96, 100), rule)  # padding trimmed


def test_formula_and_simulation_shapes():
    f, b = formula_bytes(4, 10, 1, 2, 8)
    assert f == 3 * 1 * 2 * 10 * 16 * 4 and b == f + 4 * 1 * 2 * 10 * 16 * 4
    rows = simulate(dict(batch=1, kv_heads=2, head_dim=8), 4096, 1e8, 2e7)
    assert [r["world"] for r in rows][-1] == 64 and rows[0]["speedup"] == 1.0
    assert all(r["seconds_per_step"] > 0 for r in rows)
