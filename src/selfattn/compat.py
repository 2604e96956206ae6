"""Drop-in entry points with other libraries' signatures, each a checked translation onto `selfattn.attention`.

    from selfattn.compat import flash_attn_func, scaled_dot_product_attention, memory_efficient_attention
    out = flash_attn_func(q, k, v, causal=True)                 # FlashAttention: (B, L, H, D)
    out = flash_attn_varlen_func(q, k, v, cu, cu, 7, 7)         # FlashAttention, packed: (total, H, D)
    out = scaled_dot_product_attention(q, k, v, is_causal=True) # PyTorch SDPA: (..., H, L, D), top-left causal
    out = memory_efficient_attention(q, k, v, attn_bias=LowerTriangularMask())  # xFormers: (B, M, H, K)

Each keeps its anchor's semantics, including where they differ from `selfattn.attention`'s (SDPA's `is_causal`
and xFormers' `LowerTriangularMask` are aligned top-left when Lq ≠ Lk; FlashAttention's causal rule is bottom-right,
as selfattn's). None computes attention itself: each builds the arguments of one `selfattn.attention` call (or one
per sequence, for packed sequences of different query and key lengths), so every backend, the interceptor and the
explainer serve it. docs/compat.md holds the table of each call and its differences.

What differs from the anchors everywhere: a query row that may look at nothing gets output 0 and lse −inf (SDPA on
the CPU gives 0 too; FlashAttention writes lse +inf; xFormers leaves such rows undefined); the weights FlashAttention
returns for `return_attn_probs` are the exact softmax (flash's S_dmask is "for testing only", possibly unscaled).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise
from typing import Any, Literal, overload

import torch

from .functional import AttentionOutput, attention

__all__ = [
    "flash_attn_func",
    "flash_attn_varlen_func",
    "scaled_dot_product_attention",
    "memory_efficient_attention",
    "AttentionBias",
    "LowerTriangularMask",
    "LowerTriangularMaskWithTensorBias",
    "LowerTriangularFromBottomRightMask",
    "BlockDiagonalMask",
    "BlockDiagonalCausalMask",
    "check_cu_seqlens",
    "segments_of",
]

Window = tuple[int, int]
"""FlashAttention's window_size: (left, right), −1 = that side unbounded."""


# --- FlashAttention -------------------------------------------------------------------------------------------


@overload
def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = ...,
    softmax_scale: float | None = ...,
    causal: bool = ...,
    window_size: Window = ...,
    softcap: float = ...,
    alibi_slopes: torch.Tensor | None = ...,
    deterministic: bool = ...,
    return_attn_probs: Literal[False] = ...,
) -> torch.Tensor: ...
@overload
def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = ...,
    softmax_scale: float | None = ...,
    causal: bool = ...,
    window_size: Window = ...,
    softcap: float = ...,
    alibi_slopes: torch.Tensor | None = ...,
    deterministic: bool = ...,
    *,
    return_attn_probs: Literal[True],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...
@overload
def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = ...,
    softmax_scale: float | None = ...,
    causal: bool = ...,
    window_size: Window = ...,
    softcap: float = ...,
    alibi_slopes: torch.Tensor | None = ...,
    deterministic: bool = ...,
    return_attn_probs: bool = ...,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...
