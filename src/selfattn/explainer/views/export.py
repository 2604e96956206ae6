"""The page's document of an Explanation (`document`): what the page, the app and (without its layers' arrays) the
--json document read, so they cannot disagree; its layers packed as the page holds them (`packing`).

Layout of the document (L tokens, H heads, D head dim), typed once in `views.schema` (`schema.Doc`, whose version
every document carries as doc["schema"]):

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
    layers [ {scale, causal, softcap, window, <feature>? [H], types [H] (each head's label: `packing.types_of`),
              and, held: visible, norms, x / attn_out / output (held in full) or top (the others), heads [ {kv_head,
              q, k, v (or {of_head}: GQA), lse, weights, keys, key_stages, weighted, sums, sink?, and for a head an
              intervention changed apart: scale, softcap, causal, visible} ]: every array packed (`packing`) } ],
    scale_words, shown_keys, vector_top (the page's words and limits: `packing.page_words`; with display)
    A layer left out by `layers=` keeps only {scale, causal, softcap, window, <feature>?, types?, omitted: true}.
    <feature>: each per-head score feature the layer has, under its keyword (`scores.PER_HEAD`), one value per
    head; absent for a layer without it. sinks (a layer with attention sinks, gpt-oss): each head's sink
    logit; its rows' weights then sum to 1 − sink, and a head's `sink` [L] is that remainder per query row,
    exp(sink_h − lse) (`trace.head_stages`: the share of the row's attention that goes to no token). ALiBi
    slopes: the stages' masked scores hold −slope·|i − j|.

Every array is packed by `codec` (views/codec.py), the page's one encoding; `codec.unpack` reads one back.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ... import __version__, checks
from ...files import json_float
from ...limits import HEAD_WORDS_BYTES, LONG_PAGE_BYTES, MAX_PAGE_BYTES, PAGE_BYTES, PAGE_FIXED_BYTES
from .. import interventions
from ..analysis.experiment import opened_row
from ..pieces import AGGREGATION_RULE, aggregate, names, shown_piece
from ..trace_types import LayerTrace, ModelTrace
from . import codec, texts
from .contribution_words import field as contribution_field
from .packing import WEIGHT_DIGITS, layer_rule, pack_layer, packed_bytes, page_words, types_of
from .page_budget import ALL_LAYERS_UP_TO, layer_page_bytes
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


def document(e: Explanation, *, layers="auto", lang: str | None = None, display: bool = True) -> dict:
    """The page's document of an Explanation (the layout in the module doc): what the page and the app read, and,
    its layers' arrays left out (`layers=[]`, display False), what --json starts from (`checkable`). It changes no
    number of `e`.

    layers    the layers whose arrays the page holds: "auto" every layer unless that is over what a page holds
              (`layers_budget`: less beyond ALL_LAYERS_UP_TO tokens), then the shown one and the nearest that fit,
              by their packed size (doc["omitted"] says which, with the size, and how to get the others);
              "selected" the shown one; a list those; None every one. The others keep their rule only ({…,
              omitted: true}). The d_model vectors go whole in doc["full_layers"] (the shown one for "auto" and
              "selected", every held one otherwise), as norms and top dimensions in the others.
    lang      "zh" | "en": the language its views speak (doc["lang"]; None leaves it out)
    display   with the page's thumbnails and packed weights (doc["display"]) and the page's words (`page_words`);
              False (the --json document) without them"""
    trace, shown = e.trace, e.shown
    selected = shown.as_dict()
    names_ = names(trace.tokens)
    shown_display = _display(trace, shown.layer, shown.head, e.answers.thumbnails) if display else None
    described = [[dict(d) for d in row] for row in e.answers.descriptions]
    limit = layers_budget(trace, shown_display)
    page_layers, omitted, full = _page_layers(trace, layers, shown.layer, described, limit)
    doc: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "selfattn_version": __version__,
        "model": card_dict(e.card),
        "text": e.tokens.text,
        "tokens": list(trace.tokens),
        "token_names": names_,
        "token_ids": trace.token_ids.tolist(),
        "unknown": dict(e.tokens.unknown),
        "interventions": _interventions(trace.kind),
        "experiment": {"applied": trace.intervention.as_applied()},
        "head_types": legend(),
        "selected": selected,
        "summaries": [list(row) for row in e.answers.summaries],
        "prediction": [p.as_dict() for p in e.predictions],
        "layers": page_layers,
    }
    if trace.pieces is not None:
        doc["pieces"] = trace.pieces.as_dict()
        doc["levels"] = levels(trace, shown.layer, shown.head)
    doc["opened"] = opened_query(trace.layers[shown.layer], shown.head, names_, shown.link)
    if shown_display is not None:
        doc["display"] = shown_display
        doc |= page_words(trace.intervention.as_applied(), e.card.head_dim)
    if omitted is not None:
        doc["omitted"] = omitted
    if full:  # none for the --json document, which holds no array (`checkable`)
        doc["full_layers"] = full
    if lang is not None:
        if lang not in texts.LANGS:
            raise ValueError(f"lang must be 'zh' or 'en', got {lang!r}")
        doc["lang"] = lang
    if e.compared is not None:
        doc["experiment"] |= dict(e.compared)
    doc |= {"descriptions": described, "roles": list(e.roles)}
    if e.first_token is not None:
        doc["first_token"] = dict(e.first_token)
    page = (lambda a: {"packed": packed_weights(a)}) if display else None  # noqa: E731
    contributions = contribution_field(e, max_len=STAGES_MAX_LEN, pack=page)
    if contributions is not None:
        doc["contributions"] = contributions
    if e.search is not None:
        doc["search"] = dict(e.search)
    return doc | {name: dict(value) for name, value in e.experiments.items()}


FIT_SLACK = 0.9
"""A layer="auto" page stops before packing the next layer when even 0.9 × its bound (`layer_page_bytes`) times the
least packed / bound ratio of the layers packed so far would not fit: packing it only to drop it took 0.12 s (a
layer of SmolLM2 at 512 tokens)."""


def _page_layers(
    trace: ModelTrace, layers, shown: int, described: list[list[dict]], limit: int
) -> tuple[list[dict], dict | None, list[int]]:
    """(doc["layers"], doc["omitted"] or None, doc["full_layers"]) for `layers` (see `document`): each held layer
    packed (`packing.pack_layer`) with its heads' labels (`packing.types_of`), the others their rule."""
    ids = trace.token_ids.tolist()
    if isinstance(layers, str) and layers in ("auto", "selected"):
        full = [shown]
    else:
        full = sorted(check_layers(layers, trace.n_layers))
    packed: dict[int, dict] = {}

    def pack(l: int) -> dict:
        layer = trace.layers[l]
        out, weights = pack_layer(layer, full=l in full)
        types = types_of(described[l], weights, ids, causal=layer.causal)
        return out | ({"types": types} if types is not None else {})

    omitted = None
    if isinstance(layers, str) and layers == "selected":
        held = {shown}
    elif isinstance(layers, str) and layers == "auto":
        sizes = [layer_page_bytes(layer, full=l == shown) for l, layer in enumerate(trace.layers)]
        held = set(range(trace.n_layers))
        if sum(sizes) > limit:  # measured by packing: the shown one, then the nearest (the lower first) while they fit
            used, ratio = 0, math.inf  # ratio: the least packed / bound of the layers packed so far
            for l in sorted(range(trace.n_layers), key=lambda l: (abs(l - shown), l)):
                if packed and used + FIT_SLACK * ratio * sizes[l] > limit:
                    break  # too large even if it packs 10 % smaller than any before: not packed to find out
                out = pack(l)
                size = packed_bytes({k: v for k, v in out.items() if k != "types"})
                if packed and used + size > limit:
                    break
                packed[l], used, ratio = out, used + size, min(ratio, size / sizes[l])
            held = set(packed)
            if len(held) < trace.n_layers:
                omitted = omitted_note(trace.n_layers, held, sum(sizes), limit, tokens=trace.layers[shown].length)
    else:
        held = set(full)
    out_layers = []
    for l, layer in enumerate(trace.layers):
        if l in held:
            out_layers.append(packed[l] if l in packed else pack(l))
        else:  # its heads' labels still colour the model view
            types = types_of(described[l], None, ids, causal=layer.causal)
            out_layers.append(layer_rule(layer) | {"omitted": True} | ({"types": types} if types is not None else {}))
    return out_layers, omitted, full


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
    """How many bytes the layers' arrays may take in a page of layers="auto": MAX_PAGE_BYTES (LONG_PAGE_BYTES for a
    text of more than ALL_LAYERS_UP_TO tokens), less where the thumbnails and words of a model with many heads would
    take the page over PAGE_BYTES."""
    heads = sum(layer.n_heads for layer in trace.layers)
    shown = 0 if shown_display is None else len(json.dumps(shown_display, separators=(",", ":")))
    most = LONG_PAGE_BYTES if trace.layers[0].length > ALL_LAYERS_UP_TO else MAX_PAGE_BYTES
    return max(0, min(most, PAGE_BYTES - shown - PAGE_FIXED_BYTES - HEAD_WORDS_BYTES * heads))


