"""vector_summary.top_dimensions against a stable sort of every |value| (ties: the lower dimension first)."""

import numpy as np
import pytest

from selfattn.explainer.views.vector_summary import TOP_DIMENSIONS, top_dimensions


def _sorted(vectors: np.ndarray) -> np.ndarray:
    return np.argsort(-np.abs(vectors), axis=-1, kind="stable")[:, : min(TOP_DIMENSIONS, vectors.shape[-1])]


@pytest.mark.parametrize("seed", range(20))
def test_the_top_dimensions_are_those_of_a_stable_sort(seed):
    rng = np.random.default_rng(seed)
    L, d = int(rng.integers(1, 40)), int(rng.integers(1, 70))
    ties = rng.integers(-3, 4, size=(L, d)).astype(np.float64)  # many equal |values|, ±, zeros
    for vectors in (ties, rng.standard_normal((L, d)), np.zeros((L, d)), ties * 1e-30):
        got = top_dimensions(vectors)
        assert got.dtype == np.int64 and np.array_equal(got, _sorted(vectors))


def test_short_and_empty_vectors():
    assert top_dimensions(np.array([[1.0, -5.0]])).tolist() == [[1, 0]]
    assert top_dimensions(np.zeros((0, 8))).shape == (0, min(TOP_DIMENSIONS, 8))
