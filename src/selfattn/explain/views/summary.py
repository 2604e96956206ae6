"""Per-head summaries of a trace (the rule that picks the head to show is in `heads`).

For each head, over the query rows that can see at least two tokens (a row that sees one
token has no choice to make):

    entropy       mean −Σ_j w_ij log₂ w_ij, in bits (0 = all weight on one token)
    max_weight    mean of each row's largest weight (1 = perfectly concentrated)
    first_token   mean weight on the first token (heads that "park" attention there)
    previous      mean weight on the token just before the query (j = i − 1)
    self          mean weight on the query's own token (j = i)

Rows are processed in blocks, so summaries of a 1,000-token input never hold more than
`ROW_BLOCK` × L weights at once.
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
    L = layer.length
    visible_all = layer.head_rule(head)[2]  # (L, L)
    total = {"entropy": 0.0, "max_weight": 0.0, "first_token": 0.0, "previous": 0.0, "self": 0.0}
    counted = 0
    for start in range(0, L, ROW_BLOCK):
        rows = torch.arange(start, min(start + ROW_BLOCK, L))
        keep = visible_all[rows].sum(-1) >= 2  # (R,) rows with a choice to make
        if not bool(keep.any()):
            continue
        rows = rows[keep]
        st = layer.stages(head, rows, dtype=torch.float32, weighted=False)
        s, visible, w, lse = st["scaled"], st["mask"], st["weights"], layer.lse[head, rows].float()  # (R, L) ×3, (R,)
        nats = lse - torch.where(visible, w * s, torch.zeros_like(s)).sum(-1)
        total["entropy"] += float(nats.sum()) / math.log(2)
        total["max_weight"] += float(w.max(-1).values.sum())
        total["first_token"] += float(w[:, 0].sum())
        total["previous"] += float(w.gather(1, (rows - 1).clamp_min(0)[:, None]).sum())
        total["self"] += float(w.gather(1, rows[:, None]).sum())
        counted += len(rows)
    return {name: value / counted if counted else 0.0 for name, value in total.items()} | {"rows": counted}


def summaries(trace: ModelTrace) -> list[list[dict]]:
    """head_summary for every layer × head."""
    return [[head_summary(layer, h) for h in range(layer.n_heads)] for layer in trace.layers]
