"""Visibility rules: who may look at whom, and their 1/0 drawing.

A visibility matrix is bool (Lq, Lk) with True = may look (the tutorial's "1").
Query i stands at position p = i + Lk - Lq (bottom-right alignment), so that one
decoding step (Lq = 1) with a cache of Lk keys sees the whole past:

    causal, Lq = Lk = 4        causal, Lq = 2, Lk = 4      window = 2, Lq = Lk = 4
    1 0 0 0                    1 1 1 0                     1 0 0 0
    1 1 0 0                    1 1 1 1                     1 1 0 0
    1 1 1 0                                                0 1 1 0
    1 1 1 1                                                0 0 1 1

`window=w` keeps the last w positions, the query's own included: p - w < j <= p; `window=(left, right)`
keeps p - left <= j <= p + right (FlashAttention's `window_size`; w is (w - 1, 0)).
"""

from __future__ import annotations

import collections
import enum
import threading

import torch

from . import checks
from .compiling import values_readable
from .limits import BLOCK_MASK_CACHE_BYTES, TILE_BUDGET_BYTES

__all__ = [
    "EXTENT_CHUNK",
    "additive_in",
    "finite_extent",
    "segment_spans",
    "bounds",
    "visibility",
    "visible_at",
    "Block",
    "block_visibility",
    "draw_blocks",
    "padding_mask",
    "draw",
    "MASK_BLOCK",
    "EMPTY",
    "PARTIAL",
    "FULL",
    "BlockMask",
    "block_mask",
    "cached_block_mask",
    "held_tensors",
    "BLOCK_MASKS",
]


def bounds(causal: bool = False, window=None) -> tuple[int | None, int | None] | None:
    """The causal / window rule as (left, right): key j is visible to query position p when
    p − left <= j <= p + right (None: no bound on that side); None when nothing is hidden by position.

    window w (an int) is (w − 1, 0); window (left, right) is FlashAttention's `window_size`; causal
    makes right at most 0. The one place the three arguments become one pair of bounds."""
    if window is None:
        return (None, 0) if causal else None
    left, right = (window - 1, 0) if isinstance(window, int) else window
    if causal:
        right = 0 if right is None else min(right, 0)
    return left, right


def visibility(
    n_q: int,
    n_k: int,
    *,
    causal: bool = False,
    window=None,
    device: torch.device | str | None = None,
    rows: torch.Tensor | None = None,
    cols: torch.Tensor | None = None,
) -> torch.Tensor:
    """The causal / window rule: bool (R, C), True = may look. The one copy every backend, the
    weights from an lse and the explainer use (`selfattn.reference.visibility` is the NumPy spec).

    n_q, n_k  Lq and Lk of the whole request (they fix the bottom-right alignment)
    rows      (R,) query indices in [0, n_q); default all Lq of them
    cols      (C,) key indices in [0, n_k); default all Lk of them
    window    w (the last w positions: p − w < j <= p) or (left, right): p − left <= j <= p + right

    Query i stands at position p = i + n_k − n_q (`bounds` gives the rule as a pair).
    """
    if rows is not None:
        device = rows.device
    elif cols is not None:
        device = cols.device
    rows = torch.arange(n_q, device=device) if rows is None else rows
    cols = torch.arange(n_k, device=device) if cols is None else cols
    rule = bounds(causal, window)
    if rule is None:
        return torch.ones(len(rows), len(cols), dtype=torch.bool, device=device)
    p = rows[:, None] + (n_k - n_q)  # (R, 1) query positions, bottom-right aligned
    j = cols[None, :]  # (1, C) key positions
    return visible_at(p, j, rule)


def visible_at(p: torch.Tensor, j: torch.Tensor, rule: tuple[int | None, int | None] | None) -> torch.Tensor:
    """The causal / window rule itself, elementwise: key position j is visible to query position p when
    p − left <= j <= p + right, rule = (left, right) from `bounds` (p, j broadcast; FlexAttention's
    mask_mod calls it on scalars)."""
    left, right = (None, None) if rule is None else rule
    visible = j >= 0 if right is None else j <= p + right
    if left is not None:
        visible = visible & (j >= p - left)
    return visible


class Block(enum.Enum):
    """How much of a (query block × key block) tile the causal/window rules let through."""

    HIDDEN = "hidden"  # nothing visible: skip the tile
    FULL = "full"  # everything visible: no mask needed
    PARTIAL = "partial"  # the diagonal or window edge crosses the tile: mask it


