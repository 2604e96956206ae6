"""The per-head numbers of one attention call, read from its weights while they exist.

    d = digest(weights_of, visible, L, H)      -> Digest: five means per head, and each head's thumbnail
    d.summary(head)                            -> {entropy, max_weight, first_token, previous, self, rows}

Transformers' eager attention with `output_attentions` keeps every layer's L×L weights. The explainer keeps
none: at the capture point it asks the attention call for its weights (when they fit DIGEST_WEIGHTS_BYTES),
reads what the views show from them — the summaries of `analysis.summary` and a thumbnail per head — and lets
them go; the exact stages of any row are recomputed later from Q, K and the lse (`LayerTrace.stages`).
A call too large for that is digested the same way from recomputed weights (`summary.scan`).

For each head, over the query rows that can see at least two keys (a row that sees one has no choice):

    entropy      mean −Σ_j w_ij log₂ w_ij in bits      max_weight   mean of each row's largest weight
    first_token  mean w_i0                             previous     mean w_i,i−1 (row 0: w_00)
    self         mean w_ii
    thumbnail    (T, T) float16, T = min(L, THUMBNAIL): the mean weight of each cell when the L×L weights
                 are cut into T×T cells (position i in cell i·T // L), hidden pairs counting 0; the exact
                 weights (in float16) when L <= THUMBNAIL

Rows are read ROW_BLOCK at a time, so a long input never holds more than H × ROW_BLOCK × L weights here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...limits import DIGEST_WEIGHTS_BYTES

__all__ = ["Digest", "digest", "row_nats", "THUMBNAIL", "ROW_BLOCK", "DIGEST_WEIGHTS_BYTES", "STATISTICS"]

THUMBNAIL = 64
"""Cells per side of a head's thumbnail: what the grid picture and the page's overview show."""
ROW_BLOCK = 256
STATISTICS = ("entropy", "max_weight", "first_token", "previous", "self")


@dataclass(frozen=True)
class Digest:
    """means (5, H) float64 in STATISTICS order; rows (H,) the rows counted; thumbnails (H, T, T) float16."""

    means: torch.Tensor
    rows: torch.Tensor
    thumbnails: torch.Tensor

    def summary(self, head: int) -> dict:
        """The numbers of `analysis.summary.head_summary` for one head."""
        out = {name: float(self.means[k, head]) for k, name in enumerate(STATISTICS)}
        return out | {"rows": int(self.rows[head])}

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.means, self.rows, self.thumbnails))


def row_nats(weights: torch.Tensor) -> torch.Tensor:
    """(..., R) each row's entropy −Σ_j w_j ln w_j in nats (0 ln 0 = 0) of weights (..., R, L): the one entropy
    the digest and the head types (`analysis.head_types.measure`) read. As w · ln max(w, tiny): a 0 weight costs
    ln's slow path (and `torch.special.entr` is not vectorised), 14 × 512² weights in 4 ms instead of 14."""
    tiny = torch.finfo(weights.dtype).tiny
    return weights.clamp_min(tiny).log_().mul_(weights).sum(-1).neg_()


def digest(
    weights_of: Callable[[int, int], torch.Tensor],
    visible: torch.Tensor,
    length: int,
    n_heads: int,
    thumb: int = THUMBNAIL,
    nats: torch.Tensor | None = None,
) -> Digest:
    """The Digest of one call. weights_of(start, stop) -> (H, stop − start, L) weights of those query rows
    (any float dtype; a view is best); visible (H or 1, L, L) bool, True = may look (the rule each head was
    computed with); nats (H, L) each row's `row_nats` when the caller has them (else computed here). Per
    element: one entropy term, one max, and the cells summed by a matmul with the (L, T) 0/1 matrix of the cells."""
    L, H = length, n_heads
    device = visible.device
    T = min(L, thumb)
    bins = torch.arange(L, device=device) * T // L  # (L,) cell of each position
    pool = torch.nn.functional.one_hot(bins, T).float()  # (L, T)
    sums = torch.zeros(len(STATISTICS), H, dtype=torch.float64, device=device)
    counted = torch.zeros(H, dtype=torch.float64, device=device)
    pooled = torch.zeros(H, T, T, dtype=torch.float32, device=device)
    for start in range(0, L, ROW_BLOCK):
        stop = min(start + ROW_BLOCK, L)
        rows = torch.arange(start, stop, device=device)
        w = weights_of(start, stop).float()  # (H, R, L)
        keep = (visible[:, start:stop].sum(-1) >= 2).expand(H, stop - start).double()  # (H, R)
        at = torch.arange(stop - start, device=device)
        per_row = torch.stack(
            [
                (row_nats(w) if nats is None else nats[:, start:stop].float()) / math.log(2),  # −Σ w ln w, in bits
                w.amax(-1),
                w[..., 0],
                w[:, at, (rows - 1).clamp_min(0)],
                w[:, at, rows],
            ]
        )  # (5, H, R)
        sums += (per_row.double() * keep).sum(-1)
        counted += keep.sum(-1)
        pooled.index_add_(1, bins[start:stop], w @ pool)  # (H, R, T) each cell's keys summed, into its row cell
    size = pool.sum(0)  # (T,) positions per cell
    means = torch.where(counted > 0, sums / counted.clamp_min(1), torch.zeros_like(sums))
    thumbnails = (pooled / (size[:, None] * size[None, :])).clamp(0.0, 1.0).half()
    return Digest(means=means, rows=counted.long(), thumbnails=thumbnails)
