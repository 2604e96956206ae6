"""The export dict as the page reads it: arrays packed, and every number the page shows computed here.

    packed = pack(doc)        # doc: the export dict of `Explainer.explain` / `export.to_dict`
    unpack(packed_array)      # one packed array back as NumPy (the inverse of the encoding)

The page computes no score formula: for every head of every layer that carries arrays, `pack` runs
the explainer's own stages (`trace.head_stages`: scale → softcap → mask → softmax → ·V) and ships
what the page shows, at the precision it shows it:

    weights   (L, L)    every weight at 0.01 % (4 decimals: what the heatmap, the token strip, the key table,
                        the tooltips show, and what the ·V bars, the meaning bars and the differences use); 0 where
                        hidden
    keys      (L, K)    per query row, the keys the stepper's table shows: every key up to SHOWN_ALL tokens,
                        beyond the TOP_KEYS largest weights, the first token and the row itself (ascending;
                        unused slots hold the dtype's largest value)
    key_stages (3, K, L) scores, scaled, masked of those keys, to 4 decimals (−inf kept): per stage, per slot of
                        `keys`, every row (slot-major: one key's scores down the rows are alike, which zlib shrinks
                        by 8 % more than row-major)
    weighted  (L, Dv)   Σ_j w_j V_j, to the 4 decimals it is shown with
    sums      (L,)      Σ_j w_j per row, at 0.01 % (shown as a percentage with 2 decimals)
    sink      (L,)      only for a layer with attention sinks: each row's weight on the sink,
                        exp(sink_h − lse) = 1 − sums, at 0.01 % (the page draws it as its own column)

and per layer `types` (a layer left out too, where the doc has descriptions): each head's label, what the model
view colours its thumbnails by: the verdict of the explain sentences (`descriptions[l][h].verdict.type`,
`analysis.verdicts`), so the page and the words agree (`head_type_names` on the float64 weights where the doc has
no descriptions). `pack_weights` packs an attention tensor given directly (the attention page of
`views.notebook`) the same way.

q, k and v travel in float16 (`HEAD_CODE`), what the page shows of them: their values, q[d]·k[d] products and the
w_j·V_j[d] parts of the ·V bars, beside the scores and Σ w·V above, which Python computed from the exact vectors;
lse in float32 when that holds it exactly (float64 otherwise). A head that reads the same key/value head as an
earlier head of its layer (GQA) holds {"of_head": h} for k and v: that head's arrays, sent once.
The layer's d_model vectors x, attn_out and output are only shown: each row's length from the exact vector
(`norms`, to 4 decimals: `VECTOR_DIGITS`) and, in a layer held in full (doc["full_layers"]: the shown one, or those
asked with `layers=`; every layer without the field), every value to 4 decimals; in the others each row's
TOP_DIMENSIONS largest |values| (`top`: {name: {dims (L, T) "u16", values (L, T) to 4 decimals}}, as the terminal
shows them). The export's own N×N `stages` are left out (the page's arrays above replace them).

Every array is packed by `codec` (views/codec.py: its one encoding, and its `unpack`).
"""

from __future__ import annotations

import collections
import copy
import hashlib
import json
import threading
from dataclasses import dataclass

import numpy as np
import torch

from ...limits import PACKED_BYTES
from ..analysis.head_types import measure
from ..analysis.verdicts import verdict
from ..stages import head_stages
from . import codec
from .codec import unpack
from .controls import scale_words
from .export import WEIGHT_DIGITS, head_rule, restore_inf
from .page_budget import HEAD_CODE, SHOWN_ALL, TOP_KEYS, VECTOR_DIGITS, shown_key_count
from .vector_summary import TOP_DIMENSIONS, top_dimensions

__all__ = [
    "pack",
    "PackedLayers",
    "PACKED_BYTES",
    "layer_bytes",
    "pack_weights",
    "head_type_names",
    "top_dimensions",
    "unpack",
    "shown_keys",
    "SHOWN_ALL",
    "TOP_KEYS",
    "WEIGHT_DIGITS",
    "STAGE_DIGITS",
]

STAGE_DIGITS = 4
"""Scores, scaled and masked scores, and Σ w·V, are shown with 4 decimals."""

LAYER_ARRAYS = ("x", "attn_out", "output")
HEAD_ARRAYS = ("q", "k", "v", "lse")
REQUIRED = ("tokens", "model", "experiment", "selected", "summaries", "prediction", "layers")


