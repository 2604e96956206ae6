"""The machine's matrix-multiply speed per dtype, measured in the same run: the yardstick for "% of peak"
(a bf16 case against the bf16 GEMM, which on a CPU with AVX512-BF16 or AMX runs about twice as fast)."""

from __future__ import annotations

import torch

from .timing import best_seconds

__all__ = ["gemm_peak", "GEMM_SIZE", "QUICK_GEMM_SIZE", "DTYPE_NAMES"]

GEMM_SIZE = 2048
"""n of the n×n @ n×n fp32 product timed for the peak (full bench)."""

QUICK_GEMM_SIZE = 512
"""The same for `--quick`."""


DTYPE_NAMES = {torch.float32: "fp32", torch.float64: "fp64", torch.bfloat16: "bf16", torch.float16: "fp16"}
"""How a dtype is written in the bench's tables."""


def gemm_peak(n: int = GEMM_SIZE, min_seconds: float = 1.0, dtype: torch.dtype = torch.float32) -> dict:
    """{"gflops", "n", "repeats", "what", "dtype"}: best GFLOP/s of an n×n matmul in `dtype` on the current
    threads (torch.mm: oneDNN / MKL / OpenBLAS, whichever this torch build uses for that dtype)."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to(dtype) for _ in range(2))
    out = torch.empty(n, n, dtype=dtype)
    seconds, repeats = best_seconds(lambda: torch.mm(a, b, out=out), min_seconds)
    name = DTYPE_NAMES.get(dtype, str(dtype))
    return {
        "gflops": 2.0 * n**3 / seconds / 1e9,
        "n": n,
        "repeats": repeats,
        "dtype": name,
        "what": f"{name} torch.mm {n}×{n} @ {n}×{n}, best of {repeats}",
    }
