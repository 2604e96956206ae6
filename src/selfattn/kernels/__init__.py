"""Attention backends: one contract (`base.Request` → `base.Result`), each says what it supports.

    naive   the whole weight matrix, materialised (weights, lse, softcap; O(N²) memory)
    sdpa    PyTorch's scaled_dot_product_attention (fast; no weights, lse or softcap)
    tiled   FlashAttention-2 in PyTorch ops: O(N) memory, skips hidden blocks, lse, softcap, backward
    native  the same algorithm compiled (C++, one parallel region), built on first use; CPU only
    flex    PyTorch's FlexAttention, compiled per signature (on the CPU: forward only, no lse)

`choose(request, name)` returns the backend named, or for "auto" the fastest that can
serve the request; a refusal always says why.
"""

from __future__ import annotations

from . import cost
from .base import Backend, Request, Result
from .flex import FlexBackend
from .naive import NaiveBackend
from .native import NativeBackend
from .sdpa import SdpaBackend
from .tiled import TiledBackend

__all__ = ["BACKENDS", "AUTO_ORDER", "Backend", "Request", "Result", "choose"]

BACKENDS: dict[str, Backend] = {b.name: b for b in (NaiveBackend(), SdpaBackend(), TiledBackend(), NativeBackend(),
                                                    FlexBackend())}

AUTO_ORDER = ("sdpa", "tiled", "naive")
"""The backends "auto" chooses from, in order of preference where estimates tie or none applies.

On a CPU, "auto" takes the one with the smallest `cost.estimate_seconds` among those that
accept the request: SDPA for plain and causal (Lq = Lk) attention, where PyTorch's fused
kernel is fastest; "tiled" for sliding windows and bottom-right causal with Lq ≠ Lk, where it
skips the blocks SDPA has to compute through a dense mask, and for what SDPA refuses (lse,
softcap); "naive" when weights are asked for (nothing else returns them) or the problem is
tiny. On other devices the CPU-measured rates do not apply and the first accepting backend
in this order is taken."""


def choose(request: Request, name: str) -> Backend:
    """The backend called `name` if it can serve `request`; "auto": the fastest that can (see AUTO_ORDER)."""
    if name == "auto":
        reasons, able = [], []
        for candidate in AUTO_ORDER:
            why = BACKENDS[candidate].refuse(request)
            if why is None:
                able.append(candidate)
            else:
                reasons.append(f"{candidate}: {why}")
        if not able:
            raise ValueError("no backend can serve this request: " + "; ".join(reasons))
        if request.q.device.type != "cpu":
            return BACKENDS[able[0]]
        return BACKENDS[min(able, key=lambda candidate: cost.estimate_seconds(candidate, request))]
    backend = BACKENDS[name]
    why = backend.refuse(request)
    if why is not None:
        raise ValueError(f"backend {name!r} cannot serve this request: {why}")
    return backend
