"""A long vector (x, the attention output, the layer output: d_model numbers) as the views summarise it: its norm
and its TOP_DIMENSIONS largest |values|, the same in the terminal (`tables`) and on the page (`packing`).

    top_dimensions(vectors (L, d)) -> (L, T) int64   each row's dimensions of largest |value|, largest first
"""

from __future__ import annotations

import numpy as np

__all__ = ["TOP_DIMENSIONS", "top_dimensions"]

TOP_DIMENSIONS = 3
"""How many dimensions of a long vector a view shows beside its norm (the JSON and --npz hold all of them)."""


def top_dimensions(vectors: np.ndarray) -> np.ndarray:
    """(L, T) int64: per row of `vectors` (L, d) the TOP_DIMENSIONS dimensions of largest |value|, largest first
    (ties: the lower dimension first, a stable sort)."""
    T = min(TOP_DIMENSIONS, vectors.shape[-1])
    return np.argsort(-np.abs(vectors), axis=-1, kind="stable")[:, :T]
