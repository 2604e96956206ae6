"""Attention backends: one contract (`Request` → `base.Result`), each says what it supports and costs.

    sdpa    PyTorch's scaled_dot_product_attention (fast; no weights, lse or softcap)
    native  FlashAttention-2 as one compiled CPU kernel (lse, softcap, backward; built on first use)
    tiled   FlashAttention-2 in PyTorch ops: O(N) memory, skips hidden blocks, lse, softcap, backward
    flex    PyTorch's FlexAttention, compiled (windows, masks, softcap; lse and backward on a GPU)
    naive   the whole weight matrix, materialised (weights, lse, softcap, dropout; O(N²) memory)

Each backend declares its `Capabilities` and its `Cost` as data; `choose(request, name)` returns the
backend named, or for "auto" the fastest that can serve the request; a refusal gives every reason.
`explain(request)` says what each backend would do and which "auto" takes, and `render` prints it.
`budget(nbytes)` bounds what a backend may materialise, `notices(callback)` hears about compiles.
How to add a backend: docs/architecture.md.
"""

from __future__ import annotations

from . import cost
from .base import AttentionOutput, Backend, Capabilities, Cost, Request, Result, budget, budget_bytes
from .dispatch import BACKENDS, auto_order, choose, explain, register, render
from .notice import Notice, notices

__all__ = [
    "BACKENDS",
    "Backend",
    "Capabilities",
    "Cost",
    "Request",
    "Result",
    "AttentionOutput",
    "Notice",
    "auto_order",
    "budget",
    "budget_bytes",
    "choose",
    "cost",
    "explain",
    "notices",
    "register",
    "render",
]