def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: Window = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashAttention's `flash_attn.flash_attn_func`, on `selfattn.attention`.

    q (B, Lq, Hq, D), k (B, Lk, Hkv, D), v (B, Lk, Hkv, Dv); Hq % Hkv == 0 (MQA/GQA)
    returns out (B, Lq, Hq, Dv); with return_attn_probs=True, (out, softmax_lse (B, Hq, Lq), weights (B, Hq, Lq, Lk))

    FlashAttention's semantics: causal is aligned to the bottom right (query i sees keys j <= i + Lk − Lq; with
    Lq = 2, Lk = 5 the rows are 1 1 1 1 0 / 1 1 1 1 1); window_size=(left, right) lets query i see keys
    i + Lk − Lq − left <= j <= i + Lk − Lq + right (−1: that side unbounded; with causal, right is 0);
    softcap > 0 caps a scaled score s to softcap·tanh(s/softcap) (0: none); alibi_slopes (Hq,) or (B, Hq) adds
    −slope·|i + Lk − Lq − j| after the cap; softmax_scale defaults to 1/√D; dropout_p drops weights.
    deterministic is FlashAttention's switch for its backward's order of sums: accepted (a bool) and without
    effect here (selfattn's CPU paths are deterministic; on a GPU, torch.use_deterministic_algorithms governs).
    return_attn_probs: flash returns (out, softmax_lse, S_dmask), S_dmask "for testing only"; here the third item
    is the exact weights, rows summing to 1 (0 for a row that sees nothing, whose lse is −inf, not flash's +inf).
    """
    _check_layout("flash_attn_func", "(B, L, H, D)", 4, q=q, k=k, v=v)
    _check_flags(deterministic=deterministic, return_attn_probs=return_attn_probs, causal=causal)
    result = _attend(
        return_attn_probs,
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        causal=causal,
        window=_window(window_size),
        scale=softmax_scale,
        softcap=softcap,
        dropout_p=dropout_p,
        alibi=alibi_slopes,
    )
    out = result.output.transpose(1, 2)
    return (out, _tensor(result.lse), _tensor(result.weights)) if return_attn_probs else out


@overload
def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int | torch.Tensor,
    max_seqlen_k: int | torch.Tensor,
    dropout_p: float = ...,
    softmax_scale: float | None = ...,
    causal: bool = ...,
    window_size: Window = ...,
    softcap: float = ...,
    alibi_slopes: torch.Tensor | None = ...,
    deterministic: bool = ...,
    return_attn_probs: Literal[False] = ...,
) -> torch.Tensor: ...
@overload
def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int | torch.Tensor,
    max_seqlen_k: int | torch.Tensor,
    dropout_p: float = ...,
    softmax_scale: float | None = ...,
    causal: bool = ...,
    window_size: Window = ...,
    softcap: float = ...,
    alibi_slopes: torch.Tensor | None = ...,
    deterministic: bool = ...,
    *,
    return_attn_probs: Literal[True],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...
@overload
def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int | torch.Tensor,
    max_seqlen_k: int | torch.Tensor,
    dropout_p: float = ...,
    softmax_scale: float | None = ...,
    causal: bool = ...,
    window_size: Window = ...,
    softcap: float = ...,
    alibi_slopes: torch.Tensor | None = ...,
    deterministic: bool = ...,
    return_attn_probs: bool = ...,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...
def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int | torch.Tensor,
    max_seqlen_k: int | torch.Tensor,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: Window = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashAttention's `flash_attn.flash_attn_varlen_func` (packed sequences), on `selfattn.attention`.

    q (total_q, Hq, D), k (total_k, Hkv, D), v (total_k, Hkv, Dv)   the sequences one after another
    cu_seqlens_q, cu_seqlens_k  (N + 1,) int32/int64: sequence s holds queries cu_seqlens_q[s]:cu_seqlens_q[s + 1]
                                and keys cu_seqlens_k[s]:cu_seqlens_k[s + 1]; 0 first, non-decreasing, the total last
    max_seqlen_q, max_seqlen_k  at least each sequence's length (checked: flash trusts them)
    alibi_slopes                (Hq,), or (N, Hq): one row per sequence
    returns out (total_q, Hq, Dv); with return_attn_probs=True, (out, softmax_lse (Hq, total_q),
            weights (Hq, total_q, total_k): block-diagonal, each block one sequence's weights, 0 elsewhere)

    Every sequence is attended alone, with flash_attn_func's semantics (causal bottom-right within the sequence,
    window, softcap, ALiBi positions counted from each sequence's start). With cu_seqlens_q equal to cu_seqlens_k
    this is one call with `segments=` (B = 1, one id per sequence); otherwise one call per sequence.
    """
    _check_layout("flash_attn_varlen_func", "(total, H, D)", 3, q=q, k=k, v=v)
    _check_flags(deterministic=deterministic, return_attn_probs=return_attn_probs, causal=causal)
    starts_q = check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.shape[0], max_seqlen_q, "max_seqlen_q")
    starts_k = check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, k.shape[0], max_seqlen_k, "max_seqlen_k")
    if len(starts_q) != len(starts_k):
        raise ValueError(
            f"cu_seqlens_q holds {len(starts_q) - 1} sequences and cu_seqlens_k {len(starts_k) - 1}: one each"
        )
    n = len(starts_q) - 1
    if isinstance(alibi_slopes, torch.Tensor) and alibi_slopes.dim() == 2 and alibi_slopes.shape[0] != n:
        raise ValueError(f"alibi_slopes of shape {tuple(alibi_slopes.shape)} needs one row per sequence ({n})")
    keywords: dict[str, Any] = dict(
        causal=causal, window=_window(window_size), scale=softmax_scale, softcap=softcap, dropout_p=dropout_p
    )
    per_row = isinstance(alibi_slopes, torch.Tensor) and alibi_slopes.dim() == 2
    if starts_q == starts_k and not per_row:
        heads_first = (q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None])  # (1, H, total, D)
        segments = segments_of(starts_q, q.device)
        result = _attend(return_attn_probs, *heads_first, segments=segments, alibi=alibi_slopes, **keywords)
        out = result.output[0].transpose(0, 1)
        if not return_attn_probs:
            return out
        return out, _tensor(result.lse)[0], _tensor(result.weights)[0]
    return _per_sequence(q, k, v, starts_q, starts_k, alibi_slopes, return_attn_probs, keywords)


