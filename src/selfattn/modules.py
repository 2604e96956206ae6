"""torch.nn modules: the tutorial's single head, multi-head attention, and a KV cache.

    SelfAttention(128)                 (10, 128) -> (10, 128), one head, W_Q/W_K/W_V
    MultiHeadSelfAttention(128, 8)     (B, L, 128) -> (B, L, 128), heads + output projection
    KVCache()                          keys/values of the past, for decoding one token at a time

With `context_parallel=` (a `selfattn.distributed.ContextParallel`), MultiHeadSelfAttention runs
on this rank's rows of a sequence split across processes and its attention goes round the ring.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from . import checks
from .functional import attention
from .limits import check_parameters
from .request import check_dense

__all__ = ["SelfAttention", "MultiHeadSelfAttention", "KVCache", "SequenceParallel"]


@runtime_checkable
class SequenceParallel(Protocol):
    """What `MultiHeadSelfAttention(..., context_parallel=cp)` needs of `cp`: attention of this rank's rows
    over a sequence split across processes. `selfattn.distributed.ContextParallel` is the one to pass
    (this module sits below `selfattn.distributed` and knows it only by this method).

    q (B, Hq, Lr, D), k (B, Hkv, Lr, D), v (B, Hkv, Lr, Dv)  ->  (B, Hq, Lr, Dv), this rank's rows
    """

    def attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, scale: float, backend: str
    ) -> torch.Tensor: ...


def _as_batch(x, d_model: int, weight: torch.Tensor, name: str = "x") -> tuple[torch.Tensor, bool]:
    """(L, D) or (B, L, D) -> (B, L, D), and whether a batch dim was added."""
    check_dense(name, x)  # a sparse or nested x is named here, not by a reshape deep inside
    if x.dim() not in (2, 3):
        raise ValueError(f"{name} must be (L, d_model) or (B, L, d_model), got shape {tuple(x.shape)}")
    if x.shape[-1] != d_model:
        raise ValueError(f"{name} has d_model={x.shape[-1]} but the module was built for d_model={d_model}")
    if x.dtype != weight.dtype:
        raise TypeError(
            f"{name} has dtype {x.dtype} but the module's weights are {weight.dtype}; convert one "
            f"(x.to({weight.dtype}) or module.to({x.dtype}))"
        )
    return (x[None], True) if x.dim() == 2 else (x, False)


class KVCache:
    """Keys and values of every position seen so far, for one attention layer.

    Starts empty; each forward pass given `cache=` appends its new keys/values and
    attends over the whole past. Storage grows by doubling, so appending one token is
    amortised O(1) copies. Meant for inference (under `torch.no_grad()`): appending
    writes into storage that earlier steps read.

        k, v  (B, Hkv, L, D)   `keys` / `values` views of the first `length` positions
    """

    def __init__(self) -> None:
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self.length = 0

    def __len__(self) -> int:
        return self.length

    @property
    def keys(self) -> torch.Tensor | None:
        return None if self._k is None else self._k[:, :, : self.length]

    @property
    def values(self) -> torch.Tensor | None:
        return None if self._v is None else self._v[:, :, : self.length]

    def reset(self) -> None:
        self._k = self._v = None
        self.length = 0

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add k (B, Hkv, Ln, D) and v (B, Hkv, Ln, Dv); return all keys and values so far.
        Everything is checked before anything is written: a refused append leaves the cache as it was."""
        self._check(k, v)
        need = self.length + k.shape[2]
        if self._k is None or self._v is None or need > self._k.shape[2]:
            capacity = max(need, 2 * (0 if self._k is None else self._k.shape[2]), 16)
            self._k = self._grow(self._k, k, capacity)
            self._v = self._grow(self._v, v, capacity)
        self._k[:, :, self.length : need] = k
        self._v[:, :, self.length : need] = v
        self.length = need
        return self._k[:, :, : self.length], self._v[:, :, : self.length]

    def truncate(self, length: int) -> None:
        """Forget every position from `length` on (undo appends)."""
        self.length = checks.integer("length", length, low=0, high=self.length)

    def _check(self, k, v) -> None:
        for name, t in (("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.dim() != 4:
                raise ValueError(f"{name} must be 4-D (B, Hkv, Ln, D), got shape {tuple(t.shape)}")
        if k.shape[:3] != v.shape[:3] or k.dtype != v.dtype or k.device != v.device:
            raise ValueError(
                f"k and v must agree on (B, Hkv, Ln), dtype and device, got k {tuple(k.shape)} "
                f"{k.dtype} {k.device} and v {tuple(v.shape)} {v.dtype} {v.device}"
            )
        if self._k is None:
            return
        held_pairs: tuple[tuple[str, torch.Tensor, torch.Tensor | None], ...] = (
            ("keys", k, self._k),
            ("values", v, self._v),
        )
        for name, new, have in held_pairs:
            if have is None:  # _k and _v are set together
                continue
            held, given = (have.shape[0], have.shape[1], have.shape[3]), (new.shape[0], new.shape[1], new.shape[3])
            if held != given or new.dtype != have.dtype or new.device != have.device:
                raise ValueError(
                    f"cache holds {name} of (B, Hkv, D) = {held} {have.dtype} on {have.device}, "
                    f"cannot append {given} {new.dtype} on {new.device}"
                )

    def _grow(self, old: torch.Tensor | None, like: torch.Tensor, capacity: int) -> torch.Tensor:
        B, H, _, D = like.shape
        fresh = like.new_empty(B, H, capacity, D)
        if old is not None:
            fresh[:, :, : self.length] = old[:, :, : self.length]
        return fresh


def _check_size(module: str, parameters: int, sizes: str) -> None:
    """Refuse, before any weight is allocated, a module over the one parameter budget (`limits.check_parameters`:
    MAX_PARAMETERS and the memory available)."""
    check_parameters(parameters, f"{module}({sizes})")


def _check_cache(cache) -> KVCache:
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a KVCache, got {type(cache).__name__}")
    return cache


class SelfAttention(nn.Module):
    """The tutorial's one head: Q = XW_Q, K = XW_K, V = XW_V, softmax(QKᵀ/√d_k, causal)·V.

    x  (L, d_model) or (B, L, d_model)  ->  the same shape (10×128 in, 10×128 out)

    W_Q and W_K map d_model to d_k (default d_model); W_V maps d_model to d_model, so the
    output has the input's shape without any output projection.
    """

    def __init__(self, d_model: int, d_k: int | None = None, causal: bool = True, *, backend: str = "auto"):
        super().__init__()
        self.d_model = checks.integer("d_model", d_model, low=1)
        self.d_k = self.d_model if d_k is None else checks.integer("d_k", d_k, low=1)
        self.causal = checks.boolean("causal", causal)
        _check_size(
            "SelfAttention", self.d_model * (2 * self.d_k + self.d_model), f"d_model={self.d_model}, d_k={self.d_k}"
        )
        self.backend = backend
        self.w_q = nn.Linear(self.d_model, self.d_k, bias=False)
        self.w_k = nn.Linear(self.d_model, self.d_k, bias=False)
        self.w_v = nn.Linear(self.d_model, self.d_model, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x, added = _as_batch(x, self.d_model, self.w_q.weight)
        q, k, v = (w(x)[:, None] for w in (self.w_q, self.w_k, self.w_v))  # (B, 1, L, d_k|d_model)
        out = attention(q, k, v, causal=self.causal, mask=mask, backend=self.backend)[:, 0]
        return out[0] if added else out

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, d_k={self.d_k}, causal={self.causal}"


class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention with grouped key/value heads and an output projection.

    x  (L, d_model) or (B, L, d_model)  ->  the same shape

    n_heads query heads of head_dim (default d_model // n_heads) share n_kv_heads key/value
    heads (default n_heads: plain MHA; 1: MQA; between: GQA). `mask` is passed to
    `selfattn.attention` (bool or additive, broadcastable to (B, H, Lq, Lk)); with `cache`,
    the new positions attend over everything the cache holds (bottom-right causal).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        causal: bool = True,
        *,
        head_dim: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        backend: str = "auto",
    ):
        super().__init__()
        self.d_model = checks.integer("d_model", d_model, low=1)
        self.n_heads = checks.integer("n_heads", n_heads, low=1)
        self.n_kv_heads = self.n_heads if n_kv_heads is None else checks.integer("n_kv_heads", n_kv_heads, low=1)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")
        if head_dim is None:
            if self.d_model % self.n_heads:
                raise ValueError(
                    f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; pass head_dim explicitly"
                )
            head_dim = self.d_model // self.n_heads
        self.head_dim = checks.integer("head_dim", head_dim, low=1)
        _check_size(
            "MultiHeadSelfAttention",
            self.d_model * self.head_dim * (2 * self.n_heads + 2 * self.n_kv_heads),
            f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, head_dim={self.head_dim}",
        )
        self.causal = checks.boolean("causal", causal)
        dropout = checks.real("dropout", dropout, low=0, high=1, high_open=True)
        self.scale = 1.0 / math.sqrt(self.head_dim)  # multiplies Q Kᵀ: the tutorial's ÷√d_k
        self.dropout = dropout
        self.backend = backend
        self.q_proj = nn.Linear(self.d_model, self.n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(self.d_model, self.n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(self.d_model, self.n_kv_heads * self.head_dim, bias=bias)
        self.out_proj = nn.Linear(self.n_heads * self.head_dim, self.d_model, bias=bias)

    def project(self, x: torch.Tensor, cache: KVCache | None = None):
        """Queries, keys and values split into heads.

        x (B, L, d_model) -> q (B, H, L, D), k and v (B, Hkv, L', D); with a cache, k/v hold
        the whole past plus the new positions (L' = cache length after appending).
        """
        q = self.q_proj(x).unflatten(-1, (self.n_heads, self.head_dim)).transpose(1, 2)
        k = self.k_proj(x).unflatten(-1, (self.n_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).unflatten(-1, (self.n_kv_heads, self.head_dim)).transpose(1, 2)
        if cache is not None:
            k, v = _check_cache(cache).append(k, v)
        return q, k, v

    def merge(self, o: torch.Tensor) -> torch.Tensor:
        """Heads back together and through the output projection: (B, H, L, D) -> (B, L, d_model)."""
        return self.out_proj(o.transpose(1, 2).flatten(2))

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        *,
        context_parallel: SequenceParallel | None = None,
    ):
        """x (L, d_model) or (B, L, d_model) -> the same shape.

        mask              bool or additive, broadcastable to (B, H, L, L'), L' = cache length after appending
        cache             a KVCache: the new positions attend over the whole past it holds
        context_parallel  a `selfattn.distributed.ContextParallel`: x holds this rank's rows of a sequence
                          split across processes (from `shard`), and attention runs over the whole
                          sequence (`ring_attention`). No mask, cache or attention dropout with it.
        """
        x, added = _as_batch(x, self.d_model, self.q_proj.weight)
        if context_parallel is not None:
            out = self._context_parallel(x, mask, cache, context_parallel)
            return out[0] if added else out
        past = 0 if cache is None else len(_check_cache(cache))
        q, k, v = self.project(x, cache)
        try:
            o = attention(
                q,
                k,
                v,
                causal=self.causal,
                mask=mask,
                scale=self.scale,
                dropout_p=self.dropout if self.training else 0.0,
                backend=self.backend,
            )
        except (TypeError, ValueError):
            if cache is not None:  # a refused call (a bad mask too) leaves the cache as it was
                cache.truncate(past)
            raise
        out = self.merge(o)
        return out[0] if added else out

    def _context_parallel(self, x: torch.Tensor, mask, cache, cp) -> torch.Tensor:
        """x (B, Lr, d_model): this rank's rows -> (B, Lr, d_model), attention over the whole sequence."""
        if not isinstance(cp, SequenceParallel):
            raise TypeError(f"context_parallel must be a selfattn.distributed.ContextParallel, got {type(cp).__name__}")
        refused = [
            what
            for what, given in (
                ("a mask", mask is not None),
                ("a KV cache", cache is not None),
                (f"attention dropout (dropout={self.dropout}, training)", self.training and self.dropout > 0),
            )
            if given
        ]
        if refused:
            raise ValueError(
                f"context parallel attention does not support {' or '.join(refused)}: it runs causal "
                f"or full attention over the whole sequence (decode with a cache in one process; "
                f"call .eval() or build with dropout=0)"
            )
        q, k, v = self.project(x)
        return self.merge(cp.attention(q, k, v, causal=self.causal, scale=self.scale, backend=self.backend))

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, "
            f"head_dim={self.head_dim}, causal={self.causal}"
        )
