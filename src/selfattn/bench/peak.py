"""The machine's fp32 matrix-multiply speed, measured in the same run: the yardstick for "% of peak"."""

from __future__ import annotations

import torch

from .timing import best_seconds

__all__ = ["gemm_peak", "GEMM_SIZE", "QUICK_GEMM_SIZE"]

GEMM_SIZE = 2048
"""n of the n×n @ n×n fp32 product timed for the peak (full bench)."""

QUICK_GEMM_SIZE = 512
"""The same for `--quick`."""


def gemm_peak(n: int = GEMM_SIZE, min_seconds: float = 1.0) -> dict:
    """{"gflops", "n", "repeats", "what"}: best GFLOP/s of an fp32 n×n matmul on the current threads."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    out = torch.empty(n, n)
    seconds, repeats = best_seconds(lambda: torch.mm(a, b, out=out), min_seconds)
    return {
        "gflops": 2.0 * n**3 / seconds / 1e9,
        "n": n,
        "repeats": repeats,
        "what": f"fp32 torch.mm {n}×{n} @ {n}×{n}, best of {repeats}",
    }
