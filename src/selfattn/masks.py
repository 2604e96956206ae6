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

import enum

import torch

from . import checks
from .compiling import values_readable

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
