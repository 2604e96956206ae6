"""Attention backends: one contract (`base.Request` → `base.Result`), each says what it supports.

    naive   the whole weight matrix, materialised (weights, lse, softcap; O(N²) memory)
    sdpa    PyTorch's scaled_dot_product_attention (fast; no weights, lse or softcap)
    tiled   FlashAttention-2 in PyTorch ops: O(N) memory, skips hidden blocks, lse, softcap, backward

Each backend declares its `Capabilities` as data; `choose(request, name)` returns the backend
named, or for "auto" the fastest that can serve the request; a refusal gives every reason.
`explain(request)` says what each backend would do and which "auto" takes, and `render` prints it.
"""

from __future__ import annotations

from . import cost
from .base import AttentionOutput, Backend, Capabilities, Request, Result
from .dispatch import AUTO_ORDER, BACKENDS, choose, explain, render

__all__ = [
    "BACKENDS",
    "AUTO_ORDER",
    "Backend",
    "Capabilities",
    "Request",
    "Result",
    "AttentionOutput",
    "choose",
    "explain",
    "render",
    "cost",
]