def _per_sequence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    starts_q: list[int],
    starts_k: list[int],
    alibi_slopes: torch.Tensor | None,
    probs: bool,
    keywords: dict[str, Any],
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """flash_attn_varlen_func one sequence at a time: one (1, H, L, D) call each, put back in token order."""
    total_q, total_k = q.shape[0], k.shape[0]
    out = q.new_zeros(total_q, q.shape[1], v.shape[2])  # (total_q, Hq, Dv)
    lse: torch.Tensor | None = None  # (Hq, total_q), allocated in the dtype of the first answer
    weights: torch.Tensor | None = None  # (Hq, total_q, total_k)
    for s in range(len(starts_q) - 1):
        (q0, q1), (k0, k1) = starts_q[s : s + 2], starts_k[s : s + 2]
        if q1 == q0:
            continue
        slopes = alibi_slopes[s] if alibi_slopes is not None and alibi_slopes.dim() == 2 else alibi_slopes
        one = (t.transpose(0, 1)[None] for t in (q[q0:q1], k[k0:k1], v[k0:k1]))  # (1, H, L, D)
        result = _attend(probs, *one, alibi=slopes, **keywords)
        out[q0:q1] = result.output[0].transpose(0, 1)
        if probs:
            got_lse, got_weights = _tensor(result.lse)[0], _tensor(result.weights)[0]
            if lse is None or weights is None:
                lse = got_lse.new_full((got_lse.shape[0], total_q), -math.inf)
                weights = got_weights.new_zeros(got_weights.shape[0], total_q, total_k)
            lse[:, q0:q1] = got_lse
            weights[:, q0:q1, k0:k1] = got_weights
    if not probs:
        return out
    if lse is None or weights is None:  # no sequence holds a query
        lse = q.new_full((q.shape[1], total_q), -math.inf)
        weights = q.new_zeros(q.shape[1], total_q, total_k)
    return out, lse, weights


def _attend(probs: bool, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **keywords: Any) -> AttentionOutput:
    """One `selfattn.attention` call, as an AttentionOutput: with the weights and the lse when `probs`."""
    if probs:
        return attention(q, k, v, return_weights=True, return_lse=True, **keywords)
    return AttentionOutput(attention(q, k, v, **keywords), None, None)


