"""What this CPU runs in hardware, as the kernels and the cost model ask it: torch's CPU capability (its public
`torch.backends.cpu.get_cpu_capability()`, which answers AVX2 and AVX512), torch.cpu's probes of the extensions
no public API answers (AVX512-BF16, AMX), and whether a half-precision (bfloat16/float16) GEMM with float32
accumulation runs in hardware (AVX512-BF16, AMX-BF16, AMX-FP16), the fact that decides both native's half path and
how fast each backend runs a half dtype (`Cost.hardware_dtype_speed`). Never times anything.

Probed once per process, outside any traced region: the functions a traced call reaches (`has`, `capability`,
`half_gemm_isa`, `name`) are marked constant when compiled, so torch.compile and torch.export call them eagerly
and keep their answer as a constant of the graph (torch.cpu's probes are private functions Dynamo refuses to
trace: "Attempted to call function marked as skipped"), and torch.func's transforms never see them.

Forcing an answer — for tests, and to see another machine's path — makes the probe answer as a CPU of one of
`ISA_NAMES`: "AVX2", "AVX512", "AVX512-BF16", "AMX" (AMX-BF16), "AMX-FP16":

    SELFATTN_CPU_ISA=AVX2 python ...    the environment variable, read once, at the process's first probe
    with cpu.forced("AMX"): ...         in a block, for this thread (a context variable)

Only the Python side's decisions follow a forced answer (native's tiles and few-row loops, the half-GEMM path, the
cost model); the compiled kernel still picks its instructions on cpuid and is built for the real CPU, so a forced
answer never runs an instruction the CPU lacks. A graph compiled keeps the answer it was compiled with: force before
compiling (or in a fresh process).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ..compiling import constant_when_compiled

__all__ = [
    "has",
    "capability",
    "name",
    "half_gemm_isa",
    "has_half_gemm",
    "forced",
    "Isa",
    "ISA_NAMES",
    "ENVIRONMENT",
    "CAPABILITY_FEATURES",
    "PRIVATE_PROBES",
    "HALF_DTYPES",
    "HALF_ISA",
]

HALF_DTYPES = (torch.bfloat16, torch.float16)

HALF_ISA = (("AVX512-BF16", "avx512_bf16"), ("AMX-BF16", "amx_tile"), ("AMX-FP16", "amx_fp16"))
"""(name, torch.cpu probe) of the instructions that run half-precision GEMMs with float32 accumulation."""

PROBES = ("avx2", "avx512", "avx512_bf16", "amx_tile", "amx_fp16")
"""The features the kernels ask about (`has`), named as torch.cpu's probes name them."""

CAPABILITY_FEATURES = {"AVX2": ("avx2",), "AVX512": ("avx2", "avx512")}
"""The features torch's public CPU capability answers, by capability: what torch's own vectorised kernels run (it
follows ATEN_CPU_CAPABILITY, as the native kernel's flags do). "DEFAULT" and the others: none of them."""

PRIVATE_PROBES = ("avx512_bf16", "amx_tile", "amx_fp16")
"""The features no public API answers (torch.backends.cpu reports one capability, not its extensions): asked of
torch.cpu's private `_is_<probe>_supported`, False where this torch lacks one."""

ENVIRONMENT = "SELFATTN_CPU_ISA"
"""The environment variable that forces the probe's answer for the whole process (one of ISA_NAMES)."""


@dataclass(frozen=True)
class Isa:
    """A CPU as the kernels see it.

    name        "this CPU" where probed, else the forced answer's name (one of ISA_NAMES)
    capability  torch.backends.cpu.get_cpu_capability()'s answer: "AVX2", "AVX512", "DEFAULT", ...
    features    the probes of PROBES that answer True
    mkl         torch.backends.mkl.is_available(): the half GEMMs meant are MKL's (native's) and oneDNN's (SDPA's)"""

    name: str
    capability: str
    features: frozenset[str]
    mkl: bool


_FORCED_FEATURES = {
    "AVX2": ("AVX2", ("avx2",)),
    "AVX512": ("AVX512", ("avx2", "avx512")),
    "AVX512-BF16": ("AVX512", ("avx2", "avx512", "avx512_bf16")),
    "AMX": ("AVX512", ("avx2", "avx512", "avx512_bf16", "amx_tile")),
    "AMX-FP16": ("AVX512", ("avx2", "avx512", "avx512_bf16", "amx_tile", "amx_fp16")),
}

