"""The one table of tolerances, and the rule every fast path is judged by.

Style rule (DESIGN.md, 2): a fast path's error against the float64 reference may be at most
about twice the error of the naive path in the same dtype. The per-dtype floor covers the
cases where the naive path happens to be (nearly) exact and the fast path rounds differently.
Every other absolute tolerance a test uses is a named entry of TOL.
"""

from __future__ import annotations

import numpy as np
import torch

FLOOR = {
    torch.float64: 1e-12,
    torch.float32: 2e-5,
    torch.bfloat16: 2e-2,
    torch.float16: 3e-3,
}
"""Absolute error that any path may have in this dtype, whatever the naive path achieved."""

RATIO = 2.0
"""How much worse than the naive path (same dtype) a fast path may be."""

TOL = {
    "float64": 1e-12,          # two float64 computations of the same numbers (another order of sums)
    "float32": 1e-5,           # the same in float32, or float32 accumulation of half inputs
    "float64_grad": 1e-10,     # float64 gradients of two backends (longer chains of rounding)
    "float64_lse": 1e-13,      # a NumPy float64 log-sum-exp turned back into weights
    "float64_few_ops": 1e-14,  # float64 results a few operations apart (one row; a row sum)
    "float64_one_op": 1e-15,   # float64 results one rounding apart (tiny inputs, NumPy)
    "tutorial_digits": 1e-4,   # numbers the tutorial prints to three or four digits
    "float64_hostile": 1e-7,   # float64 with scores scaled up to 1e6 (hostile scale/softcap): rounding × 1e6
}
"""Named absolute tolerances for comparisons that are not "fast path against float64"."""


def agree(dtype: torch.dtype) -> float:
    """TOL for two computations of the same numbers whose accumulation is float64 or float32."""
    return TOL["float64"] if dtype == torch.float64 else TOL["float32"]


def max_error(x, ref) -> float:
    x = x.detach().double().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float64)
    ref = ref.detach().double().cpu().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref, dtype=np.float64)
    assert x.shape == ref.shape, f"shape {x.shape} != reference shape {ref.shape}"
    assert np.isfinite(x).all(), "non-finite values in the result"
    return float(np.max(np.abs(x - ref), initial=0.0))


def tolerance(dtype: torch.dtype, naive_error: float) -> float:
    return RATIO * naive_error + FLOOR[dtype]


def assert_close_to_reference(out, ref64, naive_out=None, *, dtype=None, what="output"):
    """out's error against the float64 reference is at most RATIO × naive's error + FLOOR[dtype]."""
    dtype = dtype or out.dtype
    naive_error = 0.0 if naive_out is None else max_error(naive_out, ref64)
    err = max_error(out, ref64)
    tol = tolerance(dtype, naive_error)
    assert err <= tol, (f"{what}: error {err:.3g} against float64 > tolerance {tol:.3g} "
                        f"(naive error {naive_error:.3g}, {dtype})")