def check_cu_seqlens(
    name: str, cu_seqlens: object, total: int, max_seqlen: object = None, max_name: str = "max_seqlen"
) -> list[int]:
    """FlashAttention's cumulative sequence lengths as a list of Python ints, checked: a 1-D int32/int64 tensor of
    N + 1 >= 2 entries, 0 first, non-decreasing, `total` last; `max_seqlen` (an int or a 0-d integer tensor, when
    given) at least each length. Each error names the bad value."""
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(f"{name} must be a 1-D int32/int64 tensor, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must be int32 or int64, got {cu_seqlens.dtype}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(f"{name} must be 1-D with N + 1 >= 2 entries, got shape {tuple(cu_seqlens.shape)}")
    starts = [int(x) for x in cu_seqlens.tolist()]
    if starts[0] != 0:
        raise ValueError(f"{name} must start at 0, got {starts[0]} ({name} = {starts})")
    for s, (a, b) in enumerate(pairwise(starts)):
        if b < a:
            raise ValueError(f"{name} must be non-decreasing: {name}[{s + 1}] = {b} < {name}[{s}] = {a}")
    if starts[-1] != total:
        raise ValueError(f"{name} must end at the total length {total}, got {starts[-1]} ({name} = {starts})")
    if max_seqlen is not None:
        longest = max(b - a for a, b in pairwise(starts))
        limit = _integer(max_name, max_seqlen)
        if limit < longest:
            raise ValueError(f"{max_name} = {limit} is below the longest sequence of {name} ({longest})")
    return starts


def segments_of(starts: Sequence[int], device: torch.device | str | None = None) -> torch.Tensor:
    """(1, total) int64 segment ids of packed sequences from their cumulative starts (sequence s: id s)."""
    lengths = torch.tensor([b - a for a, b in pairwise(starts)], dtype=torch.int64, device=device)
    ids = torch.arange(len(lengths), dtype=torch.int64, device=device)
    return torch.repeat_interleave(ids, lengths)[None]


# --- PyTorch SDPA ---------------------------------------------------------------------------------------------


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """`torch.nn.functional.scaled_dot_product_attention`, exactly, on `selfattn.attention`.

    query (..., Hq, L, E), key (..., Hk, S, E), value (..., Hv, S, Ev); the leading dims broadcast as SDPA's
    returns (..., Hq, L, Ev)

    SDPA's semantics: is_causal is aligned TOP-LEFT (query i sees keys j <= i, whatever L and S: with L = 2,
    S = 5 the rows are 1 0 0 0 0 / 1 1 0 0 0; selfattn's causal=True is bottom-right, so L ≠ S becomes a mask);
    attn_mask is bool (True = takes part) or additive, of bool or query's dtype, broadcastable to (..., L, S);
    attn_mask with is_causal is refused, as SDPA documents (PyTorch's math kernel refuses the pair; its CPU flash
    kernel, which some shapes reach, applies both); without enable_gqa the head dims broadcast like the
    batch dims (Hk = 1 or Hq), and with it Hq % Hk == 0 and Hq % Hv == 0 (query head h reads head h // (Hq/Hk));
    scale defaults to 1/√E; dropout_p drops weights (selfattn draws its own dropout mask, not SDPA's random stream).
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"scaled_dot_product_attention: {name} must be a tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(f"scaled_dot_product_attention: {name} must have >= 2 dims, got shape {tuple(t.shape)}")
    _check_flags(is_causal=is_causal, enable_gqa=enable_gqa)
    if is_causal and attn_mask is not None:
        raise ValueError(
            "scaled_dot_product_attention: attn_mask and is_causal=True together are refused, as SDPA documents"
        )
    if attn_mask is not None and attn_mask.dtype not in (torch.bool, query.dtype):
        raise TypeError(
            f"scaled_dot_product_attention: attn_mask must be bool or query's dtype {query.dtype}, as SDPA's, "
            f"got {attn_mask.dtype}"
        )
    squeeze = max(query.dim(), key.dim(), value.dim()) == 2
    q, k, v = (t[None] if squeeze else t for t in (query, key, value))
    n = max(q.dim(), k.dim(), v.dim())
    q, k, v = (t.reshape((1,) * (n - t.dim()) + tuple(t.shape)) for t in (q, k, v))  # SDPA's broadcasting
    Hq, Hk, Hv = q.shape[-3], k.shape[-3], v.shape[-3]
    if enable_gqa:
        if Hq % Hk or Hq % Hv:
            raise ValueError(
                f"scaled_dot_product_attention(enable_gqa=True): the heads of key ({Hk}) and value ({Hv}) must "
                f"divide the heads of query ({Hq}), as SDPA's"
            )
        H = Hq
    else:
        try:
            H = torch.broadcast_shapes((Hq,), (Hk,), (Hv,))[0]
        except RuntimeError:
            raise ValueError(
                f"scaled_dot_product_attention: query has {Hq} heads, key {Hk} and value {Hv}; without enable_gqa "
                f"they broadcast (1 or equal), as SDPA's: pass enable_gqa=True for grouped-query attention"
            ) from None
    batch = torch.broadcast_shapes(q.shape[:-3], k.shape[:-3], v.shape[:-3])
    L, S = q.shape[-2], k.shape[-2]
    q = q.expand(*batch, H, L, q.shape[-1]).reshape(-1, H, L, q.shape[-1])  # (B, H, L, E)
    if Hk != Hv:  # grouped heads of different counts: each to H, as SDPA repeats them
        k, v = (t.repeat_interleave(H // t.shape[-3], dim=-3) for t in (k, v))
    Hkv = k.shape[-3]
    k = k.expand(*batch, Hkv, S, k.shape[-1]).reshape(-1, Hkv, S, k.shape[-1])
    v = v.expand(*batch, Hkv, S, v.shape[-1]).reshape(-1, Hkv, S, v.shape[-1])
    mask = attn_mask
    if mask is not None and (len(batch) != 1 or mask.dim() > 4):
        mask = mask.broadcast_to(*batch, H, L, S).reshape(-1, H, L, S)
    if is_causal and L != S:
        mask = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()  # top-left: j <= i
    out = attention(q, k, v, mask=mask, causal=is_causal and L == S, scale=scale, dropout_p=dropout_p)
    out = out.reshape(*batch, H, L, out.shape[-1])
    return out[0] if squeeze else out


# --- xFormers ---------------------------------------------------------------------------------------------------


class AttentionBias:
    """The base of xFormers' attention-bias classes mirrored here (`xformers.ops.fmha.attn_bias`): each says which
    keys a query may look at, as `selfattn.attention` arguments (`terms`)."""

    def terms(self, B: int, Mq: int, Mk: int, device: torch.device) -> dict[str, Any]:
        """`selfattn.attention` keywords (causal, mask, segments) for queries (B, Mq) over keys (B, Mk)."""
        raise NotImplementedError


class LowerTriangularMask(AttentionBias):
    """xFormers' causal mask, aligned TOP-LEFT: query i sees keys j <= i (Mq = 2, Mk = 5: 1 0 0 0 0 / 1 1 0 0 0).
    Equal to selfattn's causal=True when Mq = Mk."""

    def terms(self, B: int, Mq: int, Mk: int, device: torch.device) -> dict[str, Any]:
        if Mq == Mk:
            return {"causal": True}
        return {"mask": torch.ones(Mq, Mk, dtype=torch.bool, device=device).tril()}

    def add_bias(self, bias: torch.Tensor) -> LowerTriangularMaskWithTensorBias:
        """This mask with an additive float `bias` (broadcastable to (B, H, Mq, Mk)) added to the scaled scores."""
        return LowerTriangularMaskWithTensorBias(bias)


class LowerTriangularMaskWithTensorBias(LowerTriangularMask):
    """xFormers' `LowerTriangularMask().add_bias(bias)`: the additive `bias` where the TOP-LEFT causal rule lets a
    query look (j <= i), −inf elsewhere."""

    def __init__(self, bias: torch.Tensor) -> None:
        if not isinstance(bias, torch.Tensor) or not bias.dtype.is_floating_point:
            got = bias.dtype if isinstance(bias, torch.Tensor) else type(bias).__name__
            raise TypeError(f"add_bias takes an additive float tensor, got {got}")
        self.bias = bias

    def terms(self, B: int, Mq: int, Mk: int, device: torch.device) -> dict[str, Any]:
        if Mq == Mk:
            return {"causal": True, "mask": self.bias}
        hidden = ~torch.ones(Mq, Mk, dtype=torch.bool, device=device).tril()
        return {"mask": self.bias.masked_fill(hidden, -math.inf)}


class LowerTriangularFromBottomRightMask(AttentionBias):
    """xFormers' causal mask aligned BOTTOM-RIGHT: query i sees keys j <= i + Mk − Mq — selfattn's causal=True."""

    def terms(self, B: int, Mq: int, Mk: int, device: torch.device) -> dict[str, Any]:
        return {"causal": True}


class BlockDiagonalMask(AttentionBias):
    """xFormers' packed sequences (batch B = 1): block s holds queries q_seqlen[:s].sum() + range(q_seqlen[s]) and
    keys likewise of kv_seqlen (default q_seqlen); a query sees every key of its own block, none of another."""

    causal = False

    def __init__(self, q_seqlen: Sequence[int], kv_seqlen: Sequence[int] | None = None) -> None:
        self.q_seqlen = _lengths("q_seqlen", q_seqlen)
        self.kv_seqlen = self.q_seqlen if kv_seqlen is None else _lengths("kv_seqlen", kv_seqlen)
        if len(self.kv_seqlen) != len(self.q_seqlen):
            raise ValueError(f"q_seqlen has {len(self.q_seqlen)} blocks and kv_seqlen {len(self.kv_seqlen)}: one each")

    @classmethod
    def from_seqlens(cls, q_seqlen: Sequence[int], kv_seqlen: Sequence[int] | None = None) -> BlockDiagonalMask:
        """The mask of blocks of these lengths (xFormers' constructor)."""
        return cls(q_seqlen, kv_seqlen)

    def make_causal(self) -> BlockDiagonalCausalMask:
        """The same blocks, each causal TOP-LEFT (xFormers' `BlockDiagonalCausalMask`)."""
        return BlockDiagonalCausalMask(self.q_seqlen, self.kv_seqlen)

    def terms(self, B: int, Mq: int, Mk: int, device: torch.device) -> dict[str, Any]:
        if B != 1 or Mq != sum(self.q_seqlen) or Mk != sum(self.kv_seqlen):
            raise ValueError(
                f"{type(self).__name__} of q_seqlen {self.q_seqlen} and kv_seqlen {self.kv_seqlen} needs B = 1, "
                f"Mq = {sum(self.q_seqlen)}, Mk = {sum(self.kv_seqlen)}; got B = {B}, Mq = {Mq}, Mk = {Mk}"
            )
        starts = [0, *torch.tensor(self.q_seqlen, dtype=torch.int64).cumsum(0).tolist()]
        if self.q_seqlen == self.kv_seqlen:  # square blocks: top-left and bottom-right agree
            return {"segments": segments_of(starts, device), "causal": self.causal}
        key_starts = [0, *torch.tensor(self.kv_seqlen, dtype=torch.int64).cumsum(0).tolist()]
        mask = torch.zeros(Mq, Mk, dtype=torch.bool, device=device)
        for (q0, q1), (k0, k1) in zip(pairwise(starts), pairwise(key_starts), strict=True):
            block = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool, device=device)
            mask[q0:q1, k0:k1] = block.tril() if self.causal else block
        return {"mask": mask}


