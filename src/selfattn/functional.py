"""`attention(q, k, v, ...)`: validate → build a `Request` → (interceptor) → dispatch to a backend.

The user-facing edge: every argument is checked once (`selfattn.request.build_request`), and a bad
one gets a `TypeError`/`ValueError` that names the actual value. Backends trust the `Request`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from collections.abc import Callable
from typing import Literal, overload

import torch

from . import kernels
from .compiling import constant_when_compiled, values_readable
from .kernels.base import FINITE_CHECK_CHUNK, AttentionOutput, Result, all_finite
from .kernels.dispatch import check_backend
from .masks import BlockMask
from .request import MAX_SCALE, MAX_SOFTCAP, MIN_SOFTCAP, REQUEST_KEYWORDS, Request, build_request

__all__ = [
    "AttentionOutput",
    "FOREIGN_KEYWORDS",
    "attention",
    "check_overflow",
    "intercept",
    "use_backend",
    "Interceptor",
    "MAX_SCALE",
    "MAX_SOFTCAP",
    "MIN_SOFTCAP",
]

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""FlexAttention's mask_mod(b, h, q_idx, kv_idx) -> bool tensor: True = may look."""
ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""FlexAttention's score_mod(score, b, h, q_idx, kv_idx) -> the score."""

Interceptor = Callable[[Request, Callable[[Request], "kernels.Result"]], "kernels.Result"]
"""`interceptor(request, compute) -> Result`: sees every `attention` call made inside
`intercept(...)`. `compute(request)` runs the dispatch (the named or "auto" backend) on a request;
an interceptor may record the request and result (the explainer's capture point), change the
request (an intervention: no ÷√d_k, no causal mask, a temperature), or split it by head and
compute each part differently. The request and result always have every field asked for.

While an interceptor runs, `attention` calls made inside it (directly or through a model) bypass it
and go straight to dispatch: an interceptor that calls `selfattn.attention` itself gets an answer,
not a RecursionError. (A `with intercept(other):` inside it routes such calls to `other`.) What it
returns is checked: a `Result` with the output (and the weights / lse asked for) of the request's
shape, else a TypeError / ValueError that says what came back."""

Window = int | tuple[int | None, int | None]
"""`attention`'s window: w (keys p − w < j <= p), or (left, right) with None or −1 for an unbounded side."""

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


