"""Attention backends: one contract (`base.Request` → `base.Result`), each says what it supports.

    naive   the whole weight matrix, materialised (weights, lse, softcap; O(N²) memory)
    sdpa    PyTorch's scaled_dot_product_attention (fast; no weights, lse or softcap)

`choose(request, name)` returns the backend named, or for "auto" the fastest that can
serve the request; a refusal always says why.
"""

from __future__ import annotations

from .base import Backend, Request, Result
from .naive import NaiveBackend
from .sdpa import SdpaBackend

__all__ = ["BACKENDS", "AUTO_ORDER", "Backend", "Request", "Result", "choose"]

BACKENDS: dict[str, Backend] = {b.name: b for b in (NaiveBackend(), SdpaBackend())}

AUTO_ORDER = ("sdpa", "naive")
"""The order "auto" tries backends in: fastest first."""


def choose(request: Request, name: str) -> Backend:
    """The backend called `name` if it can serve `request`; "auto": the first in AUTO_ORDER that can."""
    if name == "auto":
        reasons = []
        for candidate in AUTO_ORDER:
            backend = BACKENDS[candidate]
            why = backend.refuse(request)
            if why is None:
                return backend
            reasons.append(f"{candidate}: {why}")
        raise ValueError("no backend can serve this request: " + "; ".join(reasons))
    backend = BACKENDS[name]
    why = backend.refuse(request)
    if why is not None:
        raise ValueError(f"backend {name!r} cannot serve this request: {why}")
    return backend