def pack(doc: dict, store: PackedLayers | None = None) -> dict:
    """A copy of the export dict with its arrays packed and the page's arrays added (see the module doc). store: the
    layers packed before (a `PackedLayers` of the caller's: its Session's), read back instead of packed again and
    given the layers packed here; None packs every layer afresh."""
    if not isinstance(doc, dict):
        raise TypeError(f"doc must be the export dict of Explainer.explain, got {type(doc).__name__}")
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise ValueError(f"doc lacks {missing}: pass the dict of Explainer.explain / export.to_dict")
    ids = [int(i) for i in doc["token_ids"]] if "token_ids" in doc else _ids_of(doc["tokens"])
    described = doc.get("descriptions")
    full = set(doc.get("full_layers", range(len(doc["layers"]))))
    batch: list = []  # every array's bytes, compressed together at the end (`codec.compress`)
    made: list[tuple[bytes, dict]] = []  # the layers packed here, kept once compressed (`store`)
    layers = [
        _pack_layer(layer, l, ids, None if described is None else described[l], batch, made, store, l in full)
        for l, layer in enumerate(doc["layers"])
    ]
    codec.compress(batch)
    if store is not None:
        for digest, out in made:
            store.keep(digest, out)
    iv = doc["experiment"]["applied"]
    return {
        **doc,
        "layers": layers,
        "scale_words": scale_words(iv, int(doc["model"]["head_dim"])),
        "shown_keys": {"all_up_to": SHOWN_ALL, "top": TOP_KEYS},
        "vector_top": TOP_DIMENSIONS,
    }


