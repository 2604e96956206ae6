"""A long vector (x, the attention output, the layer output: d_model numbers) as the views summarise it: its norm
and its TOP_DIMENSIONS largest |values|, the same in the terminal (`tables`) and on the page (`packing`).

    top_dimensions(vectors (L, d)) -> (L, T) int64   each row's dimensions of largest |value|, largest first
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["TOP_DIMENSIONS", "top_dimensions"]

TOP_DIMENSIONS = 3
"""How many dimensions of a long vector a view shows beside its norm (the JSON and --npz hold all of them)."""


def top_dimensions(vectors: np.ndarray) -> np.ndarray:
    """(L, T) int64: per row of `vectors` (L, d) the TOP_DIMENSIONS dimensions of largest |value|, largest first
    (ties: the lower dimension first, a stable sort)."""
    L, d = vectors.shape
    T = min(TOP_DIMENSIONS, d)
    if L == 0 or T == 0:
        return np.zeros((L, T), dtype=np.int64)
    a = np.abs(vectors)
    kth = torch.topk(torch.from_numpy(a), T, dim=-1).values[:, -1].numpy()  # each row's T-th largest |value|
    rows, cols = np.nonzero(a >= kth[:, None])  # at least T a row (more where values tie with it)
    order = np.lexsort((cols, -a[rows, cols], rows))  # by row, then largest first, then the lower dimension
    rows, cols = rows[order], cols[order]
    first = np.searchsorted(rows, np.arange(L))
    return cols[first[:, None] + np.arange(T)].astype(np.int64)
