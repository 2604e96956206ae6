"""A layer of a trace as the page holds it: arrays packed, and every number the page shows computed here.

    out, weights = pack_layer(layer, full=True)   # one `LayerTrace` packed (but its `types`), its heads' weights
    types_of(described, weights, ids, causal=)    # each head's label, what the model view colours it by
    packed_bytes(out)                            # what the layer takes in the page (what `export` fits layers to)
    unpack(packed_array)                         # one packed array back as NumPy (the inverse of the encoding)

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

and per layer `types` (`types_of`; a layer left out too, where there are descriptions): each head's label, what the
model view colours its thumbnails by: the verdict of the explain sentences (`descriptions[l][h].verdict.type`,
`analysis.verdicts`), so the page and the words agree (`head_type_names` on the float64 weights where there are
no descriptions). `pack_weights` packs an attention tensor given directly (the attention page of
`views.notebook`) the same way.

q, k and v travel in float16 (`HEAD_CODE`), what the page shows of them: their values, q[d]·k[d] products and the
w_j·V_j[d] parts of the ·V bars, beside the scores and Σ w·V above, which Python computed from the exact vectors;
lse in float32 when that holds it exactly (float64 otherwise). A head that reads the same key/value head as an
earlier head of its layer (GQA) holds {"of_head": h} for k and v: that head's arrays, sent once.
The layer's d_model vectors x, attn_out and output are only shown: each row's length from the exact vector
(`norms`, to 4 decimals: `VECTOR_DIGITS`) and, in a layer held in full (`full`: doc["full_layers"], the shown one,
or those asked with `layers=`), every value to 4 decimals; in the others each row's TOP_DIMENSIONS largest |values|
(`top`: {name: {dims (L, T) "u16", values (L, T) to 4 decimals}}, as the terminal shows them).

Every array is packed by `codec` (views/codec.py: its one encoding, and its `unpack`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import torch

from ...scores import PER_HEAD
from ..analysis.head_types import measure
from ..analysis.verdicts import verdict
from ..stages import head_stages
from ..trace_types import LayerTrace
from . import codec
from .codec import unpack
from .controls import scale_words
from .page_budget import HEAD_CODE, SHOWN_ALL, TOP_KEYS, VECTOR_DIGITS, shown_key_count
from .vector_summary import TOP_DIMENSIONS, top_dimensions

__all__ = [
    "pack_layer",
    "layer_rule",
    "head_rule",
    "types_of",
    "packed_bytes",
    "page_words",
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

WEIGHT_DIGITS = 4
"""Weights are shown as percentages with 2 decimals: they travel to 4 decimals of the weight (u16, `codec.fixed`)."""
STAGE_DIGITS = 4
"""Scores, scaled and masked scores, and Σ w·V, are shown with 4 decimals."""

LAYER_ARRAYS = ("x", "attn_out", "output")


def pack_layer(layer: LayerTrace, *, full: bool) -> tuple[dict, list[torch.Tensor]]:
    """`layer` as the page holds it (see the module doc) but for its `types` (`types_of`), every array packed and
    compressed; and each head's float64 weights (L, L). full: its d_model vectors whole (else their norms and top
    dimensions)."""
    return _layer_arrays(_read(layer, full))


def layer_rule(layer: LayerTrace) -> dict:
    """What every view says of a layer's score rule: scale, causal, softcap, window, and each per-head score feature
    it has (`scores.PER_HEAD`, one float per head; absent for a layer without it)."""
    window = list(layer.window) if isinstance(layer.window, tuple) else layer.window
    out: dict = {"scale": layer.scale, "causal": layer.causal, "softcap": layer.softcap, "window": window}
    for name, values in layer.features.items():
        out[name] = [float(x) for x in values.double().tolist()]
    return out


def head_rule(lay: dict, head: int) -> dict:
    """The keyword arguments of `stages.head_stages` for one head of a layer's rule `lay` (`layer_rule`, with its
    heads' own fields under "heads"): scale and softcap (the head's own when an intervention changed it apart) and
    its value of each per-head score feature (None without)."""
    h = lay["heads"][head]
    return {
        "scale": h.get("scale", lay["scale"]),
        "softcap": h.get("softcap", lay.get("softcap")),
        **{name: lay[name][head] if lay.get(name) is not None else None for name in PER_HEAD},
    }


def types_of(described: list[dict] | None, weights: list[torch.Tensor] | None, ids: list[int], *, causal: bool):
    """Each head's label in the model view: the explain sentences' verdicts (`described`: the layer's descriptions)
    where every head has one, else `head_type_names` of the heads' `weights` (None where there are none: a layer
    the page does not hold, which then has no labels)."""
    if described is not None and all("verdict" in d for d in described):
        return [d["verdict"]["type"] for d in described]
    if not weights:
        return None
    return head_type_names(torch.stack(weights).numpy(), ids, causal=causal)


def packed_bytes(out: dict) -> int:
    """How many bytes a packed layer takes in the page: its JSON as the page writes it (`report`)."""
    return len(json.dumps(out, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode())


def page_words(applied: dict, head_dim: int) -> dict:
    """What every page carries beside its layers: the words of the scale for the applied interventions, which keys
    the stepper shows, and how many top dimensions a layer not held in full keeps."""
    return {
        "scale_words": scale_words(applied, head_dim),
        "shown_keys": {"all_up_to": SHOWN_ALL, "top": TOP_KEYS},
        "vector_top": TOP_DIMENSIONS,
    }


@dataclass
class _Read:
    """One layer of a trace read for packing: its rule (`fields`: scale, causal, softcap, window, per-head
    features), its d_model vectors (x, attn_out, output) and visibility as NumPy, per head its own fields (kv_head;
    an intervention's scale, softcap, causal), its float64 q, k, v, lse and its own visibility or None; and whether
    its vectors go whole (`full`)."""

    fields: dict
    full: bool
    vectors: dict[str, np.ndarray]
    visible: np.ndarray
    heads: list[tuple[dict, dict[str, np.ndarray], np.ndarray | None]]


def _read(layer: LayerTrace, full: bool) -> _Read:
    """`layer` read as float64 NumPy (k and v once per key/value head, shared by the heads that read them)."""
    k = [_float64(t) for t in layer.k]
    v = [_float64(t) for t in layer.v]
    heads = []
    for h in range(layer.n_heads):
        kv = layer.kv_head(h)
        own: dict = {"kv_head": kv}
        apart = None
        change = layer.changed.get(h)
        if change is not None:  # a head an intervention changed apart from its layer
            own |= {"scale": change.scale, "softcap": change.softcap, "causal": change.causal}
            apart = change.visible.detach().cpu().numpy().astype(bool)
        arrays = {"q": _float64(layer.q[h]), "k": k[kv], "v": v[kv], "lse": _float64(layer.lse[h])}
        heads.append((own, arrays, apart))
    vectors = {name: _float64(getattr(layer, name)) for name in LAYER_ARRAYS}
    visible = layer.visible.detach().cpu().numpy().astype(bool)
    return _Read(layer_rule(layer), full, vectors, visible, heads)


def _float64(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().double().numpy()


def _layer_arrays(read: _Read) -> tuple[dict, list[torch.Tensor]]:
    """One layer packed, but for its `types`; and each head's float64 weights (L, L)."""
    out = dict(read.fields)
    out["norms"] = {}
    if not read.full:
        out["top"] = {}
    for name, vectors in read.vectors.items():
        if read.full:
            out[name] = codec.fixed(vectors, VECTOR_DIGITS, "z32")
        else:
            dims = top_dimensions(vectors)
            values = np.take_along_axis(vectors, dims, -1)
            out["top"][name] = {
                "dims": codec.encode(dims, "u16" if vectors.shape[-1] <= 2**16 else "u32"),
                "values": codec.fixed(values, VECTOR_DIGITS, "z32"),
            }
        out["norms"][name] = codec.fixed(np.linalg.norm(vectors, axis=-1), VECTOR_DIGITS, "z32")
    out["visible"] = codec.bits(read.visible)
    layer = read.fields | {"heads": [fields for fields, _, _ in read.heads]}  # what head_rule reads
    heads = []
    for h, (fields, arrays, apart) in enumerate(read.heads):
        packed = dict(fields)
        if apart is not None:  # a head an intervention changed apart from its layer
            packed["visible"] = codec.bits(apart)
        own = read.visible if apart is None else apart
        heads.append(_Head(packed, arrays, own, head_rule(layer, h), apart=apart is not None))
        shared = _shared_kv(heads)
        for name, a in arrays.items():
            once = shared is not None and name in ("k", "v")
            if once:
                packed[name] = {"of_head": shared}
            else:
                packed[name] = codec.exact(a) if name == "lse" else codec.encode(a, HEAD_CODE)
    weights: list[torch.Tensor] = [torch.empty(0)] * len(heads)
    for group in _groups(heads):
        for h, (shown, weights_h) in zip(group, _page_arrays([heads[h] for h in group]), strict=True):
            heads[h].packed |= shown
            weights[h] = weights_h
    out["heads"] = [head.packed for head in heads]
    return out, weights


def head_type_names(weights: np.ndarray, ids: list[int], *, causal: bool) -> list[str | None]:
    """(H, L, L) weights of one layer → each head's label (`verdicts.verdict` of `head_types.measure`), or None:
    for weights given without a text's descriptions (the attention page)."""
    return [verdict(types)["type"] for types in measure(weights, ids, causal=causal)]


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


def _page_arrays(group: list[_Head]) -> list[tuple[dict, torch.Tensor]]:
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
            "weights": codec.fixed(weights[part].numpy(), WEIGHT_DIGITS, "u16"),
            "keys": codec.encode(keys[part], key_dtype),
            "key_stages": codec.fixed(stages[:, part].transpose(0, 2, 1), STAGE_DIGITS, "z32"),  # (3, K, L)
            "weighted": codec.fixed(st["weighted"][part].numpy(), STAGE_DIGITS, "z32"),
            "sums": codec.fixed(sums[part], WEIGHT_DIGITS, "u32"),  # u32: the page reads it as numbers
        }
        if "sink" in st:
            shown["sink"] = codec.fixed(st["sink"][part].numpy(), WEIGHT_DIGITS, "u32")
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
        # (R', 1): the TOP_KEYS-th largest; topk, as causal rows' many equal zeros make np.partition 6× slower
        kth = torch.topk(torch.from_numpy(v), TOP_KEYS, dim=1).values[:, -1:].numpy()
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
