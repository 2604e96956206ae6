"""The export dict as the page reads it: arrays packed, and every number the page shows computed here.

    packed = pack(doc)        # doc: the export dict of `Explainer.explain` / `export.to_dict`
    unpack(packed_array)      # one packed array back as NumPy (the inverse of the encoding)

The page computes no score formula: for every head of every layer that carries arrays, `pack` runs
the explainer's own stages (`trace.head_stages`: scale → softcap → mask → softmax → ·V) and ships
what the page shows, at the precision it shows it:

    weights   (L, L)    every weight at 0.01 % (4 decimals: what the heatmap, the token strip and the
                        tooltips show); 0 where hidden
    keys      (L, K)    per query row, the keys the stepper's table shows: every key up to SHOWN_ALL tokens,
                        beyond the TOP_KEYS largest weights, the first token and the row itself (ascending;
                        unused slots hold the dtype's largest value)
    key_stages (3, L, K) scores, scaled, masked of those keys, to 4 decimals (−inf kept)
    key_weights (L, K)  their weights to 8 decimals (what ·V, the meaning bars and the differences multiply)
    weighted  (L, Dv)   Σ_j w_j V_j, to 6 decimals
    sums      (L,)      Σ_j w_j per row, to 8 decimals
    sink      (L,)      only for a layer with attention sinks: each row's weight on the sink,
                        exp(sink_h − lse) = 1 − sums, to 8 decimals (the page draws it as its own column)

and per layer `types`: each head's label, what the model view colours its thumbnails by: the verdict of the
explain sentences (`descriptions[l][h].verdict.type`, `analysis.verdicts`), so the page and the words agree
(`head_type_names` on the float64 weights where the doc has no descriptions). `pack_weights` packs an
attention tensor given directly (the attention page of `views.notebook`) the same way.

q, k, v, lse and the residual vectors travel as before, in float32 when that holds them exactly
(float64 otherwise), for the vectors and the q[d]·k[d] products the page prints. The export's own
N×N `stages` are left out (the page's arrays above replace them).

One packed array: {"dtype", "shape", "b64", "digits"?}: the little-endian bytes split into byte
planes (byte 0 of every element, then byte 1, …), compressed with zlib (RFC 1950), base64. dtype is
"f32" | "f64" | "u16" | "u32" | "i32" | "bits" (np.packbits, row-major, first element = high bit);
with "digits" d an integer n stands for n / 10^d, and in "i32" −2³¹ / 2³¹−1 stand for −inf / +inf.
"""

from __future__ import annotations

import base64
import zlib

import numpy as np
import torch

from ..analysis.head_types import measure
from ..analysis.verdicts import verdict
from ..capture.trace import head_stages
from .controls import scale_words
from .export import head_rule, restore_inf

__all__ = [
    "pack",
    "pack_weights",
    "head_type_names",
    "unpack",
    "shown_keys",
    "SHOWN_ALL",
    "TOP_KEYS",
    "WEIGHT_DIGITS",
    "STAGE_DIGITS",
]

SHOWN_ALL = 64
"""Up to this many tokens the stepper's table shows (and the page holds the stages of) every key."""
TOP_KEYS = 20
"""Beyond: the keys with the largest weights, plus the first token and the query itself."""
WEIGHT_DIGITS = 4
"""Weights are shown as percentages with 2 decimals: 4 decimals of the weight."""
STAGE_DIGITS = 4
"""Scores, scaled and masked scores are shown with 4 decimals."""
EXACT_DIGITS = 8
"""The weights the page multiplies or adds (·V, the meaning bars, the differences, the head search):
to 1e-8, finer than float32 holds a weight near 1."""
WEIGHTED_DIGITS = 6
"""Σ w·V is shown with 4 decimals; 6 keep it within 1e-6 of Python's, as the ·V bars that add up to it."""

LAYER_ARRAYS = ("x", "attn_out", "output")
HEAD_ARRAYS = ("q", "k", "v", "lse")
REQUIRED = ("tokens", "model", "experiment", "selected", "summaries", "prediction", "layers")
ZLIB_LEVEL = 1
"""zlib level 1: a page of the 0.5B configuration at 512 tokens packs in 0.49 s against level 6's 0.77 s, 2 % larger
(22.4 vs 21.9 MB): its arrays are float bytes, which more effort hardly shrinks."""
I32_NEG_INF, I32_POS_INF = -(2**31), 2**31 - 1
DTYPES = {"f32": "<f4", "f64": "<f8", "u16": "<u2", "u32": "<u4", "i32": "<i4"}


