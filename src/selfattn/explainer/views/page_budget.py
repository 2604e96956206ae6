"""How much of a layer the page holds, and what that costs: the rules `packing` packs a layer by and the bound
`export` checks a page's layers against (`layer_page_bytes`: when every layer's bound fits, nothing is measured;
else the layers are fitted by their packed size, `packing.packed_bytes`), in one place for both.

    shown_key_count(L)     keys per query row whose stages the page holds
    fixed_fits(lo, hi, d)  whether values in [lo, hi] go as z32 (int32) at d decimals (else float64)
    layer_page_bytes(l, full)  at most how many bytes one layer's arrays take in the page (its d_model vectors
                               whole, or their norms and top dimensions)
"""

from __future__ import annotations

import numpy as np
import torch

from ...limits import ARRAY_BYTES
from ..trace_types import LayerTrace
from .vector_summary import TOP_DIMENSIONS

__all__ = [
    "ALL_LAYERS_UP_TO",
    "SHOWN_ALL",
    "TOP_KEYS",
    "VECTOR_DIGITS",
    "HEAD_CODE",
    "PACKED_MARGIN",
    "ARRAY_BYTES",
    "int_range",
    "fixed_fits",
    "shown_key_count",
    "layer_page_bytes",
]

ALL_LAYERS_UP_TO = 128
"""Up to this many tokens a page of layers="auto" holds every layer that fits MAX_PAGE_BYTES (every layer of SmolLM2
and of the 0.5B configuration at 128 tokens); beyond, what fits LONG_PAGE_BYTES: a longer text's other layers come
with --layers or from the app."""
SHOWN_ALL = 64
"""Up to this many tokens the stepper's table shows (and the page holds the stages of) every key."""
TOP_KEYS = 20
"""Beyond: the keys with the largest weights, plus the first token and the query itself."""
VECTOR_DIGITS = 4
"""x, attn_out and output are shown with 4 decimals (their values where a layer is held in full, else their norms and
top dimensions)."""
HEAD_CODE = "f16"
"""Each head's q, k and v travel in float16: the page shows their values and the products of them, never a sum it
must match (the scores and Σ w·V come from Python, computed from the exact vectors)."""
PACKED_MARGIN = 1.02
"""zlib's own framing on bytes it cannot shrink: 2 % over the raw bytes."""


def int_range(dtype: str) -> tuple[int, int]:
    """The integers a packed integer array of NumPy `dtype` stores (int32 keeps its two extremes: z32's ±inf)."""
    info = np.iinfo(np.dtype(dtype))
    return (info.min + 1, info.max - 1) if info.min == np.iinfo(np.int32).min else (info.min, info.max)


def fixed_fits(least: float, most: float, digits: int, dtype: str = "<i4") -> bool:
    """Whether finite values in [least, most] go as `dtype` integers at `digits` decimals (else as float64):
    round(x · 10^digits) rises with x, so the two ends decide."""
    low, high = int_range(dtype)
    unit = 10**digits
    finite = bool(np.isfinite(least) and np.isfinite(most))
    return finite and min(round(least * unit), 0) >= low and max(round(most * unit), 0) <= high


def shown_key_count(L: int) -> int:
    """How many keys per query row the page holds the stages of (`packing.shown_keys`) at L tokens."""
    return L if L <= SHOWN_ALL else TOP_KEYS + 2


def layer_page_bytes(layer: LayerTrace, full: bool = True) -> int:
    """At most how many bytes one layer's arrays take in the page (`packing.pack_layer`, before compression, which
    only shrinks them), as base64: the vectors to 4 decimals (z32; float64 where a value does not fit) where `full`,
    else each row's top dimensions (their indices and values, `vector_summary`), and their norms; q per head
    and k/v per key/value head in float16, lse in float32 (float64 for a float64 capture); per head the shown
    weights (u16), per row the keys the stepper shows (`shown_key_count`: 2 bytes each) with their three stages
    (4 bytes each), Σ w·V, Σ w and the sink."""
    L, H = layer.length, layer.n_heads
    f = 8 if layer.q.dtype == torch.float64 else 4
    K = shown_key_count(L)
    vectors = (layer.x, layer.attn_out, layer.output)  # float64 where a value is beyond int32 at VECTOR_DIGITS
    fits = [fixed_fits(float(a.min()), float(a.max()), VECTOR_DIGITS) for a in vectors]
    kept = [a.shape[-1] if full else min(TOP_DIMENSIONS, a.shape[-1]) for a in vectors]
    index = 0 if full else 4  # u16 (u32 beyond 65,536 dimensions): at most 4 bytes each
    width = sum((4 if ok else 8) * n + index * n for ok, n in zip(fits, kept, strict=True))
    D, Dv = layer.q.shape[-1], layer.v.shape[-1]
    half = 2  # bytes of one HEAD_CODE number
    per_head = half * L * D + f * L + 2 * L * L + 14 * L * K + 4 * L * (Dv + 2) + L * L / 8
    kv_heads = layer.k.shape[0] + len(layer.changed)  # a head changed apart may carry its own
    raw = L * (width + 4 * 3) + L * L / 8 + H * per_head + kv_heads * half * L * (D + Dv)
    return int(raw * 4 / 3 * PACKED_MARGIN) + ARRAY_BYTES * (7 + 11 * H + (0 if full else 6))
