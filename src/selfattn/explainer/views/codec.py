"""The page's one array codec: a NumPy array ⇄ one packed array, and the only base64 the package writes.

    encode(a, "f32")           # a as it is (codes below); f16, f32, f64 exact in their dtype
    exact(a)                   # float32 where that holds every value exactly, else float64
    fixed(a, digits, "u16")    # a rounded to `digits` decimals, as integers of the code
    bits(mask)                 # a bool array, eight to a byte
    unpack(packed)             # the inverse of all four: float64, int64 or bool (below)
    base64_text(raw)           # any other bytes the package writes as text (the page's script hashes)

One packed array: {"dtype", "shape", "b64", "digits"?}: the little-endian bytes split into byte
planes (byte 0 of every element, then byte 1, …), compressed as one zlib stream (RFC 1950; each plane deflated
apart by ISA-L: `zlib_stream`), base64. dtype is
"f16" | "f32" | "f64" | "u16" | "u32" | "z32" | "bits" (np.packbits, row-major, first element = high bit);
with "digits" d an integer n stands for n / 10^d. "z32" holds signed integers (|n| < 2³¹ − 1) zigzag-coded
as uint32, n ≥ 0 as 2n and n < 0 as −2n − 1, so that the high byte planes of small numbers of either sign
are zeros, which zlib shrinks to almost nothing (int32's −1 is 0xFFFFFFFF: a sign in every plane; zigzag made
the 131-token SmolLM2 page's vectors 16 % smaller); 2³² − 2 / 2³² − 1 stand for −inf / +inf.

The page decodes every packed array with one function, `unpack` of web/static/data.js (DecompressionStream,
then the planes joined; "f16" read as IEEE 754 binary16 into a Float32Array).
"""

from __future__ import annotations

import base64
import zlib

import numpy as np
from isal import isal_zlib

from .page_budget import fixed_fits, int_range

__all__ = [
    "CODES",
    "encode",
    "exact",
    "fixed",
    "bits",
    "unpack",
    "base64_text",
    "zlib_stream",
]

DTYPES = {"f16": "<f2", "f32": "<f4", "f64": "<f8", "u16": "<u2", "u32": "<u4", "z32": "<u4"}
"""How each code's words are stored."""
CODES = (*DTYPES, "bits")
"""Every dtype a packed array may name."""
INTEGERS = {"u16": "<u2", "u32": "<u4", "z32": "<i4"}
"""The integers each fixed-point code holds (`page_budget.int_range`): z32 holds int32's, less its two extremes."""
Z32_NEG_INF, Z32_POS_INF = 2**32 - 2, 2**32 - 1
ZLIB_LEVEL = 1
"""ISA-L's level 1 (of 0–3), the fastest that shrinks each byte plane as much as zlib's level 1: the 30 layers of
SmolLM2's page at 128 tokens (39.8 MB of planes) deflate to 17.7 MB in 0.12 s on one core, against zlib level 1's
17.9 MB in 0.53 s (ISA-L's level 0: 24.2 MB)."""


def encode(a: np.ndarray, code: str, **extra) -> dict:
    """{"dtype", "shape", **extra, "b64"}: a stored as `code`'s words (`DTYPES`)."""
    if code not in DTYPES:
        raise ValueError(f"code must be one of {sorted(DTYPES)} (or bits()), got {code!r}")
    a = np.ascontiguousarray(a, dtype=DTYPES[code])
    planes = a.reshape(-1).view(np.uint8).reshape(-1, a.itemsize).T.tobytes()
    return {"dtype": code, "shape": list(a.shape), **extra, "b64": _b64(planes, a.itemsize)}


def exact(a: np.ndarray) -> dict:
    """float32 where that holds every value exactly (a float32 capture), else float64: nothing rounded."""
    with np.errstate(over="ignore"):
        exact32 = bool(np.array_equal(a.astype(np.float32).astype(np.float64), a))
    return encode(a, "f32" if exact32 else "f64")