def pack(doc: dict) -> dict:
    """A copy of the export dict with its arrays packed and the page's arrays added (see the module doc)."""
    if not isinstance(doc, dict):
        raise TypeError(f"doc must be the export dict of Explainer.explain, got {type(doc).__name__}")
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise ValueError(f"doc lacks {missing}: pass the dict of Explainer.explain / export.to_dict")
    ids = [int(i) for i in doc["token_ids"]] if "token_ids" in doc else _ids_of(doc["tokens"])
    described = doc.get("descriptions")
    layers = [
        _pack_layer(layer, l, ids, None if described is None else described[l]) for l, layer in enumerate(doc["layers"])
    ]
    iv = doc["experiment"]["applied"]
    return {
        **doc,
        "layers": layers,
        "scale_words": scale_words(iv, int(doc["model"]["head_dim"])),
        "shown_keys": {"all_up_to": SHOWN_ALL, "top": TOP_KEYS},
    }


def _pack_layer(layer: dict, l: int, ids: list[int], described: list[dict] | None) -> dict:
    if layer.get("omitted"):  # asked without this layer's arrays
        return dict(layer)
    out = {k: v for k, v in layer.items() if k not in LAYER_ARRAYS + ("visible", "heads")}
    for name in LAYER_ARRAYS:
        out[name] = _encode_floats(_floats(layer[name], f"layers[{l}].{name}"))
    visible = _visible(layer["visible"], f"layers[{l}].visible")
    out["visible"] = _bits(visible)
    out["heads"] = []
    weights = []
    for h, head in enumerate(layer["heads"]):
        where = f"layers[{l}].heads[{h}]"
        packed = {k: v for k, v in head.items() if k not in HEAD_ARRAYS + ("stages", "visible", "sink")}
        arrays = {name: _floats(head[name], f"{where}.{name}") for name in HEAD_ARRAYS}
        own = visible
        if "visible" in head:  # a head an intervention changed apart from its layer
            own = _visible(head["visible"], f"{where}.visible")
            packed["visible"] = _bits(own)
        rule = head_rule(layer, h)
        packed |= {name: _encode_floats(a) for name, a in arrays.items()}
        shown, weights_h = _page_arrays(arrays, own, rule)
        packed |= shown
        weights.append(weights_h)
        out["heads"].append(packed)
    if described is not None and all("verdict" in d for d in described):
        out["types"] = [d["verdict"]["type"] for d in described]  # the explain sentences' own answer
    else:
        out["types"] = head_type_names(torch.stack(weights).numpy(), ids, causal=bool(layer.get("causal", False)))
    return out


def head_type_names(weights: np.ndarray, ids: list[int], *, causal: bool) -> list[str | None]:
    """(H, L, L) weights of one layer → each head's label (`verdicts.verdict` of `head_types.measure`), or None:
    for weights given without a text's descriptions (the attention page)."""
    return [verdict(types)["type"] for types in measure(weights, ids, causal=causal)]


def _ids_of(tokens: list[str]) -> list[int]:
    """Token strings as ids (equal strings, equal ids): what head types compare when no ids are given."""
    first: dict[str, int] = {}
    return [first.setdefault(tok, len(first)) for tok in tokens]


def pack_weights(weights: np.ndarray) -> dict:
    """Weights (any shape, values in [0, 1]) packed as the page reads them: at 0.01 % (`WEIGHT_DIGITS`)."""
    return _fixed(np.asarray(weights, dtype=np.float64), WEIGHT_DIGITS, "u16")


def _page_arrays(arrays: dict[str, np.ndarray], visible: np.ndarray, rule: dict) -> tuple[dict, torch.Tensor]:
    """What the page shows of one head: its stages (`trace.head_stages`, float64), at the shown precision;
    and its float64 weights (L, L)."""
    q, k, v, lse = (torch.from_numpy(arrays[name]) for name in HEAD_ARRAYS)
    st = head_stages(q, k, lse, visible=torch.from_numpy(visible), v=v, **rule)  # rows 0 … L − 1
    weights = st["weights"]  # (L, L)
    keys = shown_keys(weights)  # (L, K)
    index = keys.clamp(max=weights.shape[1] - 1)
    stages = torch.stack([st[name].gather(1, index) for name in ("scores", "scaled", "masked")])  # (3, L, K)
    key_dtype = "u16" if weights.shape[1] < 2**16 - 1 else "u32"
    sentinel = np.iinfo(DTYPES[key_dtype]).max
    keys_np = np.where(keys.numpy() >= weights.shape[1], sentinel, keys.numpy())
    shown = {
        "weights": _fixed(weights.numpy(), WEIGHT_DIGITS, "u16"),
        "keys": _encode(keys_np, key_dtype),
        "key_stages": _fixed(stages.numpy(), STAGE_DIGITS, "i32"),
        "key_weights": _fixed(weights.gather(1, index).numpy(), EXACT_DIGITS, "u32"),
        "weighted": _fixed(st["weighted"].numpy(), WEIGHTED_DIGITS, "i32"),
        "sums": _fixed(weights.sum(-1).numpy(), EXACT_DIGITS, "u32"),
    }
    if "sink" in st:
        shown["sink"] = _fixed(st["sink"].numpy(), EXACT_DIGITS, "u32")
    return shown, weights


