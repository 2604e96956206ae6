"""Backend "native": FlashAttention-2 as one compiled CPU kernel (csrc/attention.cpp).

Why it exists: the "tiled" kernel runs ~10 multi-threaded PyTorch ops per tile, so a call starts
and joins the thread pool hundreds of times; on cores shared with another busy process every join
waits for a preempted thread. This kernel runs one `at::parallel_for` per pass over (batch,
kv head, query block) tasks, single-threaded BLAS GEMMs and the online softmax inside each task,
and workers take tasks from a shared counter, so a slow core takes fewer of them.

The C++ is compiled on first use with `torch.utils.cpp_extension.load` (ninja) and cached under
`$XDG_CACHE_HOME/selfattn/torch_extensions/<torch version>/`; the library's name carries a hash of
the source, the compiler flags and the CPU capability, so a cached build never goes stale and a
build for another CPU is never loaded. Nothing compiles at import; `backend="auto"` only considers
"native" once it is built (`is_built()`); `build()` (or `backend="native"`, or `selfattn bench`)
builds it and says so through `selfattn.kernels.notices` (a start and a done notice). Without a
compiler, or when the build fails, the backend refuses every request with the reason, and "auto"
keeps using "tiled".

The backward runs over key blocks: each task owns its dK, dV rows, and dQ is summed per worker
and the worker sums added at the end, so which worker took which task changes dQ's summation
order: gradients are reproducible up to rounding (as FlashAttention-2's atomics on a GPU), not
bit for bit. The forward is bit-for-bit the same whatever the thread count.

Inputs in float16/bfloat16 are converted to float32 once (O(N) memory), computed in float32 and
the output converted back; float32/float64 run in their own precision.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import threading
import time
from pathlib import Path

import torch

from .. import checks
from ..scores import additive_in, sink_grad
from .base import Backend, Capabilities, Cost, Request, Result, Work, softmax_delta
from .cost import request_pairs, visible_pairs
from .notice import Notice, emit

__all__ = [
    "NativeBackend",
    "build",
    "is_built",
    "build_dir",
    "unavailable_reason",
    "tile_arguments",
    "BLOCK_Q",
    "BLOCK_K",
]

SOURCE = Path(__file__).with_name("csrc") / "attention.cpp"
"""The kernel's C++ source."""

BLOCK_Q = 128
"""Query positions per task: a (BLOCK_Q × BLOCK_K) score tile of float32 is 256 KiB, in L2. Short
blocks waste little on a window's edges (a window of w costs (BLOCK_Q + w) keys per row); with 1
thread at L = 2048 causal, 64-256 × 512-1024 tiles ran within 3% of each other, 256 × 256 20% slower."""

BLOCK_K = 512
"""Key positions per tile (forward) and per backward task."""

BASE_FLAGS = ("-O3", "-std=c++17", "-fno-math-errno", "-fopenmp")
"""-fopenmp: at::parallel_for is a header template over `#pragma omp parallel`; without it, it runs serially."""

LINK_FLAGS = ("-fopenmp",)
ARCH_FLAGS = {"AVX512": ("-mavx2", "-mfma", "-mavx512f"), "AVX2": ("-mavx2", "-mfma")}
"""Vector flags by PyTorch's detected CPU capability: what this CPU runs, part of the cache key."""

_LOCK = threading.Lock()
_STATE: dict[str, object] = {"ops": None, "error": None}


@functools.lru_cache(maxsize=1)
def _flags() -> tuple[str, ...]:
    return BASE_FLAGS + ARCH_FLAGS.get(torch.backends.cpu.get_cpu_capability(), ())


@functools.lru_cache(maxsize=1)
def _name() -> str:
    """The library's name: changes with the source, the flags, the CPU capability and torch."""
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), " ".join(_flags() + LINK_FLAGS).encode(), torch.__version__.encode()):
        key.update(part)
    return f"selfattn_native_{key.hexdigest()[:12]}"


def build_dir() -> Path:
    """Where the compiled library is cached: $XDG_CACHE_HOME (or ~/.cache)/selfattn/torch_extensions/<torch>."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "selfattn" / "torch_extensions" / torch.__version__.replace("+", "_")


def _library_path() -> Path:
    return _library_path_for(os.environ.get("XDG_CACHE_HOME"), os.path.expanduser("~"))


@functools.lru_cache(maxsize=8)
def _library_path_for(xdg_cache_home: str | None, home: str) -> Path:
    """The library's path for these environment values, built once: "auto" asks on every call."""
    name = _name()
    return build_dir() / name / f"{name}.so"


