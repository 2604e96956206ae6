"""How the tiled kernel cuts one request into tiles: block sizes, and the `Plan` of which tiles it visits.

A `Plan` resolves a request once for the loops of `kernels.tiled` — its score rule, the mask with
heads split by group, the block sizes, the compute dtype and unit — and says which (query block ×
key block) tiles are visited (`key_blocks`, `query_blocks`, classified full or partial by
`masks.block_visibility`), how much work that is (`work`, what `kernels.cost` charges for), and
how heads are chunked so a score tile stays within TILE_BUDGET_BYTES.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import masks
from ..limits import TILE_BUDGET_BYTES
from ..scores import LOG2_E, ScoreRule, once
from .base import Request

__all__ = ["Plan", "Tile", "BLOCK_SIZES", "BLOCK_Q", "BLOCK_K", "TILE_BUDGET_BYTES"]

BLOCK_SIZES = (16, 32, 64, 128, 256, 512, 1024)
"""Block sizes (query or key positions per block) the tiled kernel supports and is tested with."""

BLOCK_Q = 1024
"""Default query positions per block. Tall blocks mean few steps: every step is a handful of
multi-threaded ops, and each op's start and finish costs (thread wake-ups; a long wait when
another process holds a core) add up per step. Rows that cannot see a key block are trimmed
from its tile, so a tall block costs no extra work on the causal diagonal."""

BLOCK_K = 256
"""Default key/value positions per block: the width of the causal diagonal's masked tiles."""


Tile = tuple[int, int, int, int]
"""(q0, q1, k0, k1): queries [q0, q1) × keys [k0, k1)."""


