"""Per-head summaries of a trace (the rule that picks the head to show is in `heads`).

For each head, over the query rows that can see at least two tokens (a row that sees one
token has no choice to make):

    entropy       mean −Σ_j w_ij log₂ w_ij, in bits (0 = all weight on one token)
    max_weight    mean of each row's largest weight (1 = perfectly concentrated)
    first_token   mean weight on the first token (heads that "park" attention there)
    previous      mean weight on the token just before the query (j = i − 1)
    self          mean weight on the query's own token (j = i)

Rows are processed in blocks, so summaries of a 1,000-token input never hold more than
`ROW_BLOCK` × L weights at once. `scan` computes the summaries and each head's thumbnail (its weights
pooled into at most THUMBNAIL × THUMBNAIL cells, float16: what the grid shows) in the same pass.
"""

from __future__ import annotations

import math

import torch

from ..capture.trace import LayerTrace, ModelTrace

ROW_BLOCK = 256
SINK_LIMIT = 0.5
"""A head whose mean attention to the first token reaches this is not picked (`heads.pick`)."""


def head_summary(layer: LayerTrace, head: int) -> dict:
    """The five numbers above for one head, in float32 (summaries, not the exact stages).

    Entropy comes from the saved log-sum-exp: with w = exp(s − lse), −Σ w ln w = lse − Σ w s,
    so no logarithm of the L×L weights is taken.
    """
    return _scan_head(layer, head, None)[0]


def _scan_head(layer: LayerTrace, head: int, thumb: int | None) -> tuple[dict, torch.Tensor | None]:
    """(head_summary, its thumbnail or None): one pass over the rows, ROW_BLOCK at a time.

    thumbnail  (T, T) float16, T = min(L, thumb): the mean weight of each cell when the L×L weights are cut
               into T×T cells (positions i·T // L), hidden pairs counting 0; the exact weights when L ≤ thumb."""
    L = layer.length
    visible_all = layer.head_rule(head)[2]  # (L, L)
    total = {"entropy": 0.0, "max_weight": 0.0, "first_token": 0.0, "previous": 0.0, "self": 0.0}
    counted = 0
    T = None if thumb is None else min(L, thumb)
    bins = None if T is None else torch.arange(L, device=visible_all.device) * T // L  # (L,) cell of each position
    pooled = None if T is None else torch.zeros(T, T, dtype=torch.float32, device=visible_all.device)
    for start in range(0, L, ROW_BLOCK):
        rows = torch.arange(start, min(start + ROW_BLOCK, L))
        keep = visible_all[rows].sum(-1) >= 2  # (R,) rows with a choice to make
        if pooled is None and not bool(keep.any()):
            continue
        st = layer.stages(head, rows, dtype=torch.float32, weighted=False)
        if pooled is not None:  # every row, into its cell: sums over each cell's keys, then over its rows
            cells = torch.zeros(len(rows), T, dtype=torch.float32).index_add_(1, bins, st["weights"])
            pooled.index_add_(0, bins[rows], cells)
        if not bool(keep.any()):
            continue
        rows = rows[keep]
        s, visible, w = st["scaled"][keep], st["mask"][keep], st["weights"][keep]  # (R, L) ×3
        lse = layer.lse[head, rows].float()  # (R,)
        nats = lse - torch.where(visible, w * s, torch.zeros_like(s)).sum(-1)
        total["entropy"] += float(nats.sum()) / math.log(2)
        total["max_weight"] += float(w.max(-1).values.sum())
        total["first_token"] += float(w[:, 0].sum())
        total["previous"] += float(w.gather(1, (rows - 1).clamp_min(0)[:, None]).sum())
        total["self"] += float(w.gather(1, rows[:, None]).sum())
        counted += len(rows)
    table = {name: value / counted if counted else 0.0 for name, value in total.items()} | {"rows": counted}
    if pooled is None:
        return table, None
    size = torch.bincount(bins, minlength=T).float()  # (T,) positions per cell
    return table, (pooled / (size[:, None] * size[None, :])).half()


def summaries(trace: ModelTrace) -> list[list[dict]]:
    """head_summary for every layer × head."""
    return [[head_summary(layer, h) for h in range(layer.n_heads)] for layer in trace.layers]


THUMBNAIL = 64
"""Cells per side of a head's thumbnail (`scan`): what the grid picture and the page's overview show."""


def scan(trace: ModelTrace, thumb: int = THUMBNAIL) -> tuple[list[list[dict]], list[list[torch.Tensor]]]:
    """(summaries, thumbnails) of every layer × head in one pass over each head's weights (the thumbnails:
    `_scan_head`), so a 512-token trace of 24 × 14 heads computes each head's weights once."""
    table, thumbs = [], []
    for layer in trace.layers:
        scanned = [_scan_head(layer, h, thumb) for h in range(layer.n_heads)]
        table.append([s for s, _ in scanned])
        thumbs.append([t for _, t in scanned])
    return table, thumbs