def is_built() -> bool:
    """True when the kernel is loaded or its compiled library is in the cache: using it costs no compile."""
    return _STATE["ops"] is not None or _library_path().is_file()


@functools.lru_cache(maxsize=1)
def _missing_tools() -> str | None:
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler ({compiler!r} is not on PATH)"
    try:
        from torch.utils.cpp_extension import is_ninja_available
    except ImportError:  # pragma: no cover - torch without cpp_extension
        return "torch.utils.cpp_extension is not available"
    if not is_ninja_available():
        return "ninja is not available (pip install ninja)"
    return None


def unavailable_reason() -> str | None:
    """Why the kernel cannot be used here (no compiler, a failed build), or None. Never compiles."""
    if _STATE["error"] is not None:
        return str(_STATE["error"])
    if _STATE["ops"] is not None or _library_path().is_file():
        return None
    return _missing_tools()


def build():
    """Compile the kernel if needed and load it; returns its ops (`torch.ops.selfattn_native`).

    The first compile takes tens of seconds and reports itself as a start and a done (or failed)
    `selfattn.kernels.Notice`.
    Raises RuntimeError with the reason if there is no compiler or the build fails (and remembers
    it: the backend then refuses with that reason instead of retrying)."""
    with _LOCK:
        if _STATE["ops"] is not None:
            return _STATE["ops"]
        if _STATE["error"] is not None:
            raise RuntimeError(str(_STATE["error"]))
        path = _library_path()
        try:
            if not path.is_file():
                missing = _missing_tools()
                if missing is not None:
                    raise RuntimeError(f"cannot build the native kernel: {missing}; using 'tiled' instead")
                _compile(path)
            torch.ops.load_library(str(path))
        except Exception as error:  # noqa: BLE001 - any build failure becomes one stated reason
            message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            if not message.startswith("cannot build"):
                message = f"the native kernel failed to build or load ({message}); using 'tiled' instead"
            _STATE["error"] = message
            raise RuntimeError(message) from error
        _STATE["ops"] = torch.ops.selfattn_native
        return _STATE["ops"]


def _compile(path: Path) -> None:
    from torch.utils.cpp_extension import load

    path.parent.mkdir(parents=True, exist_ok=True)
    what = f"compiling the native attention kernel (once, about a minute) into {path.parent}"
    emit(Notice("native", what, "start"))
    start = time.perf_counter()
    try:
        load(
            name=path.stem,
            sources=[str(SOURCE)],
            extra_cflags=list(_flags()),
            extra_ldflags=list(LINK_FLAGS),
            build_directory=str(path.parent),
            is_python_module=False,
            verbose=False,
        )
    except Exception:
        emit(Notice("native", what, "failed", time.perf_counter() - start))
        raise
    emit(Notice("native", what, "done", time.perf_counter() - start))


RATE_GFLOPS = 90.0
"""Full and causal forward, L = 4096 (91–96), and windows counted as in `_work`, 1 thread (`kernels.cost`)."""


def _work(r: Request) -> Work:
    """Visible pairs, plus a window's ragged edge: a query block of BLOCK_Q reads about BLOCK_Q + w keys
    per row (measured at the same rate)."""
    if isinstance(r.window, int):
        return r.Lq * min(r.Lk, BLOCK_Q + r.window), RATE_GFLOPS, 0.0
    if r.window is not None or r.segments is not None:  # pairs per row, and a block's ragged edge
        return request_pairs(r) / r.B + r.Lq * BLOCK_Q, RATE_GFLOPS, 0.0
    return visible_pairs(r.Lq, r.Lk, causal=r.causal), RATE_GFLOPS, 0.0