def shown_keys(weights: torch.Tensor) -> torch.Tensor:
    """(L, K) int64: per row the keys the stepper shows, ascending; unused slots hold L.

    L <= SHOWN_ALL: every key. Beyond: the TOP_KEYS largest weights (ties: the lower position first),
    key 0 and the row's own position."""
    L = weights.shape[1]
    rows = torch.arange(weights.shape[0])
    if L <= SHOWN_ALL:
        return torch.arange(L).expand(weights.shape[0], L).clone()
    top = torch.sort(weights, dim=1, descending=True, stable=True).indices[:, :TOP_KEYS]
    keys = torch.cat([top, torch.zeros_like(rows)[:, None], rows[:, None]], dim=1).sort(dim=1).values
    repeated = torch.zeros_like(keys, dtype=torch.bool)
    repeated[:, 1:] = keys[:, 1:] == keys[:, :-1]
    return keys.masked_fill(repeated, L).sort(dim=1).values


# --- the encoding ----------------------------------------------------------------------------


def unpack(packed) -> np.ndarray:
    """One packed array back as NumPy: float64 (integers with "digits" divided back, ±inf restored),
    int64 for integers without digits, bool for "bits"."""
    raw = zlib.decompress(base64.b64decode(packed["b64"]))
    shape = tuple(packed["shape"])
    if packed["dtype"] == "bits":
        n = int(np.prod(shape))
        return np.unpackbits(np.frombuffer(raw, dtype=np.uint8))[:n].astype(bool).reshape(shape)
    dtype = np.dtype(DTYPES[packed["dtype"]])
    planes = np.frombuffer(raw, dtype=np.uint8).reshape(dtype.itemsize, -1)
    a = np.ascontiguousarray(planes.T).view(dtype).reshape(shape)
    if "digits" not in packed:
        return a.astype(np.int64) if dtype.kind in "iu" else a.astype(np.float64)
    out = a.astype(np.float64) / 10 ** packed["digits"]
    if packed["dtype"] == "i32":
        out[a == I32_NEG_INF], out[a == I32_POS_INF] = -np.inf, np.inf
    return out


def _encode(a: np.ndarray, code: str, **extra) -> dict:
    a = np.ascontiguousarray(a, dtype=DTYPES[code])
    planes = a.reshape(-1).view(np.uint8).reshape(-1, a.itemsize).T.tobytes()
    return {"dtype": code, "shape": list(a.shape), **extra, "b64": _b64(planes)}


def _fixed(a: np.ndarray, digits: int, code: str) -> dict:
    """a rounded to `digits` decimals as integers (float64 where a finite value does not fit `code`)."""
    info = np.iinfo(DTYPES[code])
    finite = np.isfinite(a)
    n = np.round(np.where(finite, a, 0.0) * 10**digits)
    low, high = (info.min + 1, info.max - 1) if code == "i32" else (info.min, info.max)
    if n.min(initial=0) < low or n.max(initial=0) > high or (code != "i32" and not finite.all()):
        return _encode(a, "f64")
    if code == "i32":
        n = np.where(finite, n, np.where(a > 0, I32_POS_INF, I32_NEG_INF))
    return _encode(n, code, digits=digits)


def _floats(values, where: str) -> np.ndarray:
    a = np.asarray(values)  # nested lists of numbers: read in C, no walk over every element in Python
    if a.dtype.kind not in "fiu":  # strings ("inf" / "-inf", `export._list`) or anything else: the strict reader
        a = np.array(restore_inf(values), dtype=np.float64)
    a = a.astype(np.float64, copy=False)
    if a.ndim == 0:
        raise ValueError(f"{where} is not a numeric array")
    if np.isnan(a).any():
        raise ValueError(f"{where} holds NaN")
    return a


def _encode_floats(a: np.ndarray) -> dict:
    """float32 where that holds every value exactly (a float32 capture), else float64: nothing rounded."""
    with np.errstate(over="ignore"):
        exact32 = bool(np.array_equal(a.astype(np.float32).astype(np.float64), a))
    return _encode(a, "f32" if exact32 else "f64")


def _visible(values, where: str) -> np.ndarray:
    a = np.asarray(values)
    if a.ndim != 2 or not np.isin(a, (0, 1)).all():
        raise ValueError(f"{where} must be an L×L matrix of 0/1")
    return a.astype(bool)


def _bits(a: np.ndarray) -> dict:
    return {"dtype": "bits", "shape": list(a.shape), "b64": _b64(np.packbits(a.ravel()).tobytes())}


def _b64(raw: bytes) -> str:
    return base64.b64encode(zlib.compress(raw, ZLIB_LEVEL)).decode("ascii")
