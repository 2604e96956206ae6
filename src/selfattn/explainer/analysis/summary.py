"""Per-head summaries of a trace (the rule that picks the head to show is in `heads`).

For each head, over the query rows that can see at least two tokens (a row that sees one
token has no choice to make):

    entropy       mean −Σ_j w_ij log₂ w_ij, in bits (0 = all weight on one token)
    max_weight    mean of each row's largest weight (1 = perfectly concentrated)
    first_token   mean weight on the first token (heads that "park" attention there)
    previous      mean weight on the token just before the query (j = i − 1)
    self          mean weight on the query's own token (j = i)

They are read, with each head's thumbnail (its weights pooled into at most THUMBNAIL × THUMBNAIL cells,
float16: what the grid shows), from the attention call's own weights at the capture point
(`capture.digest`): the weights are computed once, in the forward pass, as transformers' eager attention
computes them, and are not kept. A call too large to ask for its weights is digested from weights
recomputed from Q, K and the lse, `ROW_BLOCK` rows at a time.
"""

from __future__ import annotations

import torch

from ..capture.digest import THUMBNAIL, Digest, digest
from ..trace_types import LayerTrace, ModelTrace

__all__ = ["head_summary", "summaries", "scan", "layer_digest", "SINK_LIMIT", "THUMBNAIL"]

SINK_LIMIT = 0.5
"""A head whose mean attention to the first token reaches this is not picked (`heads.pick`)."""


def layer_digest(layer: LayerTrace) -> Digest:
    """The layer's Digest: the one read at the capture point from the call's own weights, or (a call too
    large to ask for them) the same numbers from weights recomputed from Q, K and the lse, in float32."""
    if layer.digest is not None:
        return layer.digest
    visible = torch.stack([layer.head_rule(h)[2] for h in range(layer.n_heads)])  # (H, L, L)

    def weights_of(start: int, stop: int):
        rows = slice(start, stop)
        return torch.stack(
            [layer.stages(h, rows, dtype=torch.float32, weighted=False)["weights"] for h in range(layer.n_heads)]
        )

    return digest(weights_of, visible, layer.length, layer.n_heads)


def head_summary(layer: LayerTrace, head: int) -> dict:
    """The five numbers above for one head (its layer's Digest), and how many rows they are the mean of."""
    return layer_digest(layer).summary(head)


def summaries(trace: ModelTrace) -> list[list[dict]]:
    """head_summary for every layer × head."""
    return scan(trace)[0]


def scan(trace: ModelTrace) -> tuple[list[list[dict]], list[list[torch.Tensor]]]:
    """(summaries [layer][head], thumbnails [layer][head] (T, T) float16) of every head (`layer_digest`)."""
    table, thumbs = [], []
    for layer in trace.layers:
        d = layer_digest(layer)
        table.append([d.summary(h) for h in range(layer.n_heads)])
        thumbs.append(list(d.thumbnails))
    return table, thumbs
