"""What this CPU runs in hardware, as the kernels and the cost model ask it: torch.cpu's instruction-set probes,
and whether a half-precision (bfloat16/float16) GEMM with float32 accumulation runs in hardware (AVX512-BF16,
AMX-BF16, AMX-FP16), the fact that decides both native's half path and how fast each backend runs a half dtype
(`Cost.hardware_dtype_speed`). Probed once per process; never times anything."""

from __future__ import annotations

import functools

import torch

__all__ = ["has", "half_gemm_isa", "has_half_gemm", "HALF_DTYPES", "HALF_ISA"]

HALF_DTYPES = (torch.bfloat16, torch.float16)

HALF_ISA = (("AVX512-BF16", "avx512_bf16"), ("AMX-BF16", "amx_tile"), ("AMX-FP16", "amx_fp16"))
"""(name, torch.cpu probe) of the instructions that run half-precision GEMMs with float32 accumulation."""


def has(feature: str) -> bool:
    """One of torch.cpu's instruction-set probes (private: False where this torch lacks it)."""
    probe = getattr(torch.cpu, f"_is_{feature}_supported", None)
    return bool(probe()) if probe is not None else False


@functools.cache
def half_gemm_isa(dtype: torch.dtype) -> str | None:
    """The instructions that run a `dtype` GEMM with float32 accumulation on this CPU, or None (probed once:
    every half-precision call asks). The GEMMs meant are MKL's (native's) and oneDNN's (SDPA's): both use them."""
    if not torch.backends.mkl.is_available():
        return None
    if dtype == torch.bfloat16:
        return "AMX-BF16" if has("amx_tile") else ("AVX512-BF16" if has("avx512_bf16") else None)
    return "AMX-FP16" if dtype == torch.float16 and has("amx_fp16") else None


def has_half_gemm(dtype: torch.dtype) -> bool:
    """True when this CPU runs a `dtype` GEMM with float32 accumulation in hardware (False for float32 and
    float64, which need none)."""
    return dtype in HALF_DTYPES and half_gemm_isa(dtype) is not None