def block_visibility(
    q0: int, q1: int, k0: int, k1: int, n_q: int, n_k: int, *, causal: bool = False, window=None
) -> Block:
    """Classify the tile of queries [q0, q1) × keys [k0, k1) without building it.

    Query i sees key j iff lo(i) <= j <= hi(i) with hi(i) = p + right and lo(i) = p − left
    (p = i + n_k − n_q; (left, right) = `bounds(causal, window)`). Both bounds grow with i, so
    the first and last query rows of the tile bound the whole tile.
    """
    if q1 <= q0 or k1 <= k0:
        return Block.HIDDEN
    rule = bounds(causal, window)
    if rule is None:
        return Block.FULL
    left, right = rule
    shift = n_k - n_q
    p_first, p_last = q0 + shift, q1 - 1 + shift
    if right is not None and k0 > p_last + right:
        return Block.HIDDEN
    if left is not None and k1 - 1 < p_first - left:
        return Block.HIDDEN
    if (right is None or k1 - 1 <= p_first + right) and (left is None or k0 >= p_last - left):
        return Block.FULL
    return Block.PARTIAL


BLOCK_CHARS = {Block.FULL: "F", Block.PARTIAL: "P", Block.HIDDEN: "."}
"""How `draw_blocks` draws a tile (as FlexAttention's `BlockMask.to_string` draws its blocks)."""


def draw_blocks(n_q: int, n_k: int, block_q: int, block_k: int, *, causal: bool = False, window=None) -> str:
    """The block plan of a tiled kernel: one row per query block, one character per key block,
    F (full: no mask needed), P (partial: a diagonal or window edge crosses it: masked),
    . (hidden: never computed). causal, Lq = Lk = 8, blocks of 2:

        P . . .
        F P . .
        F F P .
        F F F P
    """
    checks.integer("block_q", block_q, low=1)
    checks.integer("block_k", block_k, low=1)
    lines = []
    for q0 in range(0, n_q, block_q):
        q1 = min(q0 + block_q, n_q)
        lines.append(
            " ".join(
                BLOCK_CHARS[
                    block_visibility(q0, q1, k0, min(k0 + block_k, n_k), n_q, n_k, causal=causal, window=window)
                ]
                for k0 in range(0, n_k, block_k)
            )
        )
    return "\n".join(lines)


def draw_row_intervals(lo: torch.Tensor, hi: torch.Tensor, n_k: int, block_q: int, block_k: int) -> str:
    """The block plan when each query row i sees exactly the keys [lo[i], hi[i]) (a causal / window rule
    intersected with a contiguous segment's span): F where every row of the block sees every key of it,
    . where no row sees any, P otherwise. lo, hi: (Lq,) integer tensors."""
    checks.integer("block_q", block_q, low=1)
    checks.integer("block_k", block_k, low=1)
    edges = torch.arange(0, n_k, block_k)
    k0, k1 = edges, (edges + block_k).clamp(max=n_k)
    lines = []
    for q0 in range(0, lo.numel(), block_q):
        a, b = lo[q0 : q0 + block_q, None], hi[q0 : q0 + block_q, None]  # (R, 1)
        seen = (torch.minimum(b, k1) - torch.maximum(a, k0)).clamp(min=0).sum(0)  # (key blocks,) pairs
        whole = a.shape[0] * (k1 - k0)
        kinds = [
            Block.HIDDEN if n == 0 else Block.FULL if n == w else Block.PARTIAL
            for n, w in zip(seen, whole, strict=True)
        ]
        lines.append(" ".join(BLOCK_CHARS[kind] for kind in kinds))
    return "\n".join(lines)


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Key-padding visibility from a (B, Lk) 1/0 (or bool) mask: bool (B, 1, 1, Lk).

    The result broadcasts against (B, H, Lq, Lk) in `selfattn.attention(mask=...)`.
    """
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"attention_mask must be a torch.Tensor, got {type(attention_mask).__name__}")
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be (B, Lk), got shape {tuple(attention_mask.shape)}")
    if attention_mask.dtype != torch.bool:
        bad = (attention_mask != 0) & (attention_mask != 1)
        if bool(bad.any()):
            raise ValueError(f"attention_mask must hold only 0 and 1, found {attention_mask[bad][0].item()}")
        attention_mask = attention_mask != 0
    return attention_mask[:, None, None, :]


def draw(visible) -> str:
    """The tutorial's 1/0 drawing of a 2-D visibility matrix (torch or NumPy)."""
    rows = visible.tolist()
    if not rows or not isinstance(rows[0], list):
        raise ValueError(f"draw needs a 2-D matrix, got shape {tuple(visible.shape)}")
    return "\n".join(" ".join("1" if x else "0" for x in row) for row in rows)