class NativeBackend(Backend):
    """The compiled kernel; `BACKENDS["native"]` is `NativeBackend()`."""

    name = "native"
    capabilities = Capabilities(
        returns_weights=False,
        returns_lse=True,
        softcap=True,
        dropout=False,
        devices=frozenset({"cpu"}),
        mask_grad=False,
        sinks=True,
        alibi=True,
        segments=True,
        notes={
            "weights": "use backend='naive', or selfattn.attention_weights(q, k, lse, rows=...) for chosen rows",
            "dropout": "use backend='sdpa' or 'naive', or dropout_p=0",
            "mask_grad": "use backend='naive'",
            "device": "on a GPU use 'sdpa' or 'flex'",
        },
    )
    cost = Cost(work=_work, read_gbps=23.5, call_seconds=25e-6, backward_factor=3.9, busy_factor=1.0)
    """One `at::parallel_for` per pass: under load it loses about the share of the core it gives away."""

    def __init__(self, block_q: int = BLOCK_Q, block_k: int = BLOCK_K):
        self.block_q = checks.integer("block_q", block_q, low=1)
        self.block_k = checks.integer("block_k", block_k, low=1)

    def __repr__(self) -> str:
        return f"NativeBackend(block_q={self.block_q}, block_k={self.block_k})"

    def not_supported_reasons(self, request: Request) -> list[str]:
        """Every reason this backend cannot serve `request` (empty: it can). Never compiles."""
        reasons = super().not_supported_reasons(request)
        if request.scale == 0:
            reasons.append(
                "scale = 0 is not supported: BLAS skips a product whose alpha is 0, so a NaN in q or k "
                "would not reach the scores as it does in the reference; use backend='tiled' or 'naive'"
            )
        why = unavailable_reason()
        return reasons + ([] if why is None else [why])

    def auto_reasons(self, request: Request) -> list[str]:
        """ "auto" never waits on a compile: it takes native only once the kernel is built."""
        if is_built():
            return []
        return [
            "not built yet, and auto never waits on a compile: build it once with "
            "selfattn.kernels.native.build() (or `selfattn bench`, which says so)"
        ]

    def forward(self, r: Request) -> Result:
        ops = build()
        compute = r.accumulate_dtype
        q, k, v = (_prepared(t, compute) for t in (r.q, r.k, r.v))
        args = tile_arguments(r, self.block_q, self.block_k)
        sinks_grad = r.sinks is not None and r.sinks.requires_grad and torch.is_grad_enabled()
        if r.needs_grad or sinks_grad:
            sinks = r.sinks if r.sinks is not None else q.new_zeros(0)
            out, lse = _NativeAttention.apply(q, k, v, sinks, ops, args)
        else:
            out, lse = ops.forward(q, k, v, *args)
        return Result(out.to(r.q.dtype), None, lse if r.return_lse else None)


def tile_arguments(r: Request, block_q: int, block_k: int) -> tuple:
    """The C++ tile's arguments after q, k, v, from the request's score rule — the one place its fields
    become the kernel's: (mask expanded to (B, Hq, Lq, Lk) — bool, or additive in the compute dtype,
    saturated — left, right (the rule's `bounds`, −1: unbounded), scale, softcap (0: none), sinks and alibi
    ((Hq,) in the compute dtype, or None), the segments' spans (2, B, L) and, only where a segment is not
    one contiguous run, their ids (B, L), block_q, block_k)."""
    rule, acc = r.rule, r.accumulate_dtype
    mask = None
    if rule.mask is not None:
        mask = rule.mask if rule.mask_kind == "bool" else additive_in(rule.mask.detach(), acc)
        mask = mask.expand(r.B, r.Hq, r.Lq, r.Lk)
    left, right = (-1 if side is None else side for side in (rule.bounds or (None, None)))
    sinks, alibi = (None if t is None else t.detach().to(acc).contiguous() for t in (rule.sinks, rule.alibi))
    span = ids = None
    if rule.segments is not None:
        span, contiguous = rule.segment_spans
        ids = None if contiguous else rule.segments.contiguous()
    return (mask, left, right, rule.scale, rule.softcap or 0.0, sinks, alibi, span, ids, block_q, block_k)


def _prepared(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t in the compute dtype, laid out as the kernel reads it: unit stride along D, rows ≥ D apart."""
    t = t.to(dtype)
    if (t.shape[-1] > 1 and t.stride(-1) != 1) or (t.shape[2] > 1 and t.stride(2) < t.shape[3]):
        t = t.contiguous()
    return t


class _NativeAttention(torch.autograd.Function):
    """out, lse = native attention of (q, k, v); the backward recomputes P from lse, tile by tile."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, ops, args):
        out, lse = ops.forward(q, k, v, *args)
        ctx.save_for_backward(q, k, v, sinks, out, lse)
        ctx.ops, ctx.args = ops, args
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, d_lse):
        q, k, v, sinks, out, lse = ctx.saved_tensors
        if d_out is None:
            d_out = torch.zeros_like(out)
        d_out = _prepared(d_out, out.dtype)
        delta = softmax_delta(d_out, out, d_lse, out.dtype)  # (B, Hq, Lq)
        dq, dk, dv = ctx.ops.backward(d_out, q, k, v, lse.contiguous(), delta.contiguous(), *ctx.args)
        d_sinks = sink_grad(sinks, lse, delta) if sinks.numel() and ctx.needs_input_grad[3] else None
        return dq, dk, dv, d_sinks, None, None