@overload
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = ...,
    mask: torch.Tensor | None = ...,
    window: Window | None = ...,
    scale: float | None = ...,
    softcap: float | None = ...,
    dropout_p: float = ...,
    return_weights: Literal[False] = ...,
    return_lse: Literal[False] = ...,
    sinks: torch.Tensor | None = ...,
    alibi: torch.Tensor | None = ...,
    segments: torch.Tensor | None = ...,
    mask_mod: MaskMod | None = ...,
    score_mod: ScoreMod | None = ...,
    block_mask: BlockMask | None = ...,
    backend: str = ...,
) -> torch.Tensor: ...
@overload
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = ...,
    mask: torch.Tensor | None = ...,
    window: Window | None = ...,
    scale: float | None = ...,
    softcap: float | None = ...,
    dropout_p: float = ...,
    return_weights: Literal[True],
    return_lse: bool = ...,
    sinks: torch.Tensor | None = ...,
    alibi: torch.Tensor | None = ...,
    segments: torch.Tensor | None = ...,
    mask_mod: MaskMod | None = ...,
    score_mod: ScoreMod | None = ...,
    block_mask: BlockMask | None = ...,
    backend: str = ...,
) -> AttentionOutput: ...
@overload
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = ...,
    mask: torch.Tensor | None = ...,
    window: Window | None = ...,
    scale: float | None = ...,
    softcap: float | None = ...,
    dropout_p: float = ...,
    return_weights: bool = ...,
    return_lse: Literal[True],
    sinks: torch.Tensor | None = ...,
    alibi: torch.Tensor | None = ...,
    segments: torch.Tensor | None = ...,
    mask_mod: MaskMod | None = ...,
    score_mod: ScoreMod | None = ...,
    block_mask: BlockMask | None = ...,
    backend: str = ...,
) -> AttentionOutput: ...
@overload
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = ...,
    mask: torch.Tensor | None = ...,
    window: Window | None = ...,
    scale: float | None = ...,
    softcap: float | None = ...,
    dropout_p: float = ...,
    return_weights: bool = ...,
    return_lse: bool = ...,
    sinks: torch.Tensor | None = ...,
    alibi: torch.Tensor | None = ...,
    segments: torch.Tensor | None = ...,
    mask_mod: MaskMod | None = ...,
    score_mod: ScoreMod | None = ...,
    block_mask: BlockMask | None = ...,
    backend: str = ...,
) -> torch.Tensor | AttentionOutput: ...
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    mask: torch.Tensor | None = None,
    window: Window | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
    return_lse: bool = False,
    sinks: torch.Tensor | None = None,
    alibi: torch.Tensor | None = None,
    segments: torch.Tensor | None = None,
    mask_mod: MaskMod | None = None,
    score_mod: ScoreMod | None = None,
    block_mask: BlockMask | None = None,
    backend: str = "auto",
    **foreign: object,
) -> torch.Tensor | AttentionOutput:
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
    window     w >= 1: key j is visible to query position p only if p - w < j <= p; or (left, right)
               (FlashAttention's window_size, None or -1: unbounded): p - left <= j <= p + right, causal or not
    scale      multiplies Q Kᵀ; default 1/√D
    softcap    c in [MIN_SOFTCAP, MAX_SOFTCAP]: a scaled score s becomes c·tanh(s/c) before masking (0: none)
    dropout_p  dropout on the weights, in [0, 1) (pass 0 in evaluation)
    return_weights, return_lse   return AttentionOutput(output, weights, lse) (= kernels.Result)
    sinks      (Hq,) sink logits joining each row's softmax denominator (gpt-oss): w_ij = exp(s_ij) /
               (Σ_j exp(s_ij) + exp(sink_h)); the lse includes the sink; differentiable
    alibi      (Hq,) or (B, Hq) ALiBi slopes: s_ij −= slope_h · |p − j| (constants)
    segments   (B, L) integer ids of packed sequences (Lq = Lk = L): key j is visible to query i only with
               the same id, together with causal / window / mask
    mask_mod   FlexAttention's mask_mod(b, h, q_idx, kv_idx) -> bool tensor (True = may look), together with the
               rest; evaluated once per shape into a block mask (on broadcast index tensors b (B,1,1,1), h (1,Hq,1,1),
               q_idx (1,1,Lq,1), kv_idx (1,1,1,Lk), or FlexAttention's vmap where that fails) and kept
               (`selfattn.masks.cached_block_mask`); "native" skips its empty blocks and masks only its partial ones.
               Under torch.compile the evaluation breaks the graph (fullgraph=True refuses it): pass block_mask=
    score_mod  FlexAttention's score_mod(score, b, h, q_idx, kv_idx) -> score, on the scaled score after the softcap
               and ALiBi, before the masks: "flex" natively, "tiled" and "naive" on a tile with broadcast index
               tensors; gradients reach q, k, v ("tiled": not the tensors score_mod holds — refused by name)
    block_mask a `selfattn.masks.BlockMask` (`selfattn.masks.block_mask(mask_mod, B, H, Lq, Lk)`): a mask_mod
               evaluated ahead, for calls that share it (FlexAttention's block_mask=)
    backend    "auto" (fastest that can serve the request), or one of "naive", "sdpa", …

    FlashAttention's and SDPA's conventions: the layout is (B, H, L, D), as SDPA's (flash_attn_func takes
    (B, L, H, D): pass q.transpose(1, 2) and transpose the output back); window=(-1, -1) (−1: that side
    unbounded) and softcap=0.0 (no cap) mean what they mean there; alibi takes flash's alibi_slopes, (Hq,) or
    (B, Hq) (the latter becomes an additive mask of (B, Hq, Lq, Lk)). Each argument has one name: SDPA's and
    FlashAttention's names (attn_mask, is_causal, enable_gqa, softmax_scale, window_size, alibi_slopes, ...) get a
    TypeError naming the selfattn one (`FOREIGN_KEYWORDS`). `selfattn.compat` has their functions with their
    signatures and semantics (flash_attn_func, flash_attn_varlen_func, scaled_dot_product_attention,
    memory_efficient_attention): docs/compat.md.

    A query row that may look at nothing gets output 0, weights 0, lse −inf: never NaN. Finite inputs
    whose scores overflow the compute dtype get a ValueError (on the CPU: `check_overflow`).
    Returns output (B, Hq, Lq, Dv), or an `AttentionOutput` when a return_* flag is set.

    Under `torch.compile` (and `torch.export`) the call traces into one graph; what reads tensor values at
    run time is left out of it, so a compiled call does not check: overflow (`check_overflow`), that sinks
    and alibi are finite, that an additive mask holds no NaN or +inf, nor consult an interceptor
    (`intercept` sees eager calls only); `use_backend`, `kernels.budget` and "auto"'s choice are fixed when it
    compiles, and "auto" never takes flex inside a compiled graph. Under `torch.func.vmap` the same value checks
    are skipped for the vmapped tensors (`values_readable`). `torch.func.grad` and `vmap(grad)` work over every
    backend with a backward; a second derivative (create_graph=True, then a gradient of the gradient) works
    with backend="naive" and is refused by name by "tiled", "native" (so "auto" when it takes one) and "sdpa"
    (PyTorch's own message). `tests/kernels/test_transforms.py` holds the whole matrix.
    """
    arguments = locals()  # this signature is the one list of the request's keywords (`REQUEST_KEYWORDS`)
    if foreign:
        raise foreign_keyword(next(iter(foreign)))
    check_backend(backend)
    compiling = torch.compiler.is_compiling()
    if backend == "auto":
        backend = _default_backend()
    request = build_request(q, k, v, **_request_keywords(arguments))
    compute = functools.partial(_compute, backend)  # no closure (nor comprehension) here: locals() holds no cell

    interceptor = None if compiling else _INTERCEPTOR.get()
    if interceptor is None:
        result = compute(request)
    else:
        token = _INTERCEPTOR.set(None)  # calls made inside the interceptor bypass it
        try:
            result = _checked(interceptor(request, compute), request)
        finally:
            _INTERCEPTOR.reset(token)
    if values_readable(result.output, request.q, request.k, request.v):
        check_overflow(request, result.output)
    if return_weights or return_lse:
        return AttentionOutput(result.output, result.weights, result.lse)
    return result.output


FOREIGN_KEYWORDS = {
    "attn_mask": ("SDPA", "mask=", "the same meaning: bool True = may look, or an additive float"),
    "is_causal": (
        "SDPA",
        "causal=True",
        "aligned bottom-right: query i sees keys j <= i + Lk − Lq; SDPA's is_causal is top-left when Lq ≠ Lk",
    ),
    "enable_gqa": ("SDPA", "nothing", "k and v with Hkv heads, Hq % Hkv == 0, are grouped-query attention"),
    "softmax_scale": ("FlashAttention", "scale=", "multiplies q·kᵀ, default 1/√D"),
    "window_size": ("FlashAttention", "window=(left, right)", "-1 = that side unbounded, as in FlashAttention"),
    "alibi_slopes": ("FlashAttention", "alibi=", "slopes of shape (Hq,) or (B, Hq)"),
    "deterministic": (
        "FlashAttention",
        "nothing",
        "its backward's order of sums; selfattn.compat.flash_attn_func takes it, with flash's signature",
    ),
    "return_attn_probs": ("FlashAttention", "return_weights=True, return_lse=True", "an AttentionOutput"),
    "cu_seqlens_q": (
        "FlashAttention",
        "segments=",
        "(B, L) ids of packed sequences; selfattn.compat.flash_attn_varlen_func takes cu_seqlens as they are",
    ),
    "cu_seqlens_k": (
        "FlashAttention",
        "segments=",
        "(B, L) ids of packed sequences; selfattn.compat.flash_attn_varlen_func takes cu_seqlens as they are",
    ),
    "max_seqlen_q": ("FlashAttention", "nothing", "the lengths come from the tensors"),
    "max_seqlen_k": ("FlashAttention", "nothing", "the lengths come from the tensors"),
    "attn_bias": (
        "xFormers",
        "mask=",
        "an additive float tensor; selfattn.compat.memory_efficient_attention takes xFormers' bias classes",
    ),
    "p": ("xFormers", "dropout_p=", "dropout on the weights"),
    "dropout": ("transformers", "dropout_p=", "dropout on the weights"),
    "scaling": ("transformers", "scale=", "multiplies q·kᵀ, default 1/√D"),
    "sliding_window": ("transformers", "window=", "w: keys p − w < j <= p"),
    "attention_mask": (
        "transformers",
        "mask=",
        "bool True = may look, or additive, broadcastable to (B, Hq, Lq, Lk); selfattn.hf takes transformers' call",
    ),
    "cu_seq_lens_q": ("transformers", "segments=", "(B, L) ids of packed sequences"),
    "cu_seq_lens_k": ("transformers", "segments=", "(B, L) ids of packed sequences"),
    "key_padding_mask": (
        "torch.nn.MultiheadAttention",
        "mask=~key_padding_mask[:, None, None, :]",
        "its True hides a key; selfattn's bool mask is True where a query may look",
    ),
    "need_weights": ("torch.nn.MultiheadAttention", "return_weights=True", "an AttentionOutput"),
}
"""Other libraries' names for `attention`'s arguments: (whose, what to write here, a note) — each answered."""


def _request_keywords(arguments: dict) -> dict:
    """The request's keywords (`REQUEST_KEYWORDS`) among `attention`'s arguments."""
    return {name: arguments[name] for name in REQUEST_KEYWORDS}


def _compute(backend: str, r: Request) -> kernels.Result:
    """The request computed by the backend `backend` names (dispatch's choice for "auto")."""
    return kernels.choose(r, backend).forward(r)


def foreign_keyword(name: str) -> TypeError:
    """The TypeError for a keyword `attention` does not take: the selfattn name to use where it is another
    library's, else Python's own message."""
    if name not in FOREIGN_KEYWORDS:
        return TypeError(f"attention() got an unexpected keyword argument {name!r}")
    whose, ours, note = FOREIGN_KEYWORDS[name]
    return TypeError(f"attention() has no {name}= ({whose}'s name): write {ours} ({note})")


@constant_when_compiled
def _default_backend() -> str:
    """The backend "auto" stands for in this context (`use_backend`); read once when compiled, fixed in the graph."""
    return _DEFAULT_BACKEND.get()


def _checked(result, r: Request) -> Result:
    """An interceptor's `result` if it is a `Result` with every field `r` asks for, in `r`'s shapes."""
    if not isinstance(result, Result):
        raise TypeError(
            f"the interceptor returned {type(result).__name__}, not a selfattn.kernels.Result: return "
            f"compute(request), or Result(output, weights, lse)"
        )
    expected = {
        "output": (r.B, r.Hq, r.Lq, r.Dv),
        "weights": (r.B, r.Hq, r.Lq, r.Lk) if r.return_weights else None,
        "lse": (r.B, r.Hq, r.Lq) if r.return_lse else None,
    }
    for name, shape in expected.items():
        value = getattr(result, name)
        if shape is None:
            continue
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"the interceptor's Result has {name} = {type(value).__name__}, not a tensor of shape {shape}"
            )
        if tuple(value.shape) != shape:
            raise ValueError(
                f"the interceptor's Result has {name} of shape {tuple(value.shape)}; the request needs {shape}"
            )
    return result


def check_overflow(r: Request, output: torch.Tensor) -> None:
    """Finite q, k, v must give a finite output: if the scores or the output overflowed the compute dtype
    (float32 q·k past 3.4e38, say), a ValueError says so instead of handing back NaN, or, where every score
    of a query overflowed to −inf, the 0 of a query that sees no key (`_overflowed_to_nothing`). Inputs that
    hold NaN or ±inf give NaN where the reference does, as they are.

    Checked on the CPU only (one pass over the output, O(B·Hq·Lq·Dv): `_row_peaks`); on an accelerator the check
    would make every call wait for its kernel."""
    if output.device.type != "cpu":
        return
    least, most = _row_peaks(output)
    if math.isfinite(most):
        if least != 0 or not _overflowed_to_nothing(r, output):
            return
    elif not all(all_finite(t) for t in (r.q, r.k, r.v)):
        return
    largest = ", ".join(f"|{n}| {float(t.detach().abs().max()):.3g}" for n, t in (("q", r.q), ("k", r.k), ("v", r.v)))
    raise ValueError(
        f"attention of finite inputs overflowed {r.accumulate_dtype} (largest {largest}, scale "
        f"{r.scale:g}): the scores or the output are beyond its range; scale the inputs down or "
        f"compute in float64"
    )


OVERFLOW_ROWS = 1024
"""Query rows whose float64 scores `_overflowed_to_nothing` computes at once: 1,024 × Lk doubles."""


def _overflowed_to_nothing(r: Request, output: torch.Tensor) -> bool:
    """Whether a query whose output is all zeros (what a query that sees no key gets) may have had its scores
    overflow the compute dtype to −inf, each key then taken for a masked one: a score beyond it in float64,
    |q·k| · max(scale, 1) (a kernel may scale q·k after the product). Rows of zeros are looked at only where
    D · max|q| · max|k| · max(scale, 1) reaches the dtype's largest value and q and k are finite (a query that
    sees no key and has such a score for a key it does not see is refused too: its scores are beyond the dtype
    either way). A softcap saturates instead (cap · tanh(±inf) is the float64 answer): no check."""
    if not r.k.numel() or r.softcap is not None:
        return False  # no key at all: nothing to overflow
    largest = float(torch.finfo(r.accumulate_dtype).max)
    factor = max(abs(r.scale), 1.0)
    peaks = [max(abs(float(t.detach().amax())), abs(float(t.detach().amin()))) for t in (r.q, r.k)]
    if r.q.shape[-1] * peaks[0] * peaks[1] * factor < largest or not all(map(all_finite, (r.q, r.k))):
        return False
    zero = (output.detach().amax(-1) == 0) & (output.detach().amin(-1) == 0)  # (B, Hq, Lq)
    group = r.q.shape[1] // r.k.shape[1]
    for b, h in zero.any(-1).nonzero().tolist():
        rows = zero[b, h].nonzero().flatten()
        keys = r.k[b, h // group].detach().double()
        for part in rows.split(OVERFLOW_ROWS):
            scores = r.q[b, h, part].detach().double() @ keys.T
            if float(scores.abs().amax()) * factor >= largest:
                return True
    return False


def _row_peaks(output: torch.Tensor) -> tuple[float, float]:
    """(least, most) of each row's largest |value| (rows: the last dimension): `most` is finite exactly when every
    value is (NaN and ±inf reach it), `least` is 0 exactly when a row is all zeros. A few µs per call (four
    operations), at most FINITE_CHECK_CHUNK elements copied at once (|x| of a chunk of rows); (1, 0) for no value."""
    if not output.numel():
        return 1.0, 0.0
    out = output.detach() if output.requires_grad else output
    if out.numel() <= FINITE_CHECK_CHUNK:
        least, most = torch.aminmax(out.abs().amax(-1))
        return float(least), float(most)
    rows = out.reshape(-1, out.shape[-1])
    step = max(1, FINITE_CHECK_CHUNK // rows.shape[1])
    peaks = [torch.aminmax(rows[i : i + step].abs().amax(-1)) for i in range(0, rows.shape[0], step)]
    return min(float(lo) for lo, _ in peaks), max(float(hi) for _, hi in peaks)
