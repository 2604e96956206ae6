"""One source, several views: a `ModelTrace` as a plain dict (→ `--json`) or flat arrays (→ `--npz`).

The terminal tables, the JSON export, the HTML report and the web app all read the
numbers from here, so they cannot disagree.

Layout of the dict (L tokens, H heads, D head dim):

    selfattn_version, model {name, kind, architecture, positions, n_layers, n_heads, n_kv_heads, head_dim, d_model},
    text, tokens [L], token_ids [L], unknown {count, positions [..], message},
    intervention {scaling, causal, temperature, block?, layer?, head?} (the flat record: `Intervention.as_dict`),
    interventions [{name, label {zh, en}, help, said, params [{name, type, min, max, default, label}],
                    needs_baseline}] (the registry as data: the page builds its controls from it),
    experiment {applied {name: {param: value}, layer, head}, and with a baseline compared (`experiment`):
                layer, head, scope, same_x, entropy, future, future_row, top, text {zh, en}},
    texts {key: {zh, en}} (the sentences the page shows: `texts.for_page`),
    selected {layer, head, rule}, summaries [layer][head] {entropy, max_weight, first_token, previous, self, rows},
    descriptions [layer][head] {kind, text {zh, en}, …} (`heads.describe`), first_token {token, selected, mean},
    search? {query, key, heads [{layer, head, weight}]} (asked with find),
    prediction [{token, id, prob}] (decoders: the next token after the text; [] for encoders),
    layers [ {scale, causal, softcap, window, visible [L][L] 0/1, x [L][d_model], attn_out [L][d_model],
              output [L][d_model],
              heads [ {kv_head, q [L][D], k [L][D], v [L][D], lse [L],
                       scale?, softcap?, causal?, visible? — only for a head an intervention changed apart,
                       stages {scores, scaled, masked, weights, weighted} — only when L <= STAGES_MAX_LEN} ] } ]
    A layer left out by `layers=` keeps only {scale, causal, softcap, window, omitted: true}.

Infinite values are written as the strings "-inf"/"inf" (`selfattn.files.json_float`), so the JSON
stays standard.
"""

from __future__ import annotations

import numpy as np
import torch

from ... import __version__, checks
from ...files import json_float
from ..capture import interventions
from ..capture.trace import LayerTrace, ModelTrace, head_stages
from . import taxonomy, texts

STAGES_MAX_LEN = 64
"""Up to this many tokens the export holds every head's N×N stages; beyond, Q/K/V/lse (the stages
follow from them: `LayerTrace.stages`)."""

TOP_PREDICTIONS = 5


def model_info(name: str, trace: ModelTrace, *, architecture: str, positions: str) -> dict:
    """The model card every view shows: name, decoder/encoder, architecture, positional scheme (`positions`:
    its key in `texts.TEXTS`, written out in English and in Chinese), sizes."""
    first = trace.layers[0]
    return {
        "name": name,
        "kind": "decoder" if trace.logits is not None else "encoder",
        "architecture": architecture,
        "positions": texts.text(positions, "en"),
        "positions_zh": texts.text(positions, "zh"),
        "n_layers": trace.n_layers,
        "n_heads": first.n_heads,
        "n_kv_heads": int(first.k.shape[0]),
        "head_dim": int(first.q.shape[-1]),
        "d_model": int(first.x.shape[-1]),
    }


def predictions(trace: ModelTrace, decode, k: int = TOP_PREDICTIONS) -> list[dict]:
    """The k most likely next tokens after the whole text; `decode(id) -> str`."""
    if trace.logits is None:
        return []
    probs = torch.softmax(trace.logits[-1].double(), dim=-1)
    top = torch.topk(probs, min(k, probs.numel()))
    pairs = zip(top.values, top.indices, strict=True)
    return [{"token": decode(int(i)), "id": int(i), "prob": float(p)} for p, i in pairs]


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
    layers=None,
) -> dict:
    """Everything captured, as JSON-ready lists. `unknown`: {count, positions, message} of the tokens
    the tokenizer could not represent (never left out, so no view can hide them). `layers`: the layer
    indices whose arrays are written (default all); the others keep their scalars only."""
    with_stages = trace.layers[0].length <= STAGES_MAX_LEN if stages is None else stages
    wanted = check_layers(layers, trace.n_layers)
    out_layers = [
        _layer_dict(layer, with_stages) if index in wanted else _rule(layer) | {"omitted": True}
        for index, layer in enumerate(trace.layers)
    ]
    return {
        "selfattn_version": __version__,
        "model": model,
        "text": text,
        "tokens": list(trace.tokens),
        "token_ids": trace.token_ids.tolist(),
        "unknown": unknown,
        "intervention": trace.intervention.as_dict(),
        "interventions": interventions.as_data(),
        "experiment": {"applied": trace.intervention.as_applied()},
        "texts": texts.for_page(),
        "head_types": taxonomy.legend(),
        "selected": selected,
        "summaries": summaries,
        "prediction": prediction,
        "layers": out_layers,
    }


def _rule(layer: LayerTrace) -> dict:
    return {"scale": layer.scale, "causal": layer.causal, "softcap": layer.softcap, "window": layer.window}


def _layer_dict(layer: LayerTrace, with_stages: bool) -> dict:
    """One layer's arrays: its rule and visibility, X, the outputs, and per head Q/K/V/lse (+ stages)."""
    heads = []
    for h in range(layer.n_heads):
        kv = layer.kv_head(h)
        head = {
            "kv_head": kv,
            "q": _list(layer.q[h]),
            "k": _list(layer.k[kv]),
            "v": _list(layer.v[kv]),
            "lse": _list(layer.lse[h]),
        }
        change = layer.changed.get(h)
        if change is not None:
            head |= {
                "scale": change.scale,
                "softcap": change.softcap,
                "causal": change.causal,
                "visible": change.visible.int().tolist(),
            }
        if with_stages:
            st = layer.stages(h)
            head["stages"] = {name: _list(st[name]) for name in ("scores", "scaled", "masked", "weights", "weighted")}
        heads.append(head)
    arrays = {"x": _list(layer.x), "attn_out": _list(layer.attn_out), "output": _list(layer.output)}
    return _rule(layer) | {"visible": layer.visible.int().tolist()} | arrays | {"heads": heads}


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
        for h, head in enumerate(layer["heads"]):
            for name in ("q", "k", "v", "lse"):
                out[f"layer{l}/head{h}/{name}"] = _array(head[name])
            if "visible" in head:  # changed apart from its layer by an intervention
                out[f"layer{l}/head{h}/visible"] = np.array(head["visible"], dtype=bool)
                out[f"layer{l}/head{h}/scale"] = np.array(head["scale"])
            for name, values in head.get("stages", {}).items():
                out[f"layer{l}/head{h}/{name}"] = _array(values)
    return out


def head_weights(doc: dict, layer: int, head: int) -> np.ndarray:
    """Weights (L, L) of one head from the dict's q, k, lse, scale, softcap and visibility (the head's
    own, when an intervention changed it apart): `trace.head_stages`, the formula of `LayerTrace.stages`."""
    lay = doc["layers"][layer]
    h = lay["heads"][head]
    q, k, lse = (torch.from_numpy(_array(h[name])) for name in ("q", "k", "lse"))
    visible = torch.tensor(h.get("visible", lay["visible"]), dtype=torch.bool)
    rule = {"scale": h.get("scale", lay["scale"]), "softcap": h.get("softcap", lay.get("softcap"))}
    return head_stages(q, k, lse, visible=visible, **rule)["weights"].numpy()


def _list(t: torch.Tensor):
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
