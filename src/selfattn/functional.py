"""`attention(q, k, v, ...)`: validate → build a `Request` → dispatch to a backend.

The user-facing edge: every argument is checked here, once, and a bad one gets a
`TypeError`/`ValueError` that names the actual value. Backends trust the `Request`.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import numbers
from typing import Callable, NamedTuple

import torch

from . import kernels
from .kernels.base import Request

__all__ = ["AttentionOutput", "attention", "build_request", "intercept", "use_backend", "Interceptor"]

Interceptor = Callable[[Request, Callable[[Request], "kernels.Result"]], "kernels.Result"]
"""`interceptor(request, compute) -> Result`: sees every `attention` call made inside
`intercept(...)`. `compute(request)` runs the dispatch (the named or "auto" backend) on a request;
an interceptor may record the request and result (the explainer's capture point), change the
request (an intervention: no ÷√d_k, no causal mask, a temperature), or split it by head and
compute each part differently. The request and result always have every field asked for."""

_INTERCEPTOR: contextvars.ContextVar[Interceptor | None] = contextvars.ContextVar("selfattn_interceptor",
                                                                                   default=None)
_DEFAULT_BACKEND: contextvars.ContextVar[str] = contextvars.ContextVar("selfattn_backend", default="auto")


@contextlib.contextmanager
def intercept(interceptor: Interceptor):
    """Route every `attention` call made in this context (this thread or task only) through
    `interceptor(request, compute)`. Nests: the innermost interceptor sees the calls."""
    if not callable(interceptor):
        raise TypeError(f"interceptor must be callable, got {type(interceptor).__name__}")
    token = _INTERCEPTOR.set(interceptor)
    try:
        yield interceptor
    finally:
        _INTERCEPTOR.reset(token)


@contextlib.contextmanager
def use_backend(name: str):
    """Calls that ask for backend="auto" use backend `name` inside this context (this thread or
    task only): how training or a benchmark picks a backend without touching live modules."""
    _check_backend(name)
    token = _DEFAULT_BACKEND.set(name)
    try:
        yield name
    finally:
        _DEFAULT_BACKEND.reset(token)


def _check_backend(backend) -> str:
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a str, got {type(backend).__name__} {backend!r}")
    if backend != "auto" and backend not in kernels.BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose 'auto' or one of {sorted(kernels.BACKENDS)}")
    return backend

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class AttentionOutput(NamedTuple):
    """What `attention` returns when a `return_*` flag is set.

    output   (B, Hq, Lq, Dv)  input dtype
    weights  (B, Hq, Lq, Lk)  float32 for half inputs, else the input dtype; None unless asked
    lse      (B, Hq, Lq)      log Σ_j exp(score_ij), −inf for a row that sees nothing; None unless asked
    """

    output: torch.Tensor
    weights: torch.Tensor | None
    lse: torch.Tensor | None


def attention(q, k, v, *, causal=False, mask=None, window=None, scale=None, softcap=None,
              dropout_p=0.0, return_weights=False, return_lse=False, backend="auto"):
    """softmax(Q Kᵀ / √d_k, masked) · V — the tutorial's formula, batched and multi-head.

    q     (B, Hq, Lq, D)    queries
    k     (B, Hkv, Lk, D)   keys; Hq % Hkv == 0 (GQA/MQA: query head h reads kv head h // (Hq/Hkv))
    v     (B, Hkv, Lk, Dv)  values
    causal     query i may look at keys j <= i + Lk - Lq (bottom-right: with Lq = 1 and a
               KV cache, the new token sees the whole past). Lq = 3, Lk = 5:
                   1 1 1 0 0
                   1 1 1 1 0
                   1 1 1 1 1
    mask       bool (True = may look) or additive float, broadcastable to (B, Hq, Lq, Lk)
    window     w >= 1: key j is visible to query position p only if p - w < j <= p
    scale      multiplies Q Kᵀ; default 1/√D
    softcap    c > 0: a scaled score s becomes c·tanh(s/c) before masking
    dropout_p  dropout on the weights, in [0, 1) (pass 0 in evaluation)
    return_weights, return_lse   return AttentionOutput(output, weights, lse)
    backend    "auto" (fastest that can serve the request), or one of "naive", "sdpa", …

    A query row that may look at nothing gets output 0, weights 0, lse −inf: never NaN.
    Returns output (B, Hq, Lq, Dv), or an `AttentionOutput` when a return_* flag is set.
    """
    _check_backend(backend)
    if backend == "auto":
        backend = _DEFAULT_BACKEND.get()
    request = build_request(q, k, v, causal=causal, mask=mask, window=window, scale=scale, softcap=softcap,
                            dropout_p=dropout_p, need_weights=return_weights, need_lse=return_lse)

    def compute(r: Request) -> kernels.Result:
        return kernels.choose(r, backend).forward(r)

    interceptor = _INTERCEPTOR.get()
    result = compute(request) if interceptor is None else interceptor(request, compute)
    if return_weights or return_lse:
        return AttentionOutput(result.output, result.weights, result.lse)
    return result.output


def build_request(q, k, v, *, causal=False, mask=None, window=None, scale=None, softcap=None,
                  dropout_p=0.0, need_weights=False, need_lse=False) -> Request:
    """Check every argument of `attention` and normalise it into a `Request`."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, L, D), got shape {tuple(t.shape)}")
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; supported: float16, bfloat16, float32, float64")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    (B, Hq, Lq, D), (Bk, Hkv, Lk, Dk), (Bv, Hv, Lv, Dv) = q.shape, k.shape, v.shape
    if not (B == Bk == Bv):
        raise ValueError(f"batch sizes differ: q has B={B}, k has B={Bk}, v has B={Bv}")
    if Dk != D:
        raise ValueError(f"k has D={Dk} but q has D={D}")
    if Hv != Hkv:
        raise ValueError(f"v has {Hv} heads but k has {Hkv}")
    if Lv != Lk:
        raise ValueError(f"v has Lk={Lv} positions but k has Lk={Lk}")
    if Hkv == 0 or Hq % Hkv != 0:
        raise ValueError(f"q has Hq={Hq} heads, not a multiple of k's Hkv={Hkv}")
    if D == 0:
        raise ValueError("head dim D must be >= 1, got 0")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__} {causal!r}")
    for name, flag in (("return_weights", need_weights), ("return_lse", need_lse)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__} {flag!r}")
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, numbers.Integral):
            raise TypeError(f"window must be an int, got {type(window).__name__} {window!r}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        window = int(window)
    scale = 1.0 / math.sqrt(D) if scale is None else _finite_number("scale", scale)
    if softcap is not None:
        softcap = _finite_number("softcap", softcap)
        if softcap <= 0:
            raise ValueError(f"softcap must be > 0, got {softcap}")
    dropout_p = _finite_number("dropout_p", dropout_p)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    if mask is not None:
        mask = _check_mask(mask, (B, Hq, Lq, Lk), q.device)
    return Request(q=q, k=k, v=v, causal=causal, mask=mask, window=window, scale=scale, softcap=softcap,
                   dropout_p=dropout_p, need_weights=need_weights, need_lse=need_lse)


def _finite_number(name: str, x) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__} {x!r}")
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {x}")
    return x


def _check_mask(mask, full_shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor (bool, or additive float), got {type(mask).__name__}")
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise TypeError(f"mask must be bool (True = may look) or an additive float, got dtype {mask.dtype}")
    if mask.device != device:
        raise ValueError(f"mask is on {mask.device} but q is on {device}")
    if mask.dim() > 4:
        raise ValueError(f"mask has shape {tuple(mask.shape)}, more than 4 dims: cannot broadcast to "
                         f"(B, Hq, Lq, Lk) = {full_shape}")
    try:
        broadcast = torch.broadcast_shapes(mask.shape, full_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != torch.Size(full_shape):
        raise ValueError(f"mask has shape {tuple(mask.shape)}, which does not broadcast to "
                         f"(B, Hq, Lq, Lk) = {full_shape}")
    if mask.dtype.is_floating_point and bool(torch.isnan(mask).any()):
        raise ValueError("additive mask contains NaN; use -inf (or a bool mask) for hidden positions")
    return mask
