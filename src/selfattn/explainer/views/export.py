"""One source, several views: a `ModelTrace` as a plain dict (→ `--json`) or flat arrays (→ `--npz`).

The terminal tables, the JSON export, the HTML report and the web app all read the
numbers from here, so they cannot disagree.

Layout of the dict (L tokens, H heads, D head dim), typed once in `views.schema` (`schema.Doc`, whose
version every dict carries as doc["schema"]; `schema.validate` checks a dict against it):

    schema, selfattn_version,
    model {name, kind "decoder"|"encoder", architecture, architecture_zh? (the same in Chinese), positions,
           positions_zh, positions_key, n_layers, n_heads, n_kv_heads, kv_of_head [H] (the key/value head each
           query head reads), head_dim, d_model, dtype, tokenizer (a `texts` key: how the text is cut),
           loaded {format, file, class, why}},
    text, tokens [L] (each piece as a person reads it: `pieces` labels, 森(1/3), <unk>:☃),
    token_names [L] (the same with "@position" on a repeated one: 金鱼@5; what every view shows),
    token_ids [L], unknown {count, positions [..], message} (true <unk> pieces only, never byte pieces),
    pieces {pieces [{id, raw, label, span, special, unknown}], names, characters / words [{text, name, start,
            end, pieces}], rule {zh, en}} (`pieces.Pieces.as_dict`: every level),
    levels {rule, characters / words {names, pieces [[i]], same, weights [G][G] | None}} (the shown head per
            character and per word: `pieces.aggregate`, mean over the query group's pieces of the sum over the
            key group's pieces; weights None beyond LEVEL_MAX_GROUPS groups),
    display {thumbnail_size, thumbnails [layer][head] (T, T) "u16" digits 4, selected {layer, head, weights (L, L)
             "u16" digits 4}} (what the page draws, at the precision it draws it; each array packed by `codec`, the
             page's one encoding: {dtype, shape, b64, digits?}, byte planes, zlib, base64),
    opened {row, hidden, text {zh, en}, link? {query, key}} (the query row the views open on and why: the query of
           the link the shown head's sentence describes when the mask hides keys from it; `opened_query`),
    omitted? {layers, held, bytes, limit, message, text {zh, en}} (layers="auto" over MAX_PAGE_BYTES: which
             layers are held, and how to get the others),
    full_layers [..] (the held layers whose d_model vectors the page holds whole: the shown one for layers="auto" and
                 "selected", the layers asked for a list, every layer for None; the page holds the others' as norms
                 and top dimensions, `packing`),
    lang? ("zh" | "en": the language the views of this dict speak, when given),
    interventions [{name, label {zh, en}, help, said, params [{name, type, min, max, default, label}],
                    needs_baseline, unavailable? {zh, en}}] (the registry as data: the page builds its controls
                    from it; an encoder's no_causal says why it does not apply),
    experiment {applied {name: {param: value}, layer, head}, and with a baseline compared (`experiment`):
                layer, head, scope, same_x, entropy, future, future_row, top, text {zh, en}},
    selected {layer, head, rule}, summaries [layer][head] {entropy, max_weight, first_token, previous, self, rows},
    descriptions [layer][head] {kind, text {zh, en}, …} (`heads.describe`), first_token? {token, selected, mean}
    (only when the first token is a special token: <bos>, [CLS]),
    contributions? {layer, head, norms [H][L], first [H], first_type [H], text, shares?, packed?} (what each key
                   contributes to the shown head, ‖α_ij · v_j W_O^h‖: `views.contribution_words`; absent without an
                   output projection),
    search? {query, key, heads [{layer, head, weight}]} (asked with find),
    prediction [{token, shown, id, prob}] (decoders: the next token after the text, `shown` as a person reads
               it: "␣Mary", a piece that begins a character with the character greedy decoding completes,
               "看 (1/3: ⟨E7⟩)", else its bytes "⟨E6 A3⟩"; [] for encoders),
    layers [ {scale, causal, softcap, window, <feature>? [H], visible [L][L] 0/1, x [L][d_model],
              attn_out [L][d_model], output [L][d_model],
              heads [ {kv_head, q [L][D], k [L][D], v [L][D], lse [L], sink? [L],
                       scale?, softcap?, causal?, visible? — only for a head an intervention changed apart,
                       stages {scores, scaled, masked, weights, weighted} — only when L <= STAGES_MAX_LEN} ] } ]
    A layer left out by `layers=` keeps only {scale, causal, softcap, window, <feature>?, omitted: true}.
    <feature>: each per-head score feature the layer has, under its keyword (`scores.PER_HEAD`), one value per
    head; absent for a layer without it. sinks (a layer with attention sinks, gpt-oss): each head's sink
    logit; its rows' weights then sum to 1 − sink, and a head's `sink` [L] is that remainder per query row,
    exp(sink_h − lse) (`trace.head_stages`: the share of the row's attention that goes to no token). ALiBi
    slopes: the stages' masked scores hold −slope·|i − j|.

The layers' arrays are NumPy arrays in the dict (float32 or float64, every value exact; visible: uint8 0/1), never
Python lists: the page packs them
as they are (`packing`), `--npz` writes them (`to_arrays`); `json_ready(doc)` is the dict as JSON writes it (the
lists above), where infinite values are the strings "-inf"/"inf" (`selfattn.files.json_float`), so the JSON stays
standard.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import numpy as np
import torch

from ... import __version__, checks
from ...files import json_float
from ...limits import HEAD_WORDS_BYTES, MAX_PAGE_BYTES, PAGE_BYTES, PAGE_FIXED_BYTES
from ...scores import PER_HEAD
from .. import interventions
from ..analysis.experiment import opened_row
from ..pieces import AGGREGATION_RULE, aggregate, names, shown_piece
from ..stages import head_stages
from ..trace_types import LayerTrace, ModelTrace
from . import codec, texts
from .contribution_words import field as contribution_field
from .page_budget import layer_page_bytes
from .schema import SCHEMA_VERSION
from .type_legend import legend

if TYPE_CHECKING:
    from ..result import Explanation, ModelCard

STAGES_MAX_LEN = 64
"""Up to this many tokens the export holds every head's N×N stages; beyond, Q/K/V/lse (the stages
follow from them: `LayerTrace.stages`)."""


def gqa_words(model: dict, lang: str) -> str:
    """Which key/value head each query head reads, in words ("" without grouped-query attention)."""
    H, Hkv = model["n_heads"], model["n_kv_heads"]
    if Hkv == H:
        return ""
    G = H // Hkv
    groups = ("；" if lang == "zh" else "; ").join(
        texts.text("gqa.group", lang, first=g * G, last=(g + 1) * G - 1, kv=g) if G > 1 else f"{g}→{g}"
        for g in range(Hkv)
    )
    return texts.text("gqa.mqa" if Hkv == 1 else "gqa.heads", lang, n=H, kv=Hkv, g=G, groups=groups)


def to_dict(
    trace: ModelTrace,
    *,
    model: dict,
    text: str,
    selected: dict,
    summaries: list,
    prediction: list,
    unknown: dict,
    stages: bool | None = None,
    layers="auto",
    thumbnails=None,
    link: tuple[int, int] | None = None,
    page_bytes: Callable[..., int] | None = None,
) -> dict:
    """Everything captured: the layers' arrays as NumPy arrays (`_layer_dict`), the rest as JSON-ready values;
    `json_ready` gives the JSON's lists. `unknown`: {count, positions, message} of the tokens
    the tokenizer could not represent (never left out, so no view can hide them). `layers`: the layer
    indices whose arrays are written; None: all; "selected": the shown one; "auto": all unless that is
    over what a page holds (`layers_budget`), then the shown one and the nearest that fit (doc["omitted"] says which,
    with the size, and how to get the others). The others keep their scalars only. The page holds the d_model vectors
    whole in doc["full_layers"] (the shown one for "auto" and "selected"; the asked ones; all for None), of the others
    their norms and top dimensions. `thumbnails`: `summary.scan`'s, for doc["display"]. `page_bytes(layer_dict, l,
    full=)`: what a layer takes in the page once packed (`packing.layer_bytes`), which "auto" fits the layers to
    (without it: the bound `layer_page_bytes`, which compression only undercuts)."""
    with_stages = trace.layers[0].length <= STAGES_MAX_LEN if stages is None else stages
    shown_display = None if thumbnails is None else display(trace, selected["layer"], selected["head"], thumbnails)
    limit = layers_budget(trace, shown_display)
    wanted, omitted, made = _wanted_layers(trace, layers, selected["layer"], with_stages, page_bytes, limit)
    full = full_layers(layers, selected["layer"], wanted)
    out_layers = [
        made[index]
        if index in made
        else _layer_dict(layer, with_stages)
        if index in wanted
        else layer_rule(layer) | {"omitted": True}
        for index, layer in enumerate(trace.layers)
    ]
    pieces = trace.pieces
    doc = {
        "schema": SCHEMA_VERSION,
        "selfattn_version": __version__,
        "model": model,
        "text": text,
        "tokens": list(trace.tokens),
        "token_names": names(trace.tokens),
        "token_ids": trace.token_ids.tolist(),
        "unknown": unknown,
        "interventions": _interventions(trace.kind),
        "experiment": {"applied": trace.intervention.as_applied()},
        "head_types": legend(),
        "selected": selected,
        "summaries": summaries,
        "prediction": prediction,
        "layers": out_layers,
    }
    if pieces is not None:
        doc["pieces"] = pieces.as_dict()
        doc["levels"] = levels(trace, selected["layer"], selected["head"])
    doc["opened"] = opened_query(trace.layers[selected["layer"]], selected["head"], names(trace.tokens), link)
    if shown_display is not None:
        doc["display"] = shown_display
    if omitted is not None:
        doc["omitted"] = omitted
    if full:  # none for the --json document, which holds no array (`checkable`)
        doc["full_layers"] = full
    return doc


def full_layers(layers, shown: int, held: set[int]) -> list[int]:
    """The held layers whose d_model vectors the page holds whole (doc["full_layers"]): the shown one for
    layers="auto" and "selected", every held one for an asked list or None."""
    if isinstance(layers, str):
        return [shown]
    return sorted(held)


def document(
    e: Explanation,
    *,
    stages: bool | None = None,
    layers="auto",
    lang: str | None = None,
    page_bytes: Callable[..., int] | None = None,
    display: bool = True,
) -> dict:
    """The export dict of an Explanation (the layout in the module doc): what the page, the terminal tables and the
    app read. stages, layers, page_bytes: as `to_dict`; lang "zh" | "en": the language its views speak
    (doc["lang"]; None leaves it out); display False: without the page's thumbnails and packed weights
    (doc["display"]), which only the page draws. It changes no number of `e`."""
    shown = e.shown
    doc = to_dict(
        e.trace,
        model=card_dict(e.card),
        text=e.tokens.text,
        selected=shown.as_dict(),
        summaries=[list(row) for row in e.answers.summaries],
        prediction=[p.as_dict() for p in e.predictions],
        stages=stages,
        layers=layers,
        unknown=dict(e.tokens.unknown),
        thumbnails=e.answers.thumbnails if display else None,
        link=shown.link,
        page_bytes=page_bytes,
    )
    if lang is not None:
        if lang not in texts.LANGS:
            raise ValueError(f"lang must be 'zh' or 'en', got {lang!r}")
        doc["lang"] = lang
    if e.compared is not None:
        doc["experiment"] |= dict(e.compared)
    doc |= {"descriptions": [list(row) for row in e.answers.descriptions], "roles": list(e.roles)}
    if e.first_token is not None:
        doc["first_token"] = dict(e.first_token)
    page = (lambda a: {"packed": packed_weights(a)}) if display else None  # noqa: E731
    contributions = contribution_field(e, max_len=STAGES_MAX_LEN, pack=page)
    if contributions is not None:
        doc["contributions"] = contributions
    if e.search is not None:
        doc["search"] = dict(e.search)
    return doc | {name: dict(value) for name, value in e.experiments.items()}


def card_dict(card: ModelCard) -> dict:
    """The model card as every view shows it: its positional scheme written out in English and in Chinese
    (`texts`), and for grouped-query attention which key/value head each query head reads (`gqa_words`)."""
    out = {
        "name": card.name,
        "kind": card.kind,
        "architecture": card.architecture,
        "positions": texts.text(card.positions_key, "en"),
        "positions_zh": texts.text(card.positions_key, "zh"),
        "positions_key": card.positions_key,
        "n_layers": card.n_layers,
        "n_heads": card.n_heads,
        "n_kv_heads": card.n_kv_heads,
        "kv_of_head": list(card.kv_of_head),
        "head_dim": card.head_dim,
        "d_model": card.d_model,
        "dtype": card.dtype,
    }
    if card.architecture_zh is not None:
        out["architecture_zh"] = card.architecture_zh
    out |= {"tokenizer": card.tokenizer, "loaded": dict(card.loaded), "formula": card.formula}
    return out | ({"bos": bos_dict(card.bos)} if card.bos else {})


def bos_dict(bos) -> dict:
    """The card's BOS (`Explainer.bos`: prepend_bos, id, token, added, removed) and what was done, in words."""
    token = shown_piece(bos["token"]) if bos["token"] is not None else ""
    if bos["added"]:
        key = "tables.bos_added"
    elif bos["removed"]:
        key = "tables.bos_removed"
    elif bos["prepend_bos"]:
        key = "tables.bos_own"
    elif bos["id"] is not None:
        key = "tables.bos_kept"
    else:
        key = "tables.bos_none"
    return dict(bos) | {"text": {lang: texts.text(key, lang, token=token) for lang in texts.LANGS}}


def opened_query(layer: LayerTrace, head: int, tokens: list[str], link: tuple[int, int] | None = None) -> dict:
    """The query row the views open on (`experiment.opened_row`), and why in one line:
    {"row": i, "hidden": how many keys row i may not see, "text": {zh, en}, "link"?: {query, key}}"""
    row, hidden, why, (q, k) = opened_row(layer, head, link)
    values = {"i": row, "token": tokens[row], "n": hidden}
    if q is not None and k is not None:
        values |= {"q": q, "query": tokens[q], "k": k, "key_token": tokens[k]}
    out = {"row": row, "hidden": hidden, "text": {lang: texts.text(why, lang, **values) for lang in texts.LANGS}}
    return out | ({"link": {"query": q, "key": k}} if q is not None else {})


def _interventions(kind: str) -> list[dict]:
    """The registry as data; for an encoder, the entry it refuses (no_causal) carries why (`unavailable`)."""
    entries = interventions.as_data()
    if kind == "encoder":
        for entry in entries:
            if entry["name"] == "no_causal":
                entry["unavailable"] = {lang: texts.text("encoder.no_causal", lang) for lang in texts.LANGS}
    return entries


def layers_budget(trace: ModelTrace, shown_display: dict | None) -> int:
    """How many bytes the layers' arrays may take in a page of layers="auto": MAX_PAGE_BYTES, less where the
    thumbnails and words of a model with many heads would take the page over PAGE_BYTES."""
    heads = sum(layer.n_heads for layer in trace.layers)
    shown = 0 if shown_display is None else len(json.dumps(shown_display, separators=(",", ":")))
    return max(0, min(MAX_PAGE_BYTES, PAGE_BYTES - shown - PAGE_FIXED_BYTES - HEAD_WORDS_BYTES * heads))


def _wanted_layers(
    trace: ModelTrace,
    layers,
    shown: int,
    with_stages: bool,
    page_bytes: Callable[..., int] | None,
    limit: int,
) -> tuple[set[int], dict | None, dict[int, dict]]:
    """(indices of the layers whose arrays are written, doc["omitted"] or None, the dicts of those already made)
    for `layers` (see `to_dict`); "auto" fits them to `limit` bytes."""
    if isinstance(layers, str) and layers == "selected":
        return {shown}, None, {}
    if not (isinstance(layers, str) and layers == "auto"):
        return check_layers(layers, trace.n_layers), None, {}
    sizes = [layer_page_bytes(layer, full=l == shown) for l, layer in enumerate(trace.layers)]
    if sum(sizes) <= limit:
        return set(range(trace.n_layers)), None, {}
    if page_bytes is None:
        held, made = fit_layers(sizes, shown, limit), {}
    else:
        made = measured_layers(trace, shown, with_stages, page_bytes, limit)
        held = set(made)
        if len(held) == trace.n_layers:  # packed, every layer fits
            return held, None, made
    return held, omitted_note(trace.n_layers, held, sum(sizes), limit), made


def measured_layers(
    trace: ModelTrace,
    shown: int,
    with_stages: bool,
    page_bytes: Callable[..., int],
    limit: int,
) -> dict[int, dict]:
    """{index: its dict} of the layers a page of `limit` bytes holds, by their packed size (`page_bytes`, with full
    vectors for the shown one only): the shown one always, then the nearest to it (the lower first) until one does
    not fit. Measuring a layer costs packing it (0.4–0.6 s a layer of the 0.5B configuration at 512 tokens), which
    the page then reads back (`packing.PackedLayers`); only the first that does not fit is packed for nothing (no
    estimate stops earlier: the shown layer's share of its bound says little of a layer held as norms and top
    dimensions)."""
    order = sorted(range(trace.n_layers), key=lambda l: (abs(l - shown), l))
    made: dict[int, dict] = {}
    used = 0
    for l in order:
        layer = _layer_dict(trace.layers[l], with_stages)
        size = page_bytes(layer, l, full=l == shown)
        if made and used + size > limit:
            break
        made[l], used = layer, used + size
    return made


def fit_layers(sizes: list[int], shown: int, limit: int) -> set[int]:
    """The layers that fit `limit` bytes: the shown one always, then the nearest to it (the lower first)."""
    order = sorted(range(len(sizes)), key=lambda l: (abs(l - shown), l))
    held, used = {shown}, sizes[shown]
    for l in order[1:]:
        if used + sizes[l] <= limit:
            held.add(l)
            used += sizes[l]
    return held


def omitted_note(n_layers: int, held: set[int], total: int, limit: int) -> dict:
    """doc["omitted"]: the layers left out, those held, the sizes, and in words which are held and how to get
    the others (`texts` "export.omitted")."""
    values = {"mb": f"{total / 1e6:,.0f}", "limit": f"{limit / 1e6:,.0f}", "held": layer_ranges(sorted(held))}
    said = {lang: texts.text("export.omitted", lang, **values) for lang in texts.LANGS}
    return {
        "layers": [i for i in range(n_layers) if i not in held],
        "held": sorted(held),
        "bytes": int(total),
        "limit": int(limit),
        "message": said["en"],
        "text": said,
    }


def layer_ranges(layers: list[int]) -> str:
    """Sorted layer indices as ranges: [0, 1, 2, 5, 7, 8] → "0–2, 5, 7–8"."""
    parts: list[str] = []
    for l in layers:
        if parts and l == int(parts[-1].split("–")[-1]) + 1:
            parts[-1] = f"{parts[-1].split('–')[0]}–{l}"
        else:
            parts.append(str(l))
    return ", ".join(parts)


LEVEL_MAX_GROUPS = 256
"""Up to this many groups a level's weights for the shown head are in the dict (beyond: its groups only)."""


def levels(trace: ModelTrace, layer: int, head: int) -> dict:
    """The shown head at the character and word levels: {level: {names, pieces [[members]], weights
    [G][G] | None, same}} — weights = `pieces.aggregate` of the piece weights (mean over the query group's
    pieces of the sum over the key group's pieces), float64 from `LayerTrace.stages`; `same`: the level's
    groups are the pieces themselves."""
    p = trace.pieces
    assert p is not None  # called only for a trace with pieces
    w = None
    out: dict = {"rule": AGGREGATION_RULE}
    for level in ("characters", "words"):
        groups = p.group_of(level)
        entry = {
            "names": p.names(level),
            "pieces": [list(g.members) for g in groups],
            "same": len(groups) == len(p),
            "weights": None,
        }
        if len(groups) <= LEVEL_MAX_GROUPS:
            w = trace.layers[layer].stages(head, weighted=False)["weights"] if w is None else w
            entry["weights"] = aggregate(w, groups).tolist()
        out[level] = entry
    return out


def display(trace: ModelTrace, layer: int, head: int, thumbnails) -> dict:
    """What the page's overview and the shown head's matrix draw, at the precision they draw it, each array packed
    by `codec` (the page's one encoding: byte planes, zlib, base64; `codec.unpack` reads it back):

        thumbnails [layer][head]  "u16" (T, T) with digits WEIGHT_DIGITS: `summary.scan`'s cells (the weights when
                                  L <= T, else the mean of each block of them) at 0.01 %, as every weight
        weights                   "u16" (L, L) with digits WEIGHT_DIGITS: the shown head's weights at 0.01 %"""
    w = trace.layers[layer].stages(head, weighted=False)["weights"].numpy()
    batch: list = []  # every array compressed at once, on threads
    packed = {
        "thumbnail_size": int(thumbnails[0][0].shape[-1]) if thumbnails and thumbnails[0] else 0,
        "thumbnails": [[codec.fixed(_unit_range(t), WEIGHT_DIGITS, "u16", batch) for t in row] for row in thumbnails],
        "selected": {"layer": layer, "head": head, "weights": codec.fixed(w, WEIGHT_DIGITS, "u16", batch)},
    }
    codec.compress(batch)
    return packed


def _unit_range(t: torch.Tensor) -> np.ndarray:
    """Weights (or means of them) as float64 in [0, 1]: a float32 weight of 1 may round a hair above it."""
    return np.clip(t.detach().cpu().double().numpy(), 0.0, 1.0)


WEIGHT_DIGITS = 4
"""Weights are shown as percentages with 2 decimals: they travel to 4 decimals of the weight (u16, `codec.fixed`)."""


def packed_weights(w: np.ndarray) -> dict:
    """Numbers in [0, 1] (weights, shares) as the page draws them: u16 to WEIGHT_DIGITS decimals (`codec.fixed`)."""
    return codec.fixed(np.clip(w, 0.0, 1.0), WEIGHT_DIGITS, "u16")


def layer_rule(layer: LayerTrace) -> dict:
    window = list(layer.window) if isinstance(layer.window, tuple) else layer.window
    out: dict = {"scale": layer.scale, "causal": layer.causal, "softcap": layer.softcap, "window": window}
    for name, values in layer.features.items():  # only where the layer has them: other models' dicts stay as they were
        out[name] = [float(x) for x in values.double().tolist()]
    return out


def _layer_dict(layer: LayerTrace, with_stages: bool) -> dict:
    """One layer's arrays: its rule and visibility, X, the outputs, and per head Q/K/V/lse (+ stages), as NumPy
    copies holding every value exactly (`_exact`: float32 or float64; ±inf kept) and the visibility as 0/1 uint8
    (`json_ready` makes the JSON's lists of them)."""
    heads = []
    k = [_exact(t) for t in layer.k]  # one array per key/value head, shared by the query heads that read it (GQA)
    v = [_exact(t) for t in layer.v]
    for h in range(layer.n_heads):
        kv = layer.kv_head(h)
        head = {"kv_head": kv, "q": _exact(layer.q[h]), "k": k[kv], "v": v[kv], "lse": _exact(layer.lse[h])}
        change = layer.changed.get(h)
        if change is not None:
            head |= {
                "scale": change.scale,
                "softcap": change.softcap,
                "causal": change.causal,
                "visible": _zero_one(change.visible),
            }
        if layer.sinks is not None:
            head["sink"] = _exact(cast(torch.Tensor, layer.sink(h)))  # not None: the layer has sinks
        if with_stages:
            st = layer.stages(h)
            head["stages"] = {name: _exact(st[name]) for name in ("scores", "scaled", "masked", "weights", "weighted")}
        heads.append(head)
    arrays = {"x": _exact(layer.x), "attn_out": _exact(layer.attn_out), "output": _exact(layer.output)}
    return layer_rule(layer) | {"visible": _zero_one(layer.visible)} | arrays | {"heads": heads}


def _exact(t: torch.Tensor) -> np.ndarray:
    """A copy of `t` as NumPy in the narrowest float type that holds every value exactly: float64 for float64,
    float32 for float32 and the half types (half the bytes of float64 for a float32 model)."""
    t = t.detach().cpu()
    return (t if t.dtype in (torch.float32, torch.float64) else t.float()).numpy().copy()


def _zero_one(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().to(torch.uint8).numpy()


def json_ready(x):
    """`x` (the export dict, or any part of it) with every NumPy array as nested lists (`json_list`: floats, ±inf
    as strings; integers as they are): what `json.dumps` writes and `views.schema.Doc` describes. The rest is shared,
    not copied."""
    if isinstance(x, np.ndarray):
        return x.tolist() if x.dtype.kind in "biu" else json_list(torch.from_numpy(x))
    if isinstance(x, dict):
        return {k: json_ready(v) for k, v in x.items()}
    if isinstance(x, list):
        return [json_ready(v) for v in x]
    return x


def check_layers(layers, n_layers: int) -> set[int]:
    """The set of layer indices asked for (None: all), each checked to be in [0, n_layers)."""
    if layers is None:
        return set(range(n_layers))
    if isinstance(layers, (str, bytes)) or not hasattr(layers, "__iter__"):
        raise TypeError(f"layers must be a list of layer indices, got {type(layers).__name__}")
    out = set()
    for l in layers:
        if not 0 <= checks.integer("a layer index", l) < n_layers:
            raise ValueError(f"layers must hold indices in [0, {n_layers - 1}], got {l!r}")
        out.add(l)
    return out


def to_arrays(doc: dict) -> dict[str, np.ndarray]:
    """The dict as flat named arrays for `np.savez` (strings as unicode arrays)."""
    out = {
        "selfattn_version": np.array(doc["selfattn_version"]),
        "model_name": np.array(doc["model"]["name"]),
        "text": np.array(doc["text"]),
        "tokens": np.array(doc["tokens"]),
        "token_ids": np.array(doc["token_ids"], dtype=np.int64),
        "model_architecture": np.array(doc["model"]["architecture"]),
        "model_positions": np.array(doc["model"]["positions"]),
        "unknown_positions": np.array(doc["unknown"]["positions"], dtype=np.int64),
    }
    for l, layer in enumerate(doc["layers"]):
        if layer.get("omitted"):
            continue
        for name in ("x", "attn_out", "output"):
            out[f"layer{l}/{name}"] = _array(layer[name])
        out[f"layer{l}/visible"] = np.array(layer["visible"], dtype=bool)
        out[f"layer{l}/scale"] = np.array(layer["scale"])
        if layer.get("softcap") is not None:
            out[f"layer{l}/softcap"] = np.array(layer["softcap"])
        for name in PER_HEAD:
            if layer.get(name) is not None:
                out[f"layer{l}/{name}"] = np.array(layer[name], dtype=np.float64)
        for h, head in enumerate(layer["heads"]):
            for name in ("q", "k", "v", "lse", "sink"):
                if name in head:
                    out[f"layer{l}/head{h}/{name}"] = _array(head[name])
            if "visible" in head:  # changed apart from its layer by an intervention
                out[f"layer{l}/head{h}/visible"] = np.array(head["visible"], dtype=bool)
                out[f"layer{l}/head{h}/scale"] = np.array(head["scale"])
            for name, values in head.get("stages", {}).items():
                out[f"layer{l}/head{h}/{name}"] = _array(values)
    return out


def head_weights(doc: dict, layer: int, head: int) -> np.ndarray:
    """Weights (L, L) of one head from the dict's q, k, scale, softcap and visibility (the head's
    own, when an intervention changed it apart): `trace.head_stages`, the formula of `LayerTrace.stages`."""
    lay = doc["layers"][layer]
    h = lay["heads"][head]
    q, k = (torch.from_numpy(_array(h[name])) for name in ("q", "k"))
    visible = torch.tensor(h.get("visible", lay["visible"]), dtype=torch.bool)
    return head_stages(q, k, visible=visible, **head_rule(lay, head))["weights"].numpy()


def head_rule(lay: dict, head: int) -> dict:
    """The keyword arguments of `trace.head_stages` for one head of an exported layer: scale and softcap (the
    head's own when an intervention changed it apart) and its value of each per-head score feature (None
    without)."""
    h = lay["heads"][head]
    return {
        "scale": h.get("scale", lay["scale"]),
        "softcap": h.get("softcap", lay.get("softcap")),
        **{name: lay[name][head] if lay.get(name) is not None else None for name in PER_HEAD},
    }


def json_list(t: torch.Tensor):
    """Nested lists of floats (float32 values kept exactly), ±inf as strings."""
    a = t.detach().cpu().double().numpy()
    if np.isfinite(a).all():
        return a.tolist()
    return _encode(a.tolist())


def _encode(x):
    return [_encode(v) for v in x] if isinstance(x, list) else json_float(x)


def _array(values) -> np.ndarray:
    return np.array(restore_inf(values), dtype=np.float64)


def restore_inf(x):
    """Nested lists as written by `_list`, with "inf" / "-inf" back as floats; any other string is refused."""
    if isinstance(x, list):
        return [restore_inf(v) for v in x]
    if isinstance(x, str):
        if x not in ("inf", "-inf"):
            raise ValueError(f"unexpected string {x!r} in a numeric array")
        return float(x)
    return x
