"""The one contract every attention backend keeps, what each declares it supports, and what it costs.

`selfattn.attention` validates its arguments once (`selfattn.request.build_request`) and hands a
backend a `Request`. A backend is a `Backend` subclass with

    name: str
    capabilities: Capabilities               what it supports, as data (dtypes, devices, weights, lse, …)
    cost: Cost | None                        how "auto" estimates its time on a CPU (None: auto never takes it)
    not_supported_reasons(request) -> list   every reason it cannot serve the request ([] if it can)
    forward(request) -> Result               output (B, Hq, Lq, Dv), and weights / lse when asked

Backends never validate user input again: everything in a `Request` is already checked and
normalised (scale resolved, mask a 4-D bool or floating tensor that broadcasts to (B, Hq, Lq, Lk)),
and `request.rule` (`selfattn.scores.ScoreRule`) turns q·kᵀ into logits. How to add a backend:
docs/architecture.md.

Names (the glossary): B batch, Hq query heads, Hkv key/value heads, G = Hq / Hkv query heads per
key/value head, Lq queries, Lk keys, D query/key width, Dv value width.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from .. import checks
from ..compiling import constant_when_compiled
from ..limits import DEFAULT_BUDGET_BYTES
from ..request import ALL_DTYPES, Request
from ..scores import FEATURES
from . import cpu

EVERY_FEATURE = frozenset(FEATURES)
"""`Capabilities.features` of a backend that supports every tensor score feature."""

__all__ = [
    "Request",
    "streaming",
    "SecondDerivativeRefused",
    "Result",
    "AttentionOutput",
    "Capabilities",
    "EVERY_FEATURE",
    "Cost",
    "Work",
    "Backend",
    "ALL_DTYPES",
    "DEFAULT_BUDGET_BYTES",
    "budget",
    "budget_bytes",
    "over_budget",
    "size_text",
    "all_finite",
    "FINITE_CHECK_CHUNK",
    "softmax_delta",
    "looped_vmap",
]


_BUDGET: contextvars.ContextVar[int] = contextvars.ContextVar("selfattn_budget_bytes", default=DEFAULT_BUDGET_BYTES)


@contextlib.contextmanager
def budget(nbytes: int):
    """Inside this context (this thread or task only), a backend that would materialise O(Lq·Lk) memory —
    naive's weight matrix, SDPA's dense mask for a window or a bottom-right causal rule — refuses a
    request needing more than `nbytes` of it (and "auto" takes another). Nests; the default is
    DEFAULT_BUDGET_BYTES.

        with selfattn.kernels.budget(8 << 30):   # let naive build up to 8 GiB of weights
            out = selfattn.attention(q, k, v, return_weights=True)
    """
    nbytes = checks.integer("budget", nbytes, low=0)
    token = _BUDGET.set(nbytes)
    try:
        yield nbytes
    finally:
        _BUDGET.reset(token)


@constant_when_compiled
def budget_bytes() -> int:
    """The materialisation budget in force here (`budget`), in bytes; read once when compiled, fixed in the graph."""
    return _BUDGET.get()


FINITE_CHECK_CHUNK = 1 << 20
"""Elements per step of `all_finite`'s exact pass: a few MiB, whatever the tensor's size."""


def all_finite(t: torch.Tensor) -> bool:
    """No NaN or ±inf in `t`, in O(1) extra memory: a finite sum proves it at once (NaN and inf reach
    the sum); only when the sum is not finite (it may just have overflowed) are the elements checked,
    FINITE_CHECK_CHUNK at a time — `torch.isfinite(t).all()` would allocate several copies of t. The sum is read
    as a Python float: `torch.isfinite` of the 0-d sum is four small operations, ~20 µs of a decoding step's
    `attention` call, against ~5 µs for the sum alone."""
    if math.isfinite(float(t.detach().sum())):
        return True
    flat = t.detach().reshape(-1)
    return all(
        bool(torch.isfinite(flat[i : i + FINITE_CHECK_CHUNK]).all()) for i in range(0, flat.numel(), FINITE_CHECK_CHUNK)
    )


def looped_vmap(apply, info, in_dims, args) -> tuple[tuple, tuple]:
    """A vmap rule for a kernel with no batch of batches: `apply` once per vmapped entry of `args` (in_dims
    as torch.func gives them), the results stacked along dim 0."""
    moved = [a if d is None else a.movedim(d, 0) for a, d in zip(args, in_dims, strict=True)]
    results = [
        apply(*(a if d is None else a[i] for a, d in zip(moved, in_dims, strict=True))) for i in range(info.batch_size)
    ]
    stacked = tuple(torch.stack(parts) for parts in zip(*results, strict=True))
    return stacked, (0,) * len(stacked)


def softmax_delta(
    d_out: torch.Tensor, out: torch.Tensor, d_lse: torch.Tensor | None, dtype: torch.dtype
) -> torch.Tensor:
    """Δ of the attention backward, in `dtype`: rowsum(dO ∘ O) − dlse, so that dS = P ∘ (dP − Δ).

    d_out, out  (B, Hq, Lq, Dv)
    d_lse       (B, Hq, Lq) or None: the gradient of the log-sum-exp (∂lse/∂s = p joins the same term)
    returns     (B, Hq, Lq)
    """
    delta = (d_out.to(dtype) * out.to(dtype)).sum(dim=-1)
    return delta if d_lse is None else delta - d_lse.to(dtype)


class Result(NamedTuple):
    """What a backend returns, and what `selfattn.attention` returns when a `return_*` flag is set.

    output   (B, Hq, Lq, Dv)  input dtype
    weights  (B, Hq, Lq, Lk)  float32 for half inputs, else the input dtype; None unless asked
    lse      (B, Hq, Lq)      log Σ_j exp(score_ij), −inf for a row that sees nothing; None unless asked
    """

    output: torch.Tensor
    weights: torch.Tensor | None
    lse: torch.Tensor | None


AttentionOutput = Result
"""The public name of `Result` (`selfattn.AttentionOutput`): one class, two names."""


def size_text(nbytes: float) -> str:
    """Bytes as a short text: 1.00 GiB, 12.50 MiB, 3 bytes."""
    for unit, step in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= step:
            return f"{nbytes / step:.2f} {unit}"
    return f"{nbytes:.0f} bytes"


def over_budget(r: Request, limit: int) -> str:
    """The sentence refusing `r` because its whole weight matrix would take more than `limit` bytes."""
    return (
        f"it would materialise {r.B}×{r.Hq}×{r.Lq}×{r.Lk} weights = {size_text(r.weights_bytes)}, "
        f"over its budget of {size_text(limit)} (selfattn.kernels.budget)"
    )


Work = tuple[float, float, float]
"""(query-key pairs computed, GFLOP/s at which they are computed, extra seconds): a `Cost.work` answer."""


@dataclass(frozen=True)
class Cost:
    """How "auto" estimates a backend's seconds on a CPU, as data next to its `Capabilities`; the
    constants are measured (`selfattn.kernels.cost` gives the formula and how they were measured).

    work                  request → (pairs it computes, GFLOP/s it computes them at, extra seconds)
    read_gbps             GB/s at which it reads K and V (what bounds one decoding step)
    call_seconds          fixed cost of one call (checks, small allocations, dispatch)
    backward_factor       (forward + backward time) / forward time
    busy_factor           how much slower it gets on cores another busy process shares, relative to native (1.0)
    reads_per_query_head  it reads K and V once per query head (SDPA's CPU kernel), not once per kv head: a GQA
                          group's further heads read them again, from memory where one kv head's K and V exceed
                          `cached_kv_bytes`, else from the cache at `cached_read_gbps`
    dtype_speed           its forward's compute rate in a dtype over its float32 rate (1.0 where a dtype is not
                          listed): float64 runs at about a third; bfloat16 about as fast where it is converted
    backward_dtype_speed  the same for forward + backward (SDPA's bfloat16 backward runs at a fifth of its fp32)
    hardware_dtype_speed, hardware_backward_dtype_speed
                          the same two, used instead for a half dtype this CPU runs GEMMs of in hardware
                          (`cpu.has_half_gemm`: AVX512-BF16, AMX), where they are listed: there SDPA's bfloat16
                          forward runs several times its float32 rate (`kernels.cost` says how they were fitted);
                          keyed by the dtype, or by (dtype, the instructions `cpu.half_gemm_isa` names), which a
                          CPU with those instructions reads first (AVX512-BF16 without AMX differs from AMX)
    """

    work: Callable[[Request], Work]
    read_gbps: float
    call_seconds: float
    backward_factor: float
    busy_factor: float
    reads_per_query_head: bool = False
    cached_kv_bytes: int = 0
    cached_read_gbps: float = float("inf")
    dtype_speed: Mapping[torch.dtype, float] = field(default_factory=dict)
    backward_dtype_speed: Mapping[torch.dtype, float] = field(default_factory=dict)
    hardware_dtype_speed: Mapping[torch.dtype | tuple[torch.dtype, str], float] = field(default_factory=dict)
    hardware_backward_dtype_speed: Mapping[torch.dtype | tuple[torch.dtype, str], float] = field(default_factory=dict)

    def speed(self, dtype: torch.dtype, *, backward: bool) -> float:
        """Its compute rate in `dtype` over its float32 rate on this CPU (forward, or forward + backward)."""
        if cpu.has_half_gemm(dtype):
            hardware = self.hardware_backward_dtype_speed if backward else self.hardware_dtype_speed
            isa = cpu.half_gemm_isa(dtype) or ""  # not None: has_half_gemm
            for key in ((dtype, isa), dtype):
                if key in hardware:
                    return hardware[key]
        return (self.backward_dtype_speed if backward else self.dtype_speed).get(dtype, 1.0)


@dataclass(frozen=True)
class Capabilities:
    """What a backend supports, as data (after xFormers' `AttentionOpBase` class attributes).

    `notes` maps a feature name ("dtype", "device", "weights", "lse", "softcap", "dropout",
    "bool_mask", "additive_mask", "mask_grad", "causal", "window", "gqa", "backward", a tensor score feature's
    name, "weights_bytes") to the sentence given when a request needs it and the
    backend lacks it (say what to use instead), appended to the plain sentence that names what is lacking.
    `materialises_weights`: it builds the whole weight matrix, so `budget` bounds it.
    """

    returns_weights: bool
    returns_lse: bool
    softcap: bool
    dropout: bool
    dtypes: frozenset[torch.dtype] = ALL_DTYPES
    devices: frozenset[str] | None = None  # device types ("cpu", "cuda"); None: any
    bool_mask: bool = True
    additive_mask: bool = True
    mask_grad: bool = True  # differentiates an additive mask that requires grad
    causal: bool = True
    window: bool = True
    gqa: bool = True
    backward: bool = True
    features: frozenset[str] = frozenset()  # the tensor score features it supports (`scores.FEATURES`)
    materialises_weights: bool = False
    notes: Mapping[str, str] = field(default_factory=dict)

    def not_supported_reasons(self, r: Request) -> list[str]:
        """Every reason these capabilities cannot serve `r`, in a fixed order; [] if they can."""
        lacking = []
        if r.q.dtype not in self.dtypes:
            names = ", ".join(sorted(str(d).removeprefix("torch.") for d in self.dtypes))
            lacking.append(("dtype", f"dtype {r.q.dtype} is not supported (supported: {names})"))
        if self.devices is not None and r.q.device.type not in self.devices:
            lacking.append(
                ("device", f"device {r.q.device.type} is not supported (supported: {', '.join(sorted(self.devices))})")
            )
        wanted = (
            ("weights", r.return_weights, self.returns_weights, "it never returns attention weights"),
            ("lse", r.return_lse, self.returns_lse, "it never returns the log-sum-exp"),
            ("softcap", r.softcap is not None, self.softcap, "it has no softcap"),
            ("dropout", r.dropout_p > 0, self.dropout, "it has no dropout"),
            ("bool_mask", r.mask_kind == "bool", self.bool_mask, "it takes no bool mask"),
            ("additive_mask", r.mask_kind == "additive", self.additive_mask, "it takes no additive mask"),
            ("mask_grad", r.mask_needs_grad, self.mask_grad, "it does not differentiate an additive mask"),
            ("causal", r.causal, self.causal, "it has no causal rule"),
            ("window", r.window is not None, self.window, "it has no sliding window"),
            ("gqa", r.G > 1, self.gqa, f"it has no grouped-query attention (Hq={r.Hq}, Hkv={r.Hkv})"),
            ("backward", r.needs_grad, self.backward, "it has no backward pass"),
        ) + tuple((f.name, True, False, f"it has no {f.words}") for f in r.rule.unsupported(self.features))
        lacking += [(name, text) for name, needed, supported, text in wanted if needed and not supported]
        if self.materialises_weights and r.weights_bytes > budget_bytes():
            lacking.append(("weights_bytes", over_budget(r, budget_bytes())))
        return [text if name not in self.notes else f"{text}; {self.notes[name]}" for name, text in lacking]


class SecondDerivativeRefused(torch.autograd.Function):
    """A kernel's backward as a Function of its own (what a create_graph=True backward records, under
    torch.func transforms too), whose own derivative raises `refusal` by name: a subclass gives its forward
    (the kernel's backward) and `refusal`."""

    refusal = "double backward through this attention kernel is not supported: use backend='naive'"

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @classmethod
    def backward(cls, ctx, *grads):
        raise RuntimeError(cls.refusal)


def streaming(*, notes: Mapping[str, str], **rest) -> Capabilities:
    """The capabilities of a kernel that streams over key blocks with an online softmax (tiled, native, flex):
    no weight matrix, the lse, softcap, no dropout, no gradient of the mask (each note saying what to use);
    `rest` the others, `notes` its own sentences."""
    lacking = {"dropout": "use backend='sdpa' or 'naive', or dropout_p=0", "mask_grad": "use backend='naive'"}
    return Capabilities(
        returns_weights=False,
        returns_lse=True,
        softcap=True,
        dropout=False,
        mask_grad=False,
        notes=lacking | dict(notes),
        **rest,
    )


class Backend:
    """Base of every backend: subclasses set `name`, `capabilities` and `cost` and write `forward`."""

    name: str = ""
    capabilities: Capabilities
    cost: Cost | None = None

    def not_supported_reasons(self, request: Request) -> list[str]:
        """Every reason this backend cannot serve `request` ([] if it can)."""
        return self.capabilities.not_supported_reasons(request)

    def auto_reasons(self, request: Request) -> list[str]:
        """Further reasons "auto" passes this backend over though it could serve `request` when named
        (a kernel not compiled yet: "auto" never waits on a compile). [] for most backends."""
        return []

    def form_decides(self, request: Request) -> bool:
        """Whether this backend's reasons and estimate for `request` follow from its form alone (shapes, dtypes,
        strides, the rule's scalars, which features it sets) and `state()`, reading no tensor values: then "auto"
        may remember its choice for that form (`kernels.choices`). False here: a backend registered at run time
        may read values; the built-in ones say True where they read none."""
        return False

    def state(self) -> Hashable:
        """What, besides a request's form, this backend's reasons depend on and may change during a run (the
        kernel built, a signature compiled): part of the key "auto" remembers a choice under."""
        return None

    def refuse(self, request: Request) -> str | None:
        """All reasons joined into one sentence, or None if it can serve `request`."""
        reasons = self.not_supported_reasons(request)
        return "; ".join(reasons) if reasons else None

    def forward(self, request: Request) -> Result:
        raise NotImplementedError(f"backend {self.name!r} has no forward")

    def compute_path(self, request: Request) -> str | None:
        """In words, how it computes `request` where that depends on the hardware (which GEMMs run in which
        dtype), for `kernels.explain`; None where there is nothing to say. Never compiles."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
