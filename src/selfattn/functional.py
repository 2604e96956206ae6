"""`attention(q, k, v, ...)`: validate → build a `Request` → dispatch to a backend.

The user-facing edge: every argument is checked here, once, and a bad one gets a
`TypeError`/`ValueError` that names the actual value. Backends trust the `Request`.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable

import torch

from . import checks, kernels
from .kernels.base import ALL_DTYPES, AttentionOutput, Request, all_finite
from .kernels.dispatch import check_backend

__all__ = [
    "AttentionOutput",
    "attention",
    "build_request",
    "check_mask",
    "intercept",
    "use_backend",
    "Interceptor",
    "MAX_SCALE",
    "MAX_SOFTCAP",
    "MIN_SOFTCAP",
]

Interceptor = Callable[[Request, Callable[[Request], "kernels.Result"]], "kernels.Result"]
"""`interceptor(request, compute) -> Result`: sees every `attention` call made inside
`intercept(...)`. `compute(request)` runs the dispatch (the named or "auto" backend) on a request;
an interceptor may record the request and result (the explainer's capture point), change the
request (an intervention: no ÷√d_k, no causal mask, a temperature), or split it by head and
compute each part differently. The request and result always have every field asked for."""

_INTERCEPTOR: contextvars.ContextVar[Interceptor | None] = contextvars.ContextVar("selfattn_interceptor", default=None)
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
    check_backend(name)
    token = _DEFAULT_BACKEND.set(name)
    try:
        yield name
    finally:
        _DEFAULT_BACKEND.reset(token)


MAX_SCALE = 1e6
"""Largest |scale| accepted. Scores of ordinary inputs times a larger scale overflow float32 (the
accumulation type of half inputs) to inf, and inf − inf in the softmax is NaN; a 1/√D scale, or
one divided by a temperature down to 1e-4, stays far below."""

MAX_SOFTCAP = 1e6
"""Largest softcap accepted: c·tanh(s/c) ≈ s long before this, and c·log₂e must stay finite in
float32 (`kernels.tiled` keeps its scores in base 2)."""

MIN_SOFTCAP = 1e-4
"""Smallest softcap accepted: c·tanh(s/c) lies in (−c, c), so below this every capped score is 0 to
within half precision, and scale/c (the tiled kernel's matmul multiplier) must stay finite in float32:
MAX_SCALE / MIN_SOFTCAP = 1e10 does, 1 / 1e-300 does not."""


def attention(
    q,
    k,
    v,
    *,
    causal=False,
    mask=None,
    window=None,
    scale=None,
    softcap=None,
    dropout_p=0.0,
    return_weights=False,
    return_lse=False,
    backend="auto",
):
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
    softcap    c in [MIN_SOFTCAP, MAX_SOFTCAP]: a scaled score s becomes c·tanh(s/c) before masking
    dropout_p  dropout on the weights, in [0, 1) (pass 0 in evaluation)
    return_weights, return_lse   return AttentionOutput(output, weights, lse) (= kernels.Result)
    backend    "auto" (fastest that can serve the request), or one of "naive", "sdpa", …

    A query row that may look at nothing gets output 0, weights 0, lse −inf: never NaN. Finite inputs
    whose scores overflow the compute dtype get a ValueError (on the CPU: `check_overflow`).
    Returns output (B, Hq, Lq, Dv), or an `AttentionOutput` when a return_* flag is set.
    """
    check_backend(backend)
    if backend == "auto":
        backend = _DEFAULT_BACKEND.get()
    request = build_request(
        q,
        k,
        v,
        causal=causal,
        mask=mask,
        window=window,
        scale=scale,
        softcap=softcap,
        dropout_p=dropout_p,
        return_weights=return_weights,
        return_lse=return_lse,
    )

    def compute(r: Request) -> kernels.Result:
        return kernels.choose(r, backend).forward(r)

    interceptor = _INTERCEPTOR.get()
    result = compute(request) if interceptor is None else interceptor(request, compute)
    check_overflow(request, result.output)
    if return_weights or return_lse:
        return AttentionOutput(result.output, result.weights, result.lse)  # whatever tuple an interceptor made
    return result.output


def build_request(
    q,
    k,
    v,
    *,
    causal=False,
    mask=None,
    window=None,
    scale=None,
    softcap=None,
    dropout_p=0.0,
    return_weights=False,
    return_lse=False,
) -> Request:
    """Check every argument of `attention` and normalise it into a `Request`.

    Normalised: scale resolved (default 1/√D); a window wider than Lk clamped to Lk (the same
    rule: every key is within reach); the mask viewed as 4-D (leading dims of size 1).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, L, D), got shape {tuple(t.shape)}")
        if t.dtype not in ALL_DTYPES:
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
    if Hq == 0 or Hkv == 0:
        raise ValueError(f"q and k need at least one head each, got Hq={Hq}, Hkv={Hkv}")
    if Hq % Hkv != 0:
        raise ValueError(f"q has Hq={Hq} heads, not a multiple of k's Hkv={Hkv}")
    if D == 0:
        raise ValueError("head dim D must be >= 1, got 0")
    if Dv == 0:
        raise ValueError("value head dim Dv must be >= 1, got 0")
    causal = checks.boolean("causal", causal)
    return_weights = checks.boolean("return_weights", return_weights)
    return_lse = checks.boolean("return_lse", return_lse)
    window = checks.optional_integer("window", window, low=1)
    if window is not None:
        window = min(window, max(Lk, 1))
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    else:
        scale = checks.real("scale", scale, low=-MAX_SCALE, high=MAX_SCALE)
    if softcap is not None:
        softcap = checks.real("softcap", softcap, low=MIN_SOFTCAP, high=MAX_SOFTCAP)
    dropout_p = checks.real("dropout_p", dropout_p, low=0, high=1, high_open=True)
    if mask is not None:
        mask = check_mask(mask, (B, Hq, Lq, Lk), q.device)
    return Request(
        q=q,
        k=k,
        v=v,
        causal=causal,
        mask=mask,
        window=window,
        scale=scale,
        softcap=softcap,
        dropout_p=dropout_p,
        return_weights=return_weights,
        return_lse=return_lse,
    )


def check_overflow(r: Request, output: torch.Tensor) -> None:
    """Finite q, k, v must give a finite output: if the scores or the output overflowed the compute dtype
    (float32 q·k past 3.4e38, say), a ValueError says so instead of handing back NaN. Inputs that hold
    NaN or ±inf give NaN where the reference does, as they are.

    Checked on the CPU only (one pass over the output, O(B·Hq·Lq·Dv)); on an accelerator the check would
    make every call wait for its kernel."""
    if output.device.type != "cpu" or all_finite(output):
        return
    if not all(all_finite(t) for t in (r.q, r.k, r.v)):
        return
    largest = ", ".join(f"|{n}| {float(t.detach().abs().max()):.3g}" for n, t in (("q", r.q), ("k", r.k), ("v", r.v)))
    raise ValueError(
        f"attention of finite inputs overflowed {r.accumulate_dtype} (largest {largest}, scale "
        f"{r.scale:g}): the scores or the output are beyond its range; scale the inputs down or "
        f"compute in float64"
    )


def check_mask(mask, full_shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """`mask` checked against (B, Hq, Lq, Lk) = full_shape, as a 4-D view (leading dims of size 1).

    bool (True = may look) or additive float; broadcastable to full_shape; on `device`; an
    additive mask may hold −inf but neither NaN nor +inf.
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor (bool, or additive float), got {type(mask).__name__}")
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise TypeError(f"mask must be bool (True = may look) or an additive float, got dtype {mask.dtype}")
    if mask.device != device:
        raise ValueError(f"mask is on {mask.device} but q is on {device}")
    if mask.dim() > 4:
        raise ValueError(
            f"mask has shape {tuple(mask.shape)}, more than 4 dims: cannot broadcast to (B, Hq, Lq, Lk) = {full_shape}"
        )
    try:
        broadcast = torch.broadcast_shapes(mask.shape, full_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != torch.Size(full_shape):
        raise ValueError(
            f"mask has shape {tuple(mask.shape)}, which does not broadcast to (B, Hq, Lq, Lk) = {full_shape}"
        )
    if mask.dtype.is_floating_point:
        if bool(torch.isnan(mask).any()):
            raise ValueError("additive mask contains NaN; use -inf (or a bool mask) for hidden positions")
        if bool(torch.isposinf(mask).any()):
            raise ValueError(
                "additive mask contains +inf, which would make a softmax row NaN; use finite "
                "values, and -inf (or a bool mask) for hidden positions"
            )
    return mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
