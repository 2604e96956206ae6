"""The one contract every attention backend keeps, and what each declares it supports.

`selfattn.attention` validates its arguments once and hands a backend a `Request`.
A backend is a `Backend` subclass with

    name: str
    capabilities: Capabilities               what it supports, as data (dtypes, devices, weights, lse, …)
    not_supported_reasons(request) -> list   every reason it cannot serve the request ([] if it can)
    forward(request) -> Result               output (B, Hq, Lq, Dv), and weights / lse when asked

Backends never validate user input again: everything in a `Request` is already
checked and normalised (scale resolved, mask a 4-D bool or floating tensor that
broadcasts to (B, Hq, Lq, Lk)). Adding a backend is one subclass with its capabilities and
forward, plus an entry in `kernels.dispatch.BACKENDS` (and in `kernels.cost` for "auto" to
estimate it).

Names (the glossary): B batch, Hq query heads, Hkv key/value heads, G = Hq / Hkv query heads per
key/value head, Lq queries, Lk keys, D query/key width, Dv value width.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

__all__ = [
    "Request",
    "Result",
    "AttentionOutput",
    "Capabilities",
    "Backend",
    "ALL_DTYPES",
    "over_budget",
    "all_finite",
    "FINITE_CHECK_CHUNK",
    "softmax_delta",
]

ALL_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
"""The dtypes `selfattn.attention` accepts."""


@dataclass(frozen=True)
class Request:
    """One validated attention call.

    q     (B, Hq, Lq, D)
    k     (B, Hkv, Lk, D)
    v     (B, Hkv, Lk, Dv)
    mask  None, or bool (True = may look) / additive float: 4-D, broadcastable to (B, Hq, Lq, Lk)
          (`functional.build_request`, the only builder, makes it 4-D; backends rely on that)
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    causal: bool
    mask: torch.Tensor | None
    window: int | None
    scale: float
    softcap: float | None
    dropout_p: float
    return_weights: bool
    return_lse: bool

    @property
    def B(self) -> int:
        return self.q.shape[0]

    @property
    def Hq(self) -> int:
        return self.q.shape[1]

    @property
    def Hkv(self) -> int:
        return self.k.shape[1]

    @property
    def G(self) -> int:
        """Query heads per key/value head (1 = MHA, Hq = MQA, else GQA)."""
        return self.q.shape[1] // self.k.shape[1]

    @property
    def Lq(self) -> int:
        return self.q.shape[2]

    @property
    def Lk(self) -> int:
        return self.k.shape[2]

    @property
    def D(self) -> int:
        return self.q.shape[3]

    @property
    def Dv(self) -> int:
        return self.v.shape[3]

    @property
    def mask_kind(self) -> str | None:
        """None, "bool" or "additive"."""
        if self.mask is None:
            return None
        return "bool" if self.mask.dtype == torch.bool else "additive"

    @property
    def accumulate_dtype(self) -> torch.dtype:
        """Softmax and its sums run in float32 for half types, else in the input dtype."""
        return torch.float32 if self.q.dtype in (torch.float16, torch.bfloat16) else self.q.dtype

    @property
    def weights_bytes(self) -> int:
        """Bytes of the whole (B, Hq, Lq, Lk) weight matrix in the accumulation dtype."""
        return self.B * self.Hq * self.Lq * self.Lk * self.accumulate_dtype.itemsize

    @property
    def needs_grad(self) -> bool:
        return torch.is_grad_enabled() and any(t.requires_grad for t in (self.q, self.k, self.v))

    @property
    def mask_needs_grad(self) -> bool:
        return self.mask is not None and self.mask.requires_grad and torch.is_grad_enabled()


FINITE_CHECK_CHUNK = 1 << 20
"""Elements per step of `all_finite`'s exact pass: a few MiB, whatever the tensor's size."""


def all_finite(t: torch.Tensor) -> bool:
    """No NaN or ±inf in `t`, in O(1) extra memory: a finite sum proves it at once (NaN and inf reach
    the sum); only when the sum is not finite (it may just have overflowed) are the elements checked,
    FINITE_CHECK_CHUNK at a time — `torch.isfinite(t).all()` would allocate several copies of t."""
    if bool(torch.isfinite(t.detach().sum())):
        return True
    flat = t.detach().reshape(-1)
    return all(
        bool(torch.isfinite(flat[i : i + FINITE_CHECK_CHUNK]).all()) for i in range(0, flat.numel(), FINITE_CHECK_CHUNK)
    )


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


def _size(nbytes: float) -> str:
    for unit, step in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= step:
            return f"{nbytes / step:.2f} {unit}"
    return f"{nbytes:.0f} bytes"


def over_budget(r: Request, budget: int) -> str:
    """The sentence refusing `r` because its whole weight matrix would take more than `budget` bytes."""
    return (
        f"it would materialise {r.B}×{r.Hq}×{r.Lq}×{r.Lk} weights = {_size(r.weights_bytes)}, "
        f"over its budget of {_size(budget)} (max_weights_bytes)"
    )


@dataclass(frozen=True)
class Capabilities:
    """What a backend supports, as data (after xFormers' `AttentionOpBase` class attributes).

    `notes` maps a feature name ("dtype", "device", "weights", "lse", "softcap", "dropout",
    "bool_mask", "additive_mask", "mask_grad", "causal", "window", "gqa", "backward",
    "weights_bytes") to the sentence given when a request needs it and the backend lacks it
    (say what to use instead), appended to the plain sentence that names what is lacking.
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
    max_weights_bytes: int | None = None  # it materialises the weights: at most this many bytes
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
        )
        lacking += [(name, text) for name, needed, supported, text in wanted if needed and not supported]
        if self.max_weights_bytes is not None and r.weights_bytes > self.max_weights_bytes:
            lacking.append(("weights_bytes", over_budget(r, self.max_weights_bytes)))
        return [text if name not in self.notes else f"{text}; {self.notes[name]}" for name, text in lacking]


class Backend:
    """Base of every backend: subclasses set `name` and `capabilities` and write `forward`."""

    name: str = ""
    capabilities: Capabilities

    def not_supported_reasons(self, request: Request) -> list[str]:
        """Every reason this backend cannot serve `request` ([] if it can)."""
        return self.capabilities.not_supported_reasons(request)

    def auto_reasons(self, request: Request) -> list[str]:
        """Further reasons "auto" passes this backend over though it could serve `request` when named
        (a kernel not compiled yet: "auto" never waits on a compile). [] for most backends."""
        return []

    def refuse(self, request: Request) -> str | None:
        """All reasons joined into one sentence, or None if it can serve `request`."""
        reasons = self.not_supported_reasons(request)
        return "; ".join(reasons) if reasons else None

    def forward(self, request: Request) -> Result:
        raise NotImplementedError(f"backend {self.name!r} has no forward")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