ISA_NAMES = tuple(_FORCED_FEATURES)
"""The answers the probe can be forced to give (`forced`, ENVIRONMENT)."""


def _answer(isa_name: str) -> Isa:
    """The probe's answer for a CPU of `isa_name` (one of ISA_NAMES)."""
    if not isinstance(isa_name, str) or isa_name not in _FORCED_FEATURES:
        raise ValueError(f"the CPU instruction set must be one of {', '.join(ISA_NAMES)}, got {isa_name!r}")
    capability, features = _FORCED_FEATURES[isa_name]
    return Isa(isa_name, capability, frozenset(features), torch.backends.mkl.is_available())


def _this_cpu() -> Isa:
    """This CPU's answer: torch's public capability (AVX2, AVX512), and torch.cpu's private probes for what it does
    not answer (PRIVATE_PROBES; False where this torch lacks one)."""
    capability = torch.backends.cpu.get_cpu_capability()
    features = set(CAPABILITY_FEATURES.get(capability, ()))
    for probe in PRIVATE_PROBES:
        fn = getattr(torch.cpu, f"_is_{probe}_supported", None)
        if fn is not None and fn():
            features.add(probe)
    return Isa("this CPU", capability, frozenset(features), torch.backends.mkl.is_available())


class _Probe:
    """This process's answer: ENVIRONMENT's where it is set, else this CPU's, made once (under a lock) and kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._isa: Isa | None = None

    def get(self) -> Isa:
        isa = self._isa
        if isa is None:
            with self._lock:
                if self._isa is None:
                    wanted = os.environ.get(ENVIRONMENT)
                    self._isa = _this_cpu() if not wanted else _answer(wanted)
                isa = self._isa
        return isa


_PROBE = _Probe()
_FORCED: contextvars.ContextVar[Isa | None] = contextvars.ContextVar("selfattn_cpu_isa", default=None)


def isa() -> Isa:
    """The answer in force here: `forced`'s, else the process's (ENVIRONMENT's, else this CPU's, probed once)."""
    forced_isa = _FORCED.get()
    return forced_isa if forced_isa is not None else _PROBE.get()


@contextlib.contextmanager
def forced(isa_name: str) -> Iterator[Isa]:
    """Within the block (this thread, or this asyncio task), the probe answers as a CPU of `isa_name` (one of
    ISA_NAMES; ValueError otherwise); yields that answer. A graph compiled inside keeps it."""
    token = _FORCED.set(_answer(isa_name))
    try:
        yield isa()
    finally:
        _FORCED.reset(token)


@constant_when_compiled  # read once when compiled, as a constant of the graph
def has(feature: str) -> bool:
    """Whether the CPU has one of PROBES: "avx2", "avx512" (torch's public capability), "avx512_bf16", "amx_tile",
    "amx_fp16" (torch.cpu's probes); False for any other name."""
    return feature in isa().features


@constant_when_compiled
def capability() -> str:
    """torch's CPU capability ("AVX2", "AVX512", "DEFAULT", ...), as the probe answers it."""
    return isa().capability


@constant_when_compiled
def name() -> str:
    """Whose answer is in force: "this CPU", or a forced one of ISA_NAMES."""
    return isa().name


@constant_when_compiled
def half_gemm_isa(dtype: torch.dtype) -> str | None:
    """The instructions that run a `dtype` GEMM with float32 accumulation on this CPU, or None. The GEMMs meant are
    MKL's (native's) and oneDNN's (SDPA's): both use them."""
    answer = isa()
    if not answer.mkl:
        return None
    if dtype == torch.bfloat16:
        if "amx_tile" in answer.features:
            return "AMX-BF16"
        return "AVX512-BF16" if "avx512_bf16" in answer.features else None
    return "AMX-FP16" if dtype == torch.float16 and "amx_fp16" in answer.features else None


def has_half_gemm(dtype: torch.dtype) -> bool:
    """True when this CPU runs a `dtype` GEMM with float32 accumulation in hardware (False for float32 and
    float64, which need none)."""
    return dtype in HALF_DTYPES and half_gemm_isa(dtype) is not None
