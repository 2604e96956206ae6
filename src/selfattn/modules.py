"""torch.nn modules: the tutorial's single head, multi-head attention, and a KV cache.

    SelfAttention(128)                 (10, 128) -> (10, 128), one head, W_Q/W_K/W_V
    MultiHeadSelfAttention(128, 8)     (B, L, 128) -> (B, L, 128), heads + output projection
    KVCache()                          keys/values of the past, for decoding one token at a time
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .functional import attention

__all__ = ["SelfAttention", "MultiHeadSelfAttention", "KVCache"]


def _positive_int(name: str, x) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"{name} must be an int, got {type(x).__name__} {x!r}")
    if x < 1:
        raise ValueError(f"{name} must be >= 1, got {x}")
    return x


def _as_batch(x, d_model: int, name: str = "x") -> tuple[torch.Tensor, bool]:
    """(L, D) or (B, L, D) -> (B, L, D), and whether a batch dim was added."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() not in (2, 3):
        raise ValueError(f"{name} must be (L, d_model) or (B, L, d_model), got shape {tuple(x.shape)}")
    if x.shape[-1] != d_model:
        raise ValueError(f"{name} has d_model={x.shape[-1]} but the module was built for d_model={d_model}")
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
        """Add k (B, Hkv, Ln, D) and v (B, Hkv, Ln, Dv); return all keys and values so far."""
        if self._k is not None:
            have, new = self._k.shape, k.shape
            if (have[0], have[1], have[3]) != (new[0], new[1], new[3]) or k.dtype != self._k.dtype:
                raise ValueError(f"cache holds keys of (B, Hkv, D) = {(have[0], have[1], have[3])} {self._k.dtype}, "
                                 f"cannot append {(new[0], new[1], new[3])} {k.dtype}")
        need = self.length + k.shape[2]
        if self._k is None or need > self._k.shape[2]:
            capacity = max(need, 2 * (0 if self._k is None else self._k.shape[2]), 16)
            self._k = self._grow(self._k, k, capacity)
            self._v = self._grow(self._v, v, capacity)
        self._k[:, :, self.length: need] = k
        self._v[:, :, self.length: need] = v
        self.length = need
        return self.keys, self.values

    def _grow(self, old: torch.Tensor | None, like: torch.Tensor, capacity: int) -> torch.Tensor:
        B, H, _, D = like.shape
        fresh = like.new_empty(B, H, capacity, D)
        if old is not None:
            fresh[:, :, : self.length] = old[:, :, : self.length]
        return fresh


class SelfAttention(nn.Module):
    """The tutorial's one head: Q = XW_Q, K = XW_K, V = XW_V, softmax(QKᵀ/√d_k, causal)·V.

    x  (L, d_model) or (B, L, d_model)  ->  the same shape (10×128 in, 10×128 out)

    W_Q and W_K map d_model to d_k (default d_model); W_V maps d_model to d_model, so the
    output has the input's shape without any output projection.
    """

    def __init__(self, d_model: int, d_k: int | None = None, causal: bool = True, *, backend: str = "auto"):
        super().__init__()
        self.d_model = _positive_int("d_model", d_model)
        self.d_k = self.d_model if d_k is None else _positive_int("d_k", d_k)
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {type(causal).__name__} {causal!r}")
        self.causal = causal
        self.backend = backend
        self.w_q = nn.Linear(self.d_model, self.d_k, bias=False)
        self.w_k = nn.Linear(self.d_model, self.d_k, bias=False)
        self.w_v = nn.Linear(self.d_model, self.d_model, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x, added = _as_batch(x, self.d_model)
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

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None, causal: bool = True, *,
                 head_dim: int | None = None, bias: bool = True, dropout: float = 0.0, backend: str = "auto"):
        super().__init__()
        self.d_model = _positive_int("d_model", d_model)
        self.n_heads = _positive_int("n_heads", n_heads)
        self.n_kv_heads = self.n_heads if n_kv_heads is None else _positive_int("n_kv_heads", n_kv_heads)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")
        if head_dim is None:
            if self.d_model % self.n_heads:
                raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                                 f"pass head_dim explicitly")
            head_dim = self.d_model // self.n_heads
        self.head_dim = _positive_int("head_dim", head_dim)
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {type(causal).__name__} {causal!r}")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be a number in [0, 1), got {dropout!r}")
        self.causal = causal
        self.scale = 1.0 / math.sqrt(self.head_dim)  # multiplies Q Kᵀ: the tutorial's ÷√d_k
        self.dropout = float(dropout)
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
            if not isinstance(cache, KVCache):
                raise TypeError(f"cache must be a KVCache, got {type(cache).__name__}")
            k, v = cache.append(k, v)
        return q, k, v

    def merge(self, o: torch.Tensor) -> torch.Tensor:
        """Heads back together and through the output projection: (B, H, L, D) -> (B, L, d_model)."""
        return self.out_proj(o.transpose(1, 2).flatten(2))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, cache: KVCache | None = None):
        x, added = _as_batch(x, self.d_model)
        q, k, v = self.project(x, cache)
        o = attention(q, k, v, causal=self.causal, mask=mask, scale=self.scale,
                      dropout_p=self.dropout if self.training else 0.0, backend=self.backend)
        out = self.merge(o)
        return out[0] if added else out

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, "
                f"head_dim={self.head_dim}, causal={self.causal}")