class BlockDiagonalCausalMask(BlockDiagonalMask):
    """`BlockDiagonalMask` with each block causal, aligned TOP-LEFT within the block, as xFormers' (a query at
    offset i of its block sees the keys at offsets j <= i of the same block)."""

    causal = True


def memory_efficient_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_bias: torch.Tensor | AttentionBias | None = None,
    p: float = 0.0,
    scale: float | None = None,
) -> torch.Tensor:
    """xFormers' `xformers.ops.memory_efficient_attention`, on `selfattn.attention`.

    query (B, Mq, H, K), key (B, Mk, Hkv, K), value (B, Mk, Hkv, Kv) (or 3-D (B, M, K): one head); Hkv = H as
    xFormers asks, or any divisor of H (grouped-query attention, which xFormers writes as 5-D BMGHK)
    returns (B, Mq, H, Kv) (3-D in, 3-D out)

    attn_bias: None; a float tensor added to the scaled scores, broadcastable to (B, H, Mq, Mk); or one of the
    classes mirrored here — `LowerTriangularMask` (causal TOP-LEFT) and its `.add_bias(tensor)`,
    `LowerTriangularFromBottomRightMask`,
    `BlockDiagonalMask.from_seqlens(q_seqlen, kv_seqlen)` and its `.make_causal()` (`BlockDiagonalCausalMask`,
    each block top-left). p: dropout on the weights. scale: default 1/√K.
    """
    three = query.dim() == 3
    if three:
        _check_layout("memory_efficient_attention", "(B, M, K)", 3, query=query, key=key, value=value)
        query, key, value = (t[:, :, None] for t in (query, key, value))
    _check_layout("memory_efficient_attention", "(B, M, H, K)", 4, query=query, key=key, value=value)
    B, Mq, H, _ = query.shape
    Mk = key.shape[1]
    if attn_bias is None:
        terms: dict[str, Any] = {}
    elif isinstance(attn_bias, AttentionBias):
        terms = attn_bias.terms(B, Mq, Mk, query.device)
    elif isinstance(attn_bias, torch.Tensor):
        if not attn_bias.dtype.is_floating_point:
            raise TypeError(
                f"memory_efficient_attention: an attn_bias tensor is additive (floating), got {attn_bias.dtype}: "
                "for a bool mask (True = may look) use selfattn.attention(mask=...)"
            )
        terms = {"mask": attn_bias}
    else:
        raise TypeError(
            f"memory_efficient_attention: attn_bias must be None, a float tensor or one of selfattn.compat's "
            f"LowerTriangularMask, LowerTriangularFromBottomRightMask, BlockDiagonalMask, BlockDiagonalCausalMask; "
            f"got {type(attn_bias).__name__}"
        )
    heads_first = (query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2))  # (B, H, M, K)
    out = _attend(False, *heads_first, scale=scale, dropout_p=p, **terms).output.transpose(1, 2)  # (B, Mq, H, Kv)
    return out[:, :, 0] if three else out