EXTENT_CHUNK = 1 << 20
"""Entries of a mask `finite_extent` looks at per step when the mask holds −inf (a few MiB of scratch)."""


def additive_in(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An additive mask (tile) in `dtype`, its finite entries saturated to dtype's range: −1e300 in a float64
    mask becomes float32's most negative number, not −inf (−inf hides a key; a finite value only weighs it
    down, and a row of equal finite values is a uniform row). −inf stays −inf."""
    if mask.dtype == dtype:
        return mask
    out = mask.to(dtype)
    if torch.finfo(mask.dtype).max > torch.finfo(dtype).max:
        info = torch.finfo(dtype)
        over = torch.isinf(out) & torch.isfinite(mask)
        if not values_readable(over) or bool(over.any()):
            out = torch.where(over, torch.where(mask > 0, info.max, info.min).to(dtype), out)
    return out


def finite_extent(mask: torch.Tensor) -> float:
    """The largest |x| over the finite entries x of a 4-D `mask` (0.0 if none). Two reductions when the mask
    holds no ±inf; otherwise a pass over its distinct entries (broadcast dimensions once), at most
    EXTENT_CHUNK elements at a time, so the scratch stays small whatever the mask's size."""
    m = mask.detach()
    if m.numel() == 0:
        return 0.0
    lo, hi = float(m.amin()), float(m.amax())
    if abs(lo) != float("inf") and abs(hi) != float("inf"):
        return max(abs(lo), abs(hi))
    m = m[tuple(slice(0, 1) if stride == 0 else slice(None) for stride in m.stride())]  # each entry once
    step = max(1, EXTENT_CHUNK // max(1, m.shape[3]))
    extent = 0.0
    for b in range(m.shape[0]):
        for h in range(m.shape[1]):
            for i in range(0, m.shape[2], step):
                part = m[b, h, i : i + step]
                extent = max(extent, float(part.abs().masked_fill_(torch.isinf(part), 0).amax()))
    return extent


def segment_spans(seg: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """((2, B, L) int64: for each position the first key of its segment and one past its last, whether every
    segment is one contiguous run — then the span alone is the segment rule), for (B, L) segment ids.

    By a stable sort of each row's ids (no data-dependent shapes, so `torch.compile` traces it): a group
    of equal ids keeps its positions in order, so its first and last sorted entries are the span. While
    compiling or under vmap, `contiguous` is False (`values_readable`): the kernel then also reads the ids."""
    B, L = seg.shape
    if L == 0:
        return torch.empty(2, B, 0, dtype=torch.int64, device=seg.device), True
    ids, pos = torch.sort(seg, dim=1, stable=True)
    index = torch.arange(L, device=seg.device).expand(B, L)
    edge = torch.ones(B, 1, dtype=torch.bool, device=seg.device)
    starts = torch.cat([edge, ids[:, 1:] != ids[:, :-1]], dim=1)  # a new id begins here (sorted order)
    ends = torch.cat([starts[:, 1:], edge], dim=1)  # the last of its id
    start = torch.where(starts, index, 0).cummax(dim=1).values
    end = torch.where(ends, index, L - 1).flip(1).cummin(dim=1).values.flip(1)
    first, last = (torch.zeros_like(pos).scatter(1, pos, pos.gather(1, at)) for at in (start, end))
    span = torch.stack([first, last + 1])  # out of place: vmap and compile trace it
    if not values_readable(seg):
        return span, False
    runs = 1 + (seg[:, 1:] != seg[:, :-1]).sum(dim=1)
    return span, bool((runs == starts.sum(dim=1)).all())


# --- mask_mod: FlexAttention's mask function, evaluated once per shape into a block map ------------------------

MASK_BLOCK = 128
"""Query and key positions per block of a `BlockMask` (FlexAttention's default BLOCK_SIZE, and the native kernel's
query block): the native kernel skips an empty block and masks only a partial one."""

EMPTY, PARTIAL, FULL = 0, 1, 2
"""A block's kind in `BlockMask.kinds`: nothing visible (skipped), some (its dense mask applied), all (no mask)."""

KIND_CHARS = {FULL: "F", PARTIAL: "P", EMPTY: "."}
"""How `BlockMask.draw` draws a block (as `draw_blocks` and FlexAttention's `BlockMask.to_string`)."""


def _describe_mod(mask_mod) -> str:
    return getattr(mask_mod, "__qualname__", None) or type(mask_mod).__name__


def _vmapped(mask_mod, b, h, q, kv) -> torch.Tensor:
    """mask_mod called as FlexAttention's create_mask calls it: on 0-d index tensors, vmapped over kv, q, h, b."""
    fn = mask_mod
    for dims in ((None, None, None, 0), (None, None, 0, None), (None, 0, None, None), (0, None, None, None)):
        fn = torch.func.vmap(fn, in_dims=dims, out_dims=0)
    return fn(b, h, q, kv)


def _evaluated(mask_mod, B: int, H: int, q0: int, q1: int, Lk: int, device) -> torch.Tensor:
    """mask_mod on batch items [0, B), heads [0, H), queries [q0, q1), keys [0, Lk): bool (B|1, H|1, n|1, Lk|1),
    broadcast index tensors first (b (B,1,1,1), h (1,H,1,1), q (1,1,n,1), kv (1,1,1,Lk): one call), FlexAttention's
    vmap over each index where that call raises or gives a shape that does not broadcast."""
    full = (B, H, q1 - q0, Lk)
    name = _describe_mod(mask_mod)
    b = torch.arange(B, device=device)
    h = torch.arange(H, device=device)
    q = torch.arange(q0, q1, device=device)
    kv = torch.arange(Lk, device=device)
    first: str | None = None
    try:
        out = mask_mod(b[:, None, None, None], h[None, :, None, None], q[None, None, :, None], kv[None, None, None, :])
    except Exception as error:  # a mod written for 0-d indices (vmap): evaluated the way FlexAttention does
        out, first = None, f"{type(error).__name__}: {error}"
    misfit = None
    if out is not None and not _fits(out, full):
        first = f"it returned {_what(out)} on broadcast indices, which does not broadcast to {full}"
        misfit, out = out, None
    if out is None:
        try:
            out = _vmapped(mask_mod, b, h, q, kv)
        except Exception as error:
            raise ValueError(
                f"mask_mod {name} failed on index tensors ({first}) and under vmap as FlexAttention calls it "
                f"({type(error).__name__}: {error}); it must map (b, h, q_idx, kv_idx) to a bool tensor"
            ) from error
    if not isinstance(out, torch.Tensor) or out.dtype != torch.bool:
        raise TypeError(f"mask_mod {name} must return a bool tensor (True = may look), got {_what(out)}")
    if not _fits(out, full):
        shape = tuple((out if misfit is None else misfit).shape)  # the broadcast call's answer, where it gave one
        raise ValueError(f"mask_mod {name} returned shape {shape}, which does not broadcast to {full}")
    return out.reshape((1,) * (4 - out.dim()) + tuple(out.shape))


def _fits(out, full: tuple[int, ...]) -> bool:
    if not isinstance(out, torch.Tensor) or out.dim() > 4:
        return False
    try:
        return torch.broadcast_shapes(out.shape, full) == torch.Size(full)
    except RuntimeError:
        return False


def _what(out) -> str:
    if isinstance(out, torch.Tensor):
        return f"a {str(out.dtype).removeprefix('torch.')} tensor of shape {tuple(out.shape)}"
    return f"{type(out).__name__} {out!r}"


class BlockMask:
    """A mask_mod evaluated once for one shape: which (MASK_BLOCK × MASK_BLOCK) blocks of (query × key) positions
    it leaves full, partial or empty, and the dense mask of each partial block (FlexAttention's BlockMask, built
    without a compile). Made by `block_mask`; passed to `selfattn.attention(..., block_mask=)`.

    mask_mod  the function it was evaluated from: mask_mod(b, h, q_idx, kv_idx) -> bool tensor, True = may look
    shape     (B, H, Lq, Lk) it was evaluated for
    kinds     uint8 (Bm, Hm, nq, nk): EMPTY / PARTIAL / FULL per block; Bm is 1 where the mask is the same for every
              batch item (else B), Hm likewise for heads
    index     int32 (Bm, Hm, nq, nk): a partial block's row of `partial`, −1 elsewhere
    partial   bool (P, MASK_BLOCK, MASK_BLOCK): each partial block's mask (False past Lq or Lk)
    """

    def __init__(self, mask_mod, shape, kinds: torch.Tensor, index: torch.Tensor, partial: torch.Tensor):
        self.mask_mod = mask_mod
        self.shape = tuple(shape)
        self.block = MASK_BLOCK
        self.kinds = kinds
        self.index = index
        self.partial = partial
        self._fraction: float | None = None

    def __repr__(self) -> str:
        counts = self.counts()
        return (
            f"BlockMask({_describe_mod(self.mask_mod)}, shape={self.shape}, blocks of {self.block}: "
            f"{counts['full']} full, {counts['partial']} partial, {counts['empty']} empty)"
        )

    @property
    def device(self) -> torch.device:
        return self.kinds.device

    @property
    def nbytes(self) -> int:
        """Bytes it holds (the block map and the partial blocks' masks)."""
        return sum(t.numel() * t.element_size() for t in (self.kinds, self.index, self.partial))

    def counts(self) -> dict[str, int]:
        """How many blocks of each kind it holds (over its Bm × Hm maps)."""
        return {
            name: int((self.kinds == code).sum())
            for name, code in (("full", FULL), ("partial", PARTIAL), ("empty", EMPTY))
        }

    def visible_fraction(self) -> float:
        """The share of (query, key) pairs the mask leaves visible (full blocks whole, partial ones counted), counted
        once ("auto" weighs every call with it)."""
        if self._fraction is None:
            _, _, Lq, Lk = self.shape
            Bm, Hm = self.kinds.shape[:2]
            full = self._block_sizes() * (self.kinds == FULL)
            seen = float(full.sum()) + float(self.partial.sum())
            self._fraction = seen / (Bm * Hm * Lq * Lk) if Lq * Lk else 0.0
        return self._fraction

    def _block_sizes(self) -> torch.Tensor:
        """(nq, nk) the number of real (query, key) pairs in each block (edge blocks are cut by Lq, Lk)."""
        _, _, Lq, Lk = self.shape
        rows = (Lq - torch.arange(self.kinds.shape[2]) * self.block).clamp(max=self.block)
        cols = (Lk - torch.arange(self.kinds.shape[3]) * self.block).clamp(max=self.block)
        return (rows[:, None] * cols[None, :]).to(self.kinds.device)

    def dense(self, rows: torch.Tensor | None = None, cols: torch.Tensor | None = None) -> torch.Tensor:
        """bool (Bm, Hm, R, C), True = may look, on query indices `rows` × key indices `cols` (None: all), read
        from the block map: True in full blocks, the stored mask in partial ones, False in empty ones."""
        _, _, Lq, Lk = self.shape
        rows = torch.arange(Lq, device=self.device) if rows is None else rows.to(self.device)
        cols = torch.arange(Lk, device=self.device) if cols is None else cols.to(self.device)
        bq, bk = rows // self.block, cols // self.block
        kinds = self.kinds[:, :, bq][:, :, :, bk]  # (Bm, Hm, R, C)
        visible = kinds == FULL
        if self.partial.shape[0]:
            index = self.index[:, :, bq][:, :, :, bk].long()
            inner = self.partial[index.clamp(min=0), (rows % self.block)[:, None], (cols % self.block)[None, :]]
            visible = visible | ((kinds == PARTIAL) & inner)
        return visible

    def hidden_blocks(self, q0: int, q1: int, k0: int, k1: int) -> bool:
        """Whether every query of [q0, q1) and key of [k0, k1) lies in an empty block (for every batch item and
        head): such a tile may be skipped."""
        part = self.kinds[:, :, q0 // self.block : -(-q1 // self.block), k0 // self.block : -(-k1 // self.block)]
        return bool((part == EMPTY).all())

    def one_head(self, head: int) -> BlockMask:
        """This block mask for query head `head` alone (its map when it differs by head; its mask_mod reading
        head `head` where it is asked for head 0)."""
        if self.kinds.shape[1] == 1:
            return self
        B, _, Lq, Lk = self.shape
        kinds, index = self.kinds[:, head : head + 1], self.index[:, head : head + 1]
        used = index[index >= 0].long()
        remap = torch.full((self.partial.shape[0],), -1, dtype=torch.int32, device=self.device)
        remap[used] = torch.arange(used.numel(), dtype=torch.int32, device=self.device)
        index = torch.where(index >= 0, remap[index.long().clamp(min=0)], index)
        return BlockMask(HeadShifted(self.mask_mod, head), (B, 1, Lq, Lk), kinds, index, self.partial[used])

    def draw(self, b: int = 0, h: int = 0) -> str:
        """Batch item b's, head h's blocks: one row per query block, F full, P partial, . empty."""
        kinds = self.kinds[min(b, self.kinds.shape[0] - 1), min(h, self.kinds.shape[1] - 1)]
        return "\n".join(" ".join(KIND_CHARS[int(x)] for x in row) for row in kinds.tolist())


class HeadShifted:
    """A FlexAttention mod read for one head: called with head index h, it asks `mod` for head h + `head`
    (`ScoreRule.one_head` keeps a mask_mod's or score_mod's heads right)."""

    def __init__(self, mod, head: int):
        self.mod, self.head = mod, head
        self.__qualname__ = f"{_describe_mod(mod)} (head {head})"

    def __call__(self, *args):
        *lead, h, q, kv = args
        return self.mod(*lead, h + self.head, q, kv)


def block_mask(mask_mod, B: int | None, H: int | None, Lq: int, Lk: int, device=None) -> BlockMask:
    """mask_mod evaluated once into a `BlockMask` for (B, H, Lq, Lk) (None for B or H: evaluated for item/head 0
    and used for all, as FlexAttention's create_block_mask takes it). The call is vectorised — mask_mod(b, h,
    q_idx, kv_idx) on broadcast index tensors, a chunk of query rows at a time (TILE_BUDGET_BYTES) — and falls back
    to FlexAttention's vmap over each index where that raises. A TypeError / ValueError names a mask_mod that is not
    callable, returns no bool tensor or a shape that does not broadcast."""
    if not callable(mask_mod):
        raise TypeError(f"mask_mod must be callable as mask_mod(b, h, q_idx, kv_idx), got {type(mask_mod).__name__}")
    B = 1 if B is None else checks.integer("B", B, low=1)
    H = 1 if H is None else checks.integer("H", H, low=1)
    Lq, Lk = checks.integer("Lq", Lq, low=0), checks.integer("Lk", Lk, low=0)
    device = torch.device("cpu") if device is None else torch.device(device)
    n = MASK_BLOCK
    nq, nk = -(-Lq // n), -(-Lk // n)
    # query rows per evaluation: B·H·rows·Lk bools within one tile's budget (a whole (Lq, Lk) at 32,768 is 1 GiB)
    step = max(1, TILE_BUDGET_BYTES // max(1, B * H * n * max(Lk, 1))) * n
    kinds_parts, index_parts, partial_parts, Bm, Hm, count = [], [], [], 1, 1, 0
    evaluated = []
    for q0 in range(0, Lq, step):
        q1 = min(Lq, q0 + step)
        out = _evaluated(mask_mod, B, H, q0, q1, Lk, device)
        evaluated.append(out)
        Bm, Hm = max(Bm, out.shape[0]), max(Hm, out.shape[1])
    for q0, out in zip(range(0, Lq, step), evaluated, strict=True):
        q1 = min(Lq, q0 + step)
        rows = -(-(q1 - q0) // n) * n
        if rows == q1 - q0 and nk * n == Lk:  # no edge to pad: the answer as it is (copied only where broadcast)
            grid = out.expand(Bm, Hm, rows, Lk).contiguous()
        else:
            grid = torch.zeros(Bm, Hm, rows, nk * n, dtype=torch.bool, device=device)
            grid[:, :, : q1 - q0, :Lk] = out.expand(Bm, Hm, q1 - q0, Lk)
        split = grid.view(Bm, Hm, rows // n, n, nk, n)
        seen = split.sum(dim=5, dtype=torch.int32).sum(dim=3)  # the contiguous axis first: (Bm, Hm, nq', nk)
        blocks = split.transpose(3, 4)  # (Bm, Hm, nq', nk, n, n)
        size = _sizes(q0, q1, Lk, n, device)  # (nq', nk) real pairs per block
        kinds = torch.where(seen == 0, EMPTY, torch.where(seen == size, FULL, PARTIAL)).to(torch.uint8)
        where = kinds == PARTIAL
        index = torch.full(kinds.shape, -1, dtype=torch.int32, device=device)
        index[where] = torch.arange(count, count + int(where.sum()), dtype=torch.int32, device=device)
        count += int(where.sum())
        kinds_parts.append(kinds)
        index_parts.append(index)
        partial_parts.append(blocks[where])  # in the order of `index`: (b, h, query block, key block)
    if not kinds_parts:
        kinds = torch.zeros(Bm, Hm, nq, nk, dtype=torch.uint8, device=device)
        return BlockMask(mask_mod, (B, H, Lq, Lk), kinds, kinds.int() - 1, torch.zeros(0, n, n, dtype=torch.bool))
    return BlockMask(
        mask_mod,
        (B, H, Lq, Lk),
        torch.cat(kinds_parts, dim=2),
        torch.cat(index_parts, dim=2),
        torch.cat(partial_parts).contiguous(),
    )


def _sizes(q0: int, q1: int, Lk: int, n: int, device) -> torch.Tensor:
    rows = (q1 - q0 - torch.arange(0, q1 - q0, n, device=device)).clamp(max=n)
    cols = (Lk - torch.arange(0, Lk, n, device=device)).clamp(max=n)
    return rows[:, None] * cols[None, :]


class _BlockMaskCache:
    """Block masks made for `selfattn.attention(mask_mod=...)`, by (mask_mod, the versions of the tensors its
    closure and defaults hold, B, H, Lq, Lk, device), the least recently used dropped first past
    BLOCK_MASK_CACHE_BYTES; every change under its lock (calls come from any thread)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.lock = threading.Lock()
        self.kept: collections.OrderedDict[tuple, BlockMask] = collections.OrderedDict()
        self.bytes = 0

    def get(self, key: tuple) -> BlockMask | None:
        with self.lock:
            found = self.kept.get(key)
            if found is not None:
                self.kept.move_to_end(key)
            return found

    def put(self, key: tuple, made: BlockMask) -> None:
        if made.nbytes > self.limit:
            return
        with self.lock:
            old = self.kept.pop(key, None)
            self.bytes -= 0 if old is None else old.nbytes
            self.kept[key] = made
            self.bytes += made.nbytes
            while self.bytes > self.limit:
                _, dropped = self.kept.popitem(last=False)
                self.bytes -= dropped.nbytes

    def clear(self) -> None:
        with self.lock:
            self.kept.clear()
            self.bytes = 0


BLOCK_MASKS = _BlockMaskCache(BLOCK_MASK_CACHE_BYTES)
"""The block masks `cached_block_mask` keeps (at most BLOCK_MASK_CACHE_BYTES)."""


def held_tensors(mask_mod) -> tuple:
    """(id, version) of each tensor mask_mod's closure and defaults hold: a document-id tensor changed in place
    (its version moves) makes a new key, so a kept block mask is never stale for it."""
    cells = [c.cell_contents for c in (getattr(mask_mod, "__closure__", None) or ()) if _filled(c)]
    held = cells + list(getattr(mask_mod, "__defaults__", None) or ())
    return tuple((id(t), t._version) for t in held if isinstance(t, torch.Tensor))


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def cached_block_mask(mask_mod, B: int, H: int, Lq: int, Lk: int, device) -> BlockMask:
    """`block_mask(mask_mod, B, H, Lq, Lk, device)`, kept for the next call with the same mask_mod (the same
    object, holding the same tensors unchanged) and shape. A mask_mod that reads a global which changes is not
    seen to change: give it as a new function, or build `block_mask` yourself and pass block_mask=."""
    if not callable(mask_mod):
        raise TypeError(f"mask_mod must be callable as mask_mod(b, h, q_idx, kv_idx), got {type(mask_mod).__name__}")
    try:
        key = (mask_mod, held_tensors(mask_mod), B, H, Lq, Lk, str(device))
        hash(key)
    except TypeError:  # an unhashable callable: evaluated every call
        return block_mask(mask_mod, B, H, Lq, Lk, device)
    found = BLOCK_MASKS.get(key)
    if found is not None:
        return found
    made = block_mask(mask_mod, B, H, Lq, Lk, device)
    BLOCK_MASKS.put(key, made)
    return made