def layer_bytes(layer: dict, l: int = 0, store: PackedLayers | None = None, *, full: bool = True) -> int:
    """How many bytes one layer of the export dict (`layers[l]`) takes in the page once packed: its JSON as the
    page writes it (`report`), but for `types` (a short label per head); full: with its d_model vectors whole (else
    their norms and top dimensions). What `export` fits a page's layers to; the layer packed is kept in `store`
    (the caller's), so that the page of the same layer does not pack it again."""
    read = _read_layer(layer, l, full)
    out = None if store is None else store.get(read.digest)
    if out is None:
        batch: list = []
        out, _ = _layer_arrays(read, batch)
        codec.compress(batch)
        if store is not None:
            store.keep(read.digest, out)
    return len(json.dumps(out, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode())


def _pack_layer(
    layer: dict,
    l: int,
    ids: list[int],
    described: list[dict] | None,
    batch: list,
    made: list[tuple[bytes, dict]],
    store: PackedLayers | None,
    full: bool,
) -> dict:
    verdicts = described is not None and all("verdict" in d for d in described)
    if layer.get("omitted"):  # asked without this layer's arrays: its heads' labels still colour the model view
        return dict(layer) | ({"types": [d["verdict"]["type"] for d in described]} if verdicts and described else {})
    read = _read_layer(layer, l, full)
    if verdicts and described is not None:  # the explain sentences' own answer: no weights needed
        out = None if store is None else store.get(read.digest)
        if out is None:
            out, _ = _layer_arrays(read, batch)
            made.append((read.digest, out))
        return out | {"types": [d["verdict"]["type"] for d in described]}
    out, weights = _layer_arrays(read, batch)
    made.append((read.digest, out))
    types = head_type_names(torch.stack(weights).numpy(), ids, causal=bool(layer.get("causal", False)))
    return out | {"types": types}


class PackedLayers:
    """Layers packed, by the digest of what packing read of them (`_Read.digest`), for one owner (a
    `pipeline.Session`: the CLI's command, the app, an Explanation family): `export` measures a layer by packing it
    (`layer_bytes`) and the page then packs the same layer (`pack`): it reads the first's result. Keyed by content,
    so a layer changed in between (in place or replaced) is packed afresh, and what one request packed is what
    another's equal layer packs; each caller gets its own copy. Thread-safe."""

    def __init__(self, limit: int = PACKED_BYTES):
        self.limit, self.used = limit, 0
        self.lock = threading.Lock()
        self.layers: collections.OrderedDict[bytes, tuple[dict, int]] = collections.OrderedDict()

    def get(self, digest: bytes) -> dict | None:
        with self.lock:
            found = self.layers.get(digest)
            if found is None:
                return None
            self.layers.move_to_end(digest)
        return copy.deepcopy(found[0])  # the strings are shared: a copy of some hundred dicts

    def keep(self, digest: bytes, out: dict) -> None:
        size = sum(len(a["b64"]) for a in _packed_arrays(out))
        if size > self.limit:
            return
        kept = copy.deepcopy(out)
        with self.lock:
            if digest in self.layers:
                return
            self.layers[digest] = (kept, size)
            self.used += size
            while self.used > self.limit:
                _, (_, dropped) = self.layers.popitem(last=False)
                self.used -= dropped


def _packed_arrays(x):
    """Every packed array ({"b64", …}) in a packed layer."""
    if isinstance(x, dict):
        if "b64" in x:
            yield x
        else:
            for v in x.values():
                yield from _packed_arrays(v)
    elif isinstance(x, list):
        for v in x:
            yield from _packed_arrays(v)


@dataclass
class _Read:
    """One layer of the export dict read: its fields but the arrays (`fields`, as they are), the arrays as NumPy
    (`vectors`: x, attn_out, output; the layer's `visible`; per head its other fields, its q, k, v, lse and its
    own visibility or None), whether its vectors go whole (`full`), and `digest`, of everything packing reads of it
    (not the export's N×N `stages`)."""

    fields: dict
    full: bool
    vectors: dict[str, np.ndarray]
    visible: np.ndarray
    heads: list[tuple[dict, dict[str, np.ndarray], np.ndarray | None]]
    digest: bytes


def _read_layer(layer: dict, l: int, full: bool = True) -> _Read:
    """`layer` (`layers[l]` of the export dict) read and checked, its digest taken (`PackedLayers` is keyed by it): of
    every field and array packing reads, of `full`, and of the `head_stages` it computes the stages with."""
    digest = hashlib.blake2b(digest_size=32)
    digest.update(f"{id(head_stages)}{full}".encode())  # and the stage function they go through (a test replaces it)
    seen: dict[int, tuple[str, np.ndarray]] = {}  # an array met before in this layer (GQA's shared k and v): once

    def take(name: str, values, where: str, read=None) -> np.ndarray:
        """`values` read (`_floats`, or `read`) and hashed as given (a float32 array as its 4-byte values)."""
        if id(values) in seen:  # the same object, alive in `layer` throughout: the same bytes, read once
            first, a = seen[id(values)]
            digest.update(f"{name}={first}".encode())
            return a
        a = (read or _floats)(values, where)
        given = values if isinstance(values, np.ndarray) and values.dtype == np.float32 else a
        seen[id(values)] = (name, a)
        digest.update(f"{name}{given.dtype}{given.shape}".encode())
        digest.update(np.ascontiguousarray(given).tobytes())
        return a

    def plain(name: str, value) -> None:  # the fields packing copies or reads as they are (scale, kv_head…)
        digest.update(name.encode() + json.dumps(value, sort_keys=True, allow_nan=True).encode())

    fields = {k: v for k, v in layer.items() if k not in LAYER_ARRAYS + ("visible", "heads")}
    plain("layer", fields)
    vectors = {name: take(name, layer[name], f"layers[{l}].{name}") for name in LAYER_ARRAYS}
    visible = take("visible", layer["visible"], f"layers[{l}].visible", _visible)
    heads = []
    for h, head in enumerate(layer["heads"]):
        where = f"layers[{l}].heads[{h}]"
        own = {k: v for k, v in head.items() if k not in HEAD_ARRAYS + ("stages", "visible", "sink")}
        plain(f"heads[{h}]", own)
        arrays = {name: take(f"{h}.{name}", head[name], f"{where}.{name}") for name in HEAD_ARRAYS}
        apart = take(f"{h}.visible", head["visible"], f"{where}.visible", _visible) if "visible" in head else None
        heads.append((own, arrays, apart))
    return _Read(fields, full, vectors, visible, heads, digest.digest())


def _layer_arrays(read: _Read, batch: list) -> tuple[dict, list[torch.Tensor]]:
    """One layer packed, but for its `types`; and each head's float64 weights (L, L)."""
    out = dict(read.fields)
    out["norms"] = {}
    if not read.full:
        out["top"] = {}
    for name, vectors in read.vectors.items():
        if read.full:
            out[name] = codec.fixed(vectors, VECTOR_DIGITS, "z32", batch)
        else:
            dims = top_dimensions(vectors)
            values = np.take_along_axis(vectors, dims, -1)
            out["top"][name] = {
                "dims": codec.encode(dims, "u16" if vectors.shape[-1] <= 2**16 else "u32", batch),
                "values": codec.fixed(values, VECTOR_DIGITS, "z32", batch),
            }
        out["norms"][name] = codec.fixed(np.linalg.norm(vectors, axis=-1), VECTOR_DIGITS, "z32", batch)
    out["visible"] = codec.bits(read.visible, batch)
    layer = read.fields | {"heads": [fields for fields, _, _ in read.heads]}  # what head_rule reads
    heads = []
    for h, (fields, arrays, apart) in enumerate(read.heads):
        packed = dict(fields)
        if apart is not None:  # a head an intervention changed apart from its layer
            packed["visible"] = codec.bits(apart, batch)
        own = read.visible if apart is None else apart
        heads.append(_Head(packed, arrays, own, head_rule(layer, h), apart=apart is not None))
        shared = _shared_kv(heads)
        for name, a in arrays.items():
            once = shared is not None and name in ("k", "v")
            if once:
                packed[name] = {"of_head": shared}
            else:
                packed[name] = codec.exact(a, batch) if name == "lse" else codec.encode(a, HEAD_CODE, batch)
    weights: list[torch.Tensor] = [torch.empty(0)] * len(heads)
    for group in _groups(heads):
        for h, (shown, weights_h) in zip(group, _page_arrays([heads[h] for h in group], batch), strict=True):
            heads[h].packed |= shown
            weights[h] = weights_h
    out["heads"] = [head.packed for head in heads]
    return out, weights


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
    return codec.fixed(np.asarray(weights, dtype=np.float64), WEIGHT_DIGITS, "u16")


@dataclass
class _Head:
    """One head of a layer being packed: its packed fields so far, its float64 arrays (q, k, v, lse), the
    visibility its stages use (the layer's, or its own: `apart`) and its `head_rule`."""

    packed: dict
    arrays: dict[str, np.ndarray]
    visible: np.ndarray
    rule: dict
    apart: bool


STACK_ROWS = 4096
"""At most this many query rows (heads × L) go through one `head_stages` call. The heads of a key/value group
read one K and V, so their rows stack into one product and one pass of each stage: a few large tensor operations
instead of many small ones (on busy cores each small parallel operation waits for a core). 4096 rows × 512 keys:
16 MB per stage."""


def _groups(heads: list[_Head]) -> list[list[int]]:
    """The heads (indices, ascending) whose stages are computed together: those with the same K, V, scale and
    softcap, the layer's visibility and no per-head score feature (a feature's value differs by head), at most
    STACK_ROWS rows together; every other head alone."""
    out: list[list[int]] = []
    open_groups: dict[tuple, list[int]] = {}
    for h, head in enumerate(heads):
        rows = head.arrays["q"].shape[0]
        featured = any(v is not None for name, v in head.rule.items() if name not in ("scale", "softcap"))
        if head.apart or featured or "kv_head" not in head.packed:
            out.append([h])
            continue
        key = (head.packed["kv_head"], head.rule["scale"], head.rule["softcap"])
        group = open_groups.get(key)
        if group is not None and (len(group) + 1) * rows <= STACK_ROWS and _same_kv(heads[group[0]], head):
            group.append(h)
        else:
            open_groups[key] = [h]
            out.append(open_groups[key])
    return out


def _shared_kv(heads: list[_Head]) -> int | None:
    """The first of the earlier heads whose K and V the last of `heads` reads (its kv head's, unchanged), or None."""
    last = heads[-1]
    kv = last.packed.get("kv_head")
    for h, head in enumerate(heads[:-1]):
        if kv is not None and head.packed.get("kv_head") == kv and _same_kv(head, last):
            return h
    return None


def _same_kv(a: _Head, b: _Head) -> bool:
    """Whether two heads read the same K and V (and have as many query rows): their rows may stack."""
    same = a.arrays["q"].shape == b.arrays["q"].shape
    return same and all(np.array_equal(a.arrays[name], b.arrays[name]) for name in ("k", "v"))


def _page_arrays(group: list[_Head], batch: list) -> list[tuple[dict, torch.Tensor]]:
    """What the page shows of each head of a group (`_groups`: one K, V, rule and visibility): its stages
    (`trace.head_stages`, float64, the group's query rows stacked) at the shown precision; and its float64
    weights (L, L)."""
    first = group[0]
    R = first.arrays["q"].shape[0]
    rows = np.tile(np.arange(R), len(group))  # each stacked row's query position
    q = torch.from_numpy(np.concatenate([head.arrays["q"] for head in group]))
    k, v = (torch.from_numpy(first.arrays[name]) for name in ("k", "v"))
    visible = torch.from_numpy(np.tile(first.visible, (len(group), 1)))
    st = head_stages(
        q, k, visible=visible, v=v, rows=torch.from_numpy(rows) if len(group) > 1 else None, **first.rule
    )  # (G·R, L): the group's rows, head after head
    weights = st["weights"]
    L = weights.shape[1]
    keys = _shown_keys(weights.numpy(), rows)  # (G·R, K)
    index = np.minimum(keys, L - 1)
    stages = np.stack([np.take_along_axis(st[name].numpy(), index, 1) for name in ("scores", "scaled", "masked")])
    sums = weights.sum(-1).numpy()
    key_dtype = "u16" if L < 2**16 - 1 else "u32"
    keys = np.where(keys >= L, np.iinfo(codec.DTYPES[key_dtype]).max, keys)
    out = []
    for g in range(len(group)):
        part = slice(g * R, (g + 1) * R)
        shown = {
            "weights": codec.fixed(weights[part].numpy(), WEIGHT_DIGITS, "u16", batch),
            "keys": codec.encode(keys[part], key_dtype, batch),
            "key_stages": codec.fixed(stages[:, part].transpose(0, 2, 1), STAGE_DIGITS, "z32", batch),  # (3, K, L)
            "weighted": codec.fixed(st["weighted"][part].numpy(), STAGE_DIGITS, "z32", batch),
            "sums": codec.fixed(sums[part], WEIGHT_DIGITS, "u32", batch),  # u32: the page reads it as numbers
        }
        if "sink" in st:
            shown["sink"] = codec.fixed(st["sink"][part].numpy(), WEIGHT_DIGITS, "u32", batch)
        out.append((shown, weights[part]))
    return out


def shown_keys(weights: torch.Tensor) -> torch.Tensor:
    """(L, K) int64: per row the keys the stepper shows, ascending; unused slots hold L.

    L <= SHOWN_ALL: every key. Beyond: the TOP_KEYS largest weights (ties: the lower position first; NaN counts
    as the largest, as in a descending sort), key 0 and the row's own position."""
    w = weights.detach().cpu().double().numpy()
    return torch.from_numpy(_shown_keys(w, np.arange(w.shape[0])))


def _shown_keys(w: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """`shown_keys` of weights (R, L) whose row r is query position rows[r]; without sorting every row: the
    TOP_KEYS largest are those above the row's TOP_KEYS-th largest weight and, of those equal to it, the first."""
    R, L = w.shape
    if L <= SHOWN_ALL:
        return np.broadcast_to(np.arange(L), (R, L)).copy()
    take = np.zeros((R, L), dtype=bool)
    nan_rows = np.isnan(w).any(axis=1)
    if nan_rows.any():  # NaN ranks first in a descending sort, and compares with nothing: sort those rows
        some = torch.from_numpy(w[nan_rows])
        top = torch.sort(some, dim=1, descending=True, stable=True).indices[:, :TOP_KEYS].numpy()
        take[nan_rows] = _marked(top, L)
    plain = ~nan_rows
    if plain.any():
        v = w[plain]
        kth = np.partition(v, L - TOP_KEYS, axis=1)[:, L - TOP_KEYS, None]  # (R', 1): the TOP_KEYS-th largest
        above, tied = v > kth, v == kth
        wanted = TOP_KEYS - above.sum(axis=1)  # how many of the tied ones, the lowest positions first
        many = np.flatnonzero(tied.sum(axis=1) > wanted)  # rows where not every tied one is taken
        tied[many] &= np.cumsum(tied[many], axis=1) <= wanted[many, None]
        take[plain] = above | tied
    take[:, 0] = True
    take[np.arange(R), rows] = True
    r, c = np.nonzero(take)  # row-major: each row's keys ascending
    counts = take.sum(axis=1)
    out = np.full((R, shown_key_count(L)), L, dtype=np.int64)
    out[r, np.arange(len(r)) - (np.cumsum(counts) - counts)[r]] = c
    return out


def _marked(columns: np.ndarray, L: int) -> np.ndarray:
    """(R, L) bool, True at each row's `columns`."""
    m = np.zeros((columns.shape[0], L), dtype=bool)
    np.put_along_axis(m, columns, True, 1)
    return m


# --- reading the export dict ---------------------------------------------------------------


def _floats(values, where: str) -> np.ndarray:
    a = np.asarray(values)  # nested lists of numbers: read in C, no walk over every element in Python
    if a.dtype.kind not in "fiu":  # strings ("inf" / "-inf", `export.json_list`) or anything else: the strict reader
        a = np.array(restore_inf(values), dtype=np.float64)
    a = a.astype(np.float64, copy=False)
    if a.ndim == 0:
        raise ValueError(f"{where} is not a numeric array")
    if np.isnan(a).any():
        raise ValueError(f"{where} holds NaN")
    return a


def _visible(values, where: str) -> np.ndarray:
    a = np.asarray(values)
    if a.ndim != 2 or not ((a == 0) | (a == 1)).all():
        raise ValueError(f"{where} must be an L×L matrix of 0/1")
    return a.astype(bool)