def fixed(a: np.ndarray, digits: int, code: str) -> dict:
    """a rounded to `digits` decimals as integers of `code` (float64 where a finite value does not fit it, or
    where it is unsigned and a value is infinite)."""
    if code not in INTEGERS:
        raise ValueError(f"a fixed-point code is one of {sorted(INTEGERS)}, got {code!r}")
    low, high = int_range(INTEGERS[code])
    finite = np.isfinite(a)
    if finite.all():
        least, most = (float(a.min()), float(a.max())) if a.size else (0.0, 0.0)
        if not fixed_fits(least, most, digits, INTEGERS[code]):
            return encode(a, "f64")
        n = np.rint(a * 10**digits)
    else:
        n = np.rint(np.where(finite, a, 0.0) * 10**digits)
        if n.min(initial=0) < low or n.max(initial=0) > high or code != "z32":
            return encode(a, "f64")
    if code == "z32":
        n = np.where(finite, _zigzag(n), np.where(a > 0, Z32_POS_INF, Z32_NEG_INF))
    return encode(n, code, digits=digits)


def bits(a: np.ndarray) -> dict:
    """A bool (or 0/1) array, eight elements to a byte (np.packbits, row-major, the first the high bit)."""
    return {"dtype": "bits", "shape": list(a.shape), "b64": _b64(np.packbits(a.ravel()).tobytes())}


def unpack(packed) -> np.ndarray:
    """One packed array back as NumPy: float64 (floats; integers with "digits" divided back, ±inf restored),
    int64 for integers without digits, bool for "bits"."""
    if not isinstance(packed, dict) or packed.get("dtype") not in CODES:
        got = packed.get("dtype") if isinstance(packed, dict) else type(packed).__name__
        raise ValueError(f"a packed array has a dtype of {list(CODES)}, got {got!r}")
    raw = zlib.decompress(base64.b64decode(packed["b64"], validate=True))
    shape = tuple(packed["shape"])
    if packed["dtype"] == "bits":
        count = int(np.prod(shape))
        return np.unpackbits(np.frombuffer(raw, dtype=np.uint8))[:count].astype(bool).reshape(shape)
    dtype = np.dtype(DTYPES[packed["dtype"]])
    planes = np.frombuffer(raw, dtype=np.uint8).reshape(dtype.itemsize, -1)
    a = np.ascontiguousarray(planes.T).view(dtype).reshape(shape)
    if dtype.kind == "f":
        return a.astype(np.float64)
    n = a.astype(np.int64)
    if packed["dtype"] == "z32":
        n = (n >> 1) ^ -(n & 1)
    if "digits" not in packed:
        return n
    out = n / 10 ** packed["digits"]
    if packed["dtype"] == "z32":
        out[a == Z32_NEG_INF], out[a == Z32_POS_INF] = -np.inf, np.inf
    return out


def base64_text(raw: bytes) -> str:
    """raw as standard base64 text (RFC 4648 §4, padded): what the packed arrays' "b64" and the page's hashes hold."""
    return base64.b64encode(raw).decode("ascii")


def _zigzag(n: np.ndarray) -> np.ndarray:
    """Signed integers (as floats, |n| < 2³¹) → their zigzag codes: 0, −1, 1, −2, … → 0, 1, 2, 3, …"""
    i = n.astype(np.int64)
    return (i << 1) ^ (i >> 63)


def _b64(raw: bytes, itemsize: int = 1) -> str:
    return base64_text(zlib_stream(raw, itemsize))


def zlib_stream(raw: bytes, itemsize: int) -> bytes:
    """One zlib stream (RFC 1950) of raw, `itemsize` byte planes of equal length, each ending its own deflate
    blocks (a sync flush: each plane gets its own Huffman codes, which shrinks a page's arrays 6 % more than one
    deflate of them all), by one ISA-L compressor (`ZLIB_LEVEL`); `zlib.decompress` and the page's
    DecompressionStream read it as any other."""
    n = len(raw) // itemsize if itemsize > 1 else len(raw)
    view = memoryview(raw)
    deflate = isal_zlib.compressobj(ZLIB_LEVEL, isal_zlib.DEFLATED, isal_zlib.MAX_WBITS)
    body = []
    for p in range(len(raw) // n if n else 0):
        body += [deflate.compress(view[p * n : (p + 1) * n]), deflate.flush(isal_zlib.Z_SYNC_FLUSH)]
    return b"".join([*body, deflate.flush(isal_zlib.Z_FINISH)])