@dataclass(frozen=True)
class Plan:
    """How one request is tiled: everything the loops need, resolved once, and which blocks
    they visit (`key_blocks`, `query_blocks`) and how much work that is (`work`)."""

    B: int
    Hq: int
    Hkv: int
    Lq: int
    Lk: int
    rule: ScoreRule
    mask: torch.Tensor | None  # (Bm, Hkv|1, G|1, Lq|1, Lk|1): the rule's mask with heads split by group
    block_q: int
    block_k: int
    acc: torch.dtype

    @classmethod
    def of(cls, r: Request, block_q: int, block_k: int) -> Plan:
        mask = None
        if r.mask is not None:
            m = r.mask  # (Bm, Hq|1, Lq|1, Lk|1)
            mask = m.unflatten(1, (r.Hkv, r.G)) if m.shape[1] == r.Hq else m.unsqueeze(2)
        return cls(
            B=r.B,
            Hq=r.Hq,
            Hkv=r.Hkv,
            Lq=r.Lq,
            Lk=r.Lk,
            rule=r.rule,
            mask=mask,
            block_q=block_q,
            block_k=block_k,
            acc=r.accumulate_dtype,
        )

    @once  # not functools.cached_property: its RLock breaks torch.compile's graph
    def unit(self) -> float:
        """Logits in base 2 (LOG2_E) where they fit the compute dtype, else natural (1.0): the rule says
        (`ScoreRule.base2_fits`; looked at by the loops only, never by `work`)."""
        return LOG2_E if self.rule.base2_fits(self.acc) else 1.0

    @property
    def causal(self) -> bool:
        return self.rule.causal

    @property
    def window(self):
        return self.rule.window

    @property
    def bounds(self) -> tuple[int | None, int | None]:
        """(left, right) of the causal/window rule (`ScoreRule.bounds`), None for an unbounded side."""
        return self.rule.bounds or (None, None)

    @property
    def scale(self) -> float:
        return self.rule.scale

    @property
    def base2(self) -> bool:
        return self.unit != 1.0

    @property
    def G(self) -> int:
        return self.Hq // self.Hkv

    @property
    def shift(self) -> int:
        """Bottom-right alignment: query i stands at key position i + shift."""
        return self.Lk - self.Lq

    @property
    def limited(self) -> bool:
        return self.rule.limited

    def key_span(self, q0: int, q1: int) -> tuple[int, int, int]:
        """(lo, hi, width): query block [q0, q1) sees keys in [lo, hi) only, visited in key blocks of
        `width`. A query block shorter than block_q (one decoding step, a short last block) takes
        proportionally wider key blocks, so its tiles keep their size and Python's per-tile overhead
        does not dominate: one decoding step over 16384 keys is one tile, not 64."""
        lo, hi = 0, self.Lk
        left, right = self.bounds
        if right is not None:
            hi = max(0, min(hi, q1 + self.shift + right))  # last visible key: q1 − 1 + shift + right
        if left is not None:
            lo = max(lo, q0 + self.shift - left)  # first visible key of query q0
        return lo, hi, self.block_k * max(1, self.block_q // (q1 - q0))

    def query_span(self, k0: int, k1: int) -> tuple[int, int]:
        """[lo, hi): the queries that see any key of [k0, k1)."""
        lo, hi = 0, self.Lq
        left, right = self.bounds
        if right is not None:
            lo = max(lo, k0 - self.shift - right)  # first query that sees key k0
        if left is not None:
            hi = min(hi, k1 - self.shift + left)  # last query that sees key k1 − 1, plus one
        return lo, max(lo, hi)

    def key_blocks(self, q0: int, q1: int) -> tuple[list[Tile], list[Tile]]:
        """The tiles query block [q0, q1) visits, one per key block: (full ones, partial ones).

        Each tile keeps only the rows of the query block that see some key of its key block, so
        a tall query block (block_q of 1024) wastes no work on the rows above the diagonal."""
        lo, hi, width = self.key_span(q0, q1)
        tiles = []
        for k0 in range(lo - lo % width, hi, width):
            k0, k1 = max(k0, lo), min(k0 + width, hi)  # never a key no row of the block may see
            r0, r1 = self.query_span(k0, k1)
            tiles.append((max(q0, r0), min(q1, r1), k0, k1))
        return self._classify(tiles)

    def query_blocks(self, k0: int, k1: int) -> tuple[list[Tile], list[Tile]]:
        """The tiles of the query blocks that see any key of [k0, k1): (full ones, partial ones)."""
        lo, hi = self.query_span(k0, k1)
        tiles = [
            (max(q0, lo), min(q0 + self.block_q, hi), k0, k1) for q0 in range(lo - lo % self.block_q, hi, self.block_q)
        ]
        return self._classify(tiles)

    def _classify(self, tiles: list[Tile]) -> tuple[list[Tile], list[Tile]]:
        """Sort tiles (q0, q1, k0, k1) by `masks.block_visibility` into full and partial ones."""
        full, partial = [], []
        for tile in tiles:
            kind = masks.block_visibility(*tile, self.Lq, self.Lk, causal=self.causal, window=self.window)
            if kind is masks.Block.FULL:
                full.append(tile)
            elif kind is masks.Block.PARTIAL:
                partial.append(tile)
        return full, partial

    def work(self) -> tuple[int, int]:
        """(tiles, query-key pairs computed) of the forward pass, counted without classifying
        tiles (partial ones count whole): what `kernels.cost` charges for."""
        tiles = pairs = 0
        for q0 in range(0, self.Lq, self.block_q):
            q1 = min(q0 + self.block_q, self.Lq)
            lo, hi, width = self.key_span(q0, q1)
            for k0 in range(lo - lo % width, hi, width):
                k0, k1 = max(k0, lo), min(k0 + width, hi)
                r0, r1 = self.query_span(k0, k1)
                rows = min(q1, r1) - max(q0, r0)
                if rows > 0:
                    tiles += 1
                    pairs += rows * (k1 - k0)
        return tiles * len(self.head_chunks()), pairs

    def head_chunks(self) -> list[tuple[int, int, int, int]]:
        """(b0, b1, h0, h1) chunks of (batch, kv head) whose score tiles fit TILE_BUDGET_BYTES.

        A chunk is either whole batches (all kv heads) or kv heads of one batch, so that it is
        a contiguous range of the merged B·Hkv dimension and a user mask slices without copies."""
        per_head = self.G * self.block_q * self.block_k * self.acc.itemsize
        heads = max(1, TILE_BUDGET_BYTES // per_head)
        if heads >= self.Hkv:
            step = heads // self.Hkv
            return [(b, min(b + step, self.B), 0, self.Hkv) for b in range(0, self.B, step)]
        return [(b, b + 1, h, min(h + heads, self.Hkv)) for b in range(self.B) for h in range(0, self.Hkv, heads)]