# --- shared checks -------------------------------------------------------------------------------------------


def _check_layout(function: str, layout: str, dims: int, **tensors: object) -> None:
    """Each tensor has `dims` dims (the anchor's `layout`); `attention` checks how their sizes agree."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{function}: {name} must be a tensor {layout}, got {type(t).__name__}")
        if t.dim() != dims:
            raise ValueError(f"{function}: {name} must be {layout}, got shape {tuple(t.shape)}")


def _check_flags(**flags: object) -> None:
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}")


def _window(window_size: object) -> tuple[int, int] | None:
    """FlashAttention's window_size (left, right) as `attention`'s window; (−1, −1): none."""
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise TypeError(f"window_size must be a pair (left, right), −1 = unbounded, got {window_size!r}")
    left, right = (_integer("window_size", side) for side in window_size)
    return None if (left, right) == (-1, -1) else (left, right)


def _integer(name: str, value: object) -> int:
    """An int, or a 0-d integer tensor's value (transformers passes max lengths as tensors)."""
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.dtype.is_floating_point:
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    return value


def _lengths(name: str, lengths: object) -> list[int]:
    """Sequence lengths (ints >= 0, a list or a 1-D tensor) as a list."""
    values = lengths.tolist() if isinstance(lengths, torch.Tensor) else lengths
    if not isinstance(values, (list, tuple)) or not values:
        raise TypeError(f"{name} must be a non-empty list of lengths, got {lengths!r}")
    checked = [_integer(name, x) for x in values]
    if any(x < 0 for x in checked):
        raise ValueError(f"{name} must hold lengths >= 0, got {checked}")
    return checked


def _tensor(t: torch.Tensor | None) -> torch.Tensor:
    """A field the call asked for (so present)."""
    if t is None:
        raise RuntimeError("selfattn.attention left out a field it was asked for")
    return t