def omitted_note(n_layers: int, held: set[int], total: int, limit: int, *, tokens: int = 0) -> dict:
    """doc["omitted"]: the layers left out, those held, the sizes, and in words which are held and how to get
    the others (`texts` "export.omitted"; "export.omitted_long" for a text of `tokens` over ALL_LAYERS_UP_TO)."""
    values: dict = {"mb": f"{total / 1e6:,.0f}", "limit": f"{limit / 1e6:,.0f}", "held": layer_ranges(sorted(held))}
    key = "export.omitted_long" if tokens > ALL_LAYERS_UP_TO else "export.omitted"
    values |= {"n": tokens, "up_to": ALL_LAYERS_UP_TO}
    said = {lang: texts.text(key, lang, **values) for lang in texts.LANGS}
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


def _display(trace: ModelTrace, layer: int, head: int, thumbnails) -> dict:
    """What the page's overview and the shown head's matrix draw, at the precision they draw it, each array packed
    by `codec` (the page's one encoding: byte planes, zlib, base64; `codec.unpack` reads it back):

        thumbnails [layer][head]  "u16" (T, T) with digits WEIGHT_DIGITS: `summary.scan`'s cells (the weights when
                                  L <= T, else the mean of each block of them) at 0.01 %, as every weight
        weights                   "u16" (L, L) with digits WEIGHT_DIGITS: the shown head's weights at 0.01 %"""
    w = trace.layers[layer].stages(head, weighted=False)["weights"].numpy()
    return {
        "thumbnail_size": int(thumbnails[0][0].shape[-1]) if thumbnails and thumbnails[0] else 0,
        "thumbnails": [[codec.fixed(_unit_range(t), WEIGHT_DIGITS, "u16") for t in row] for row in thumbnails],
        "selected": {"layer": layer, "head": head, "weights": codec.fixed(w, WEIGHT_DIGITS, "u16")},
    }


def _unit_range(t: torch.Tensor) -> np.ndarray:
    """Weights (or means of them) as float64 in [0, 1]: a float32 weight of 1 may round a hair above it."""
    return np.clip(t.detach().cpu().double().numpy(), 0.0, 1.0)


def packed_weights(w: np.ndarray) -> dict:
    """Numbers in [0, 1] (weights, shares) as the page draws them: u16 to WEIGHT_DIGITS decimals (`codec.fixed`)."""
    return codec.fixed(np.clip(w, 0.0, 1.0), WEIGHT_DIGITS, "u16")


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


def json_list(t: torch.Tensor):
    """Nested lists of floats (float32 values kept exactly), ±inf as strings."""
    a = t.detach().cpu().double().numpy()
    if np.isfinite(a).all():
        return a.tolist()
    return _encode(a.tolist())


def _encode(x):
    return [_encode(v) for v in x] if isinstance(x, list) else json_float(x)
