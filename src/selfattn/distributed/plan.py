"""What each rank computes and sends: block boxes from position runs, and how far each K/V block travels.

Every rank holds one or two runs of consecutive positions (`layout.segments`). For a query run
[a0, a1) and a key run [b0, b1), the rule (causal, window, true length L) leaves a box of
queries × keys that see something; everything outside the box is hidden and never computed.
The rule is the pair (left, right) of `masks.bounds` (window w = (w − 1, 0); causal caps right at
0; a two-sided window (left, right) makes keys after the query visible too):

    keys valid      pk < L,   queries valid   pq < L
    right bound     pk <= pq + right     →  keys below a1 + right, queries from b0 − right
    left bound      pk >= pq − left      →  keys from a0 − left,   queries below b1 + left

The box is "full" (no mask), "causal" (a run against itself under the plain causal rule:
`attention(causal=True)` with Lq = Lk) or "mask" (an edge crosses it: a mask built from positions).

A K/V block starts at its owner and moves one rank along the ring per step. It is sent onward
only while a later rank on its way still sees some of it (`hops`): with a window or a
contiguous causal layout, blocks stop early and are never sent where nobody needs them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .. import masks
from . import layout as layout_mod

__all__ = ["Box", "RingPlan", "Rule", "box"]


@dataclass(frozen=True)
class Rule:
    """Who may look at whom: causal, window (None, w >= 1, or (left, right) as `request.check_window` leaves
    it) and the true length L, all in global positions."""

    causal: bool
    window: int | tuple[int | None, int | None] | None
    seq_len: int

    @functools.cached_property
    def bounds(self) -> tuple[int | None, int | None] | None:
        """(left, right): key j visible to query position p when p − left <= j <= p + right (None: that side
        unbounded); None when positions hide nothing (`masks.bounds`)."""
        return masks.bounds(self.causal, self.window)


@dataclass(frozen=True)
class Box:
    """Queries [q0, q1) × keys [k0, k1) in global positions, and how to mask them."""

    q0: int
    q1: int
    k0: int
    k1: int
    kind: str  # "full" | "causal" | "mask"

    def mask(self, rule: Rule, device=None) -> torch.Tensor:
        """Bool (q1 − q0, k1 − k0), True = may look (only needed for kind "mask")."""
        pq = torch.arange(self.q0, self.q1, device=device)[:, None]
        pk = torch.arange(self.k0, self.k1, device=device)[None, :]
        return masks.visible_at(pq, pk, rule.bounds)


def box(qrun: tuple[int, int], krun: tuple[int, int], rule: Rule) -> Box | None:
    """The part of queries `qrun` × keys `krun` that sees anything, or None (see the module doc)."""
    a0, a1 = qrun[0], min(qrun[1], rule.seq_len)
    b0, b1 = krun[0], min(krun[1], rule.seq_len)
    if a1 <= a0 or b1 <= b0:
        return None
    if rule.bounds is None:
        return Box(a0, a1, b0, b1, "full")
    left, right = rule.bounds  # both >= 0 (check_window), so one trimming pass of each side is final
    if right is not None:
        b1, a0 = min(b1, a1 + right), max(a0, b0 - right)
    if left is not None:
        b0, a1 = max(b0, a0 - left), min(a1, b1 + left)
    if a1 <= a0 or b1 <= b0:
        return None
    upper_free = right is None or b1 - 1 <= a0 + right  # the last key is visible to the first query
    lower_free = left is None or b0 >= a1 - 1 - left  # the first key is visible to the last query
    if upper_free and lower_free:
        return Box(a0, a1, b0, b1, "full")
    if rule.bounds == (None, 0) and (a0, a1) == (b0, b1):
        return Box(a0, a1, b0, b1, "causal")
    return Box(a0, a1, b0, b1, "mask")


@dataclass(frozen=True)
class RingPlan:
    """The schedule of one ring pass, the same on every rank.

    world, local_len, layout   as in `layout`; rule as above
    sees[dst][src]   rank dst's queries see some key of rank src
    hops[src]        the last step at which rank src's K/V block is still used: it is held by
                     src, src+1, …, src+hops (mod W) at steps 0 … hops, and sent hops times
    """

    world: int
    local_len: int
    layout: str
    rule: Rule

    def segments(self, rank: int) -> list[tuple[int, int]]:
        return layout_mod.segments(rank, self.world, self.local_len, self.layout)

    def boxes(self, dst: int, src: int) -> list[tuple[int, int, Box]]:
        """(row offset of the query run in dst's rows, row offset of the key run in src's rows, box)."""
        out = []
        qoff = 0
        for qrun in self.segments(dst):
            koff = 0
            for krun in self.segments(src):
                b = box(qrun, krun, self.rule)
                if b is not None:
                    out.append((qoff - qrun[0], koff - krun[0], b))
                koff += krun[1] - krun[0]
            qoff += qrun[1] - qrun[0]
        return out

    def sees(self, dst: int, src: int) -> bool:
        return bool(self.boxes(dst, src))

    @functools.cached_property
    def _hops(self) -> tuple[int, ...]:
        table = []
        for src in range(self.world):
            last = 0
            for step in range(self.world):
                if self.sees((src + step) % self.world, src):
                    last = step
            table.append(last)
        return tuple(table)

    def hops(self, src: int) -> int:
        return self._hops[src]

    def holds(self, rank: int, step: int) -> int | None:
        """The owner of the K/V block `rank` holds at `step`, or None when that block stopped earlier."""
        src = (rank - step) % self.world
        return src if step <= self.hops(src) else None

    def sends_on(self, rank: int, step: int) -> bool:
        """After `step`, `rank` sends the block it holds to rank + 1."""
        src = self.holds(rank, step)
        return src is not None and step < self.hops(src)

    def elements_sent(self, rank: int) -> int:
        """K/V rows this rank sends in the forward pass (each of local_len rows)."""
        return sum(self.local_len for step in range(self.world) if self.sends_on(rank, step))
