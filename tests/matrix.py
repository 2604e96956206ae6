"""The feature × dtype × shape matrix every backend is checked over, written once.

DTYPES, SHAPES, FEATURES      the axes; a shape is (B, Hq, Hkv, Lq, Lk, D, Dv)
over_the_matrix               the three parametrizations at once, as one decorator
matrix_case(feature, shape, dtype) -> (q, k, v, kwargs)   seeded inputs and `attention` arguments
"""

from __future__ import annotations

import pytest
import torch

from .helpers import make_inputs

DTYPES = [torch.float64, torch.float32, torch.bfloat16, torch.float16]

# (B, Hq, Hkv, Lq, Lk, D, Dv): lengths 1, 3, 15, 113, Lq ≠ Lk both ways, head dims 1, 3, 64, 80
SHAPES = [
    (1, 1, 1, 1, 1, 1, 1),
    (2, 2, 2, 3, 3, 3, 3),
    (1, 4, 2, 15, 15, 64, 64),
    (1, 2, 1, 113, 113, 80, 80),
    (2, 4, 4, 3, 15, 64, 32),
    (1, 3, 3, 15, 3, 3, 5),
]

FEATURES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(causal=True, window=4),
    "window-only": dict(window=2),
    "bool-mask": dict(mask="bool"),
    "additive-mask": dict(mask="additive", causal=True),
    "key-padding": dict(mask="padding"),
    "scale": dict(scale=0.3, causal=True),
    "softcap": dict(softcap=2.0, scale=1.5),
}


def make_mask(kind, shape, seed=1):
    """A bool (B, 1, Lq, Lk) mask with one row that sees nothing, an additive (1, Hq, Lq, Lk) one
    with some −inf, or key padding (B, 1, 1, Lk)."""
    B, Hq, _, Lq, Lk, _, _ = shape
    g = torch.Generator().manual_seed(seed)
    if kind == "bool":
        m = torch.rand(B, 1, Lq, Lk, generator=g) > 0.3
        m[..., 0, :] = False  # one query row sees nothing at all
        return m
    if kind == "additive":
        m = torch.randn(1, Hq, Lq, Lk, generator=g, dtype=torch.float64)
        m[torch.rand(1, Hq, Lq, Lk, generator=g) > 0.8] = float("-inf")
        return m
    if kind == "padding":
        lengths = torch.randint(1, Lk + 1, (B,), generator=g)
        return (torch.arange(Lk)[None] < lengths[:, None])[:, None, None, :]
    raise AssertionError(kind)


def resolve(features, shape, dtype):
    """The `attention` arguments of a FEATURES entry, its named mask made for this shape and dtype."""
    f = dict(features)
    if isinstance(f.get("mask"), str):
        m = make_mask(f["mask"], shape)
        f["mask"] = m if m.dtype == torch.bool else m.to(dtype)
    return f


def matrix_case(feature, shape, dtype):
    """(q, k, v, kwargs) of one cell of the matrix."""
    return (*make_inputs(*shape, dtype=dtype), resolve(FEATURES[feature], shape, dtype))


def over_the_matrix(test):
    """Parametrize `test(dtype, feature, shape)` over every cell of the matrix."""
    test = pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))(test)
    test = pytest.mark.parametrize("feature", sorted(FEATURES))(test)
    return pytest.mark.parametrize("dtype", DTYPES, ids=str)(test)
