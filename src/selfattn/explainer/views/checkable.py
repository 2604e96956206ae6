"""What `selfattn explain --json` prints, the app's `format: "json"` answer and `Explanation.to_json()`: what the
command says plus the numbers a person needs to check it, bounded; and `--npz`: every captured tensor of the
layers asked. Both serialize an `Explanation` (`result`); docs/json.md documents the JSON field by field.

    doc = json_document(e)                    # the shown layer's weights; every head's answer and scores
    doc = json_document(e, layers=[3, 18])    # those layers' weights instead
    arrays = npz_arrays(e, layers=None)       # every layer: x, q, k, v, lse, visible, weights, outputs, …

The JSON is the page's document (`export.document`) without its arrays: each layer keeps its rule (scale,
causal, softcap, window, per-head features) and, where held, every head's weights [H][L][L] rounded to
WEIGHT_DIGITS; the shown head's stages (scores, scaled, masked, weights, weighted) up to `export.STAGES_MAX_LEN`
tokens; the shown head's contributions ‖α_ij · v_j W_O^h‖ [L][L] (`views.contribution_words`) rounded to WEIGHT_DIGITS;
every head's summary and sentence; every relation credited to a head with the evidence it rests on (`relations`:
the text's, its control's and contrast sentences' query word, key word, weight and what the other words give the
key); the predictions, the experiments. Infinite values are the strings
"-inf"/"inf", so it stays standard JSON.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from ... import __version__
from ...limits import JSON_NUMBER_BYTES
from ...scores import PER_HEAD
from ..analysis.verdicts import every_relation
from . import export
from .contribution_words import values as contribution_values
from .packing import layer_rule

if TYPE_CHECKING:
    from ..result import Explanation
    from ..trace_types import LayerTrace

__all__ = ["JSON_SCHEMA", "WEIGHT_DIGITS", "json_document", "npz_arrays", "layer_weights", "weights_bytes"]

JSON_SCHEMA = "selfattn.explain.json/2"
"""The version of the --json layout (docs/json.md); a change of a field's meaning or place changes it."""
WEIGHT_DIGITS = 6
"""Decimals of the weights in the JSON: every shown weight (the page and the terminal print at most 4) is exact."""


def json_document(e: Explanation, *, layers=None, lang: str | None = None) -> dict:
    """The --json answer of `e` (see the module doc). layers: the indices whose weights it holds (None: the shown
    layer); lang: the language its sentences are read in (doc["lang"]; both languages' are in it either way)."""
    held = {e.shown.layer} if layers is None else export.check_layers(layers, e.card.n_layers)
    doc = export.document(e, layers=[], lang=lang, display=False)  # every layer's rule, no array
    doc["schema"] = JSON_SCHEMA
    doc["layers"] = [_layer(e, l, l in held) for l in range(e.card.n_layers)]
    if "contributions" in doc:  # the shown head's ‖α_ij · v_j W_O^h‖, beside its weights
        doc["contributions"]["values"] = contribution_values(e, WEIGHT_DIGITS)
    doc["relations"] = every_relation(e.answers.descriptions)  # each credited relation with its evidence
    if len(e.tokens) <= export.STAGES_MAX_LEN:
        stages = e.trace.layers[e.shown.layer].stages(e.shown.head)
        doc["stages"] = {"layer": e.shown.layer, "head": e.shown.head} | {
            name: export.json_list(stages[name]) for name in ("scores", "scaled", "masked", "weights", "weighted")
        }
    return doc


def weights_bytes(e: Explanation, *, layers=None) -> int:
    """About how many bytes the weights of `json_document(e, layers=layers)` take (each at most WEIGHT_DIGITS + 4
    characters), its shown head's stages included: its bound, known before a weight is computed."""
    held = 1 if layers is None else len(export.check_layers(layers, e.card.n_layers))
    L = len(e.tokens)
    stages = 5 * L * L * JSON_NUMBER_BYTES if L <= export.STAGES_MAX_LEN else 0
    contributions = L * L * (WEIGHT_DIGITS + 6)  # the shown head's, values up to 9999
    return held * e.card.n_heads * L * L * (WEIGHT_DIGITS + 4) + stages + contributions


def _layer(e: Explanation, l: int, held: bool) -> dict:
    layer = e.trace.layers[l]
    out = layer_rule(layer) | {"held": held}
    if held:
        out["weights"] = np.round(layer_weights(layer).numpy(), WEIGHT_DIGITS).tolist()
    return out


def npz_arrays(e: Explanation, *, layers=None) -> dict[str, np.ndarray]:
    """Every captured tensor of the layers asked (None: every layer) as flat named arrays for `np.savez`: per layer
    x, attn_out, output (L, d_model), visible (L, L), scale, softcap, the per-head features, weights (H, L, L)
    float64; per head q (L, D), k, v (its key/value head's), lse (L,), sink; a head an intervention changed apart
    its own visible and scale. Strings as unicode arrays."""
    held = set(range(e.card.n_layers)) if layers is None else export.check_layers(layers, e.card.n_layers)
    out = {
        "selfattn_version": np.array(__version__),
        "model_name": np.array(e.card.name),
        "text": np.array(e.text),
        "tokens": np.array(list(e.tokens.labels)),
        "token_ids": e.tokens.ids.numpy().astype(np.int64),
        "unknown_positions": np.array(e.tokens.unknown["positions"], dtype=np.int64),
        "layers": np.array(sorted(held), dtype=np.int64),
    }
    for l in sorted(held):
        layer = e.trace.layers[l]
        for name in ("x", "attn_out", "output"):
            out[f"layer{l}/{name}"] = _numpy(getattr(layer, name))
        out[f"layer{l}/visible"] = layer.visible.bool().numpy()
        out[f"layer{l}/scale"] = np.array(layer.scale)
        if layer.softcap is not None:
            out[f"layer{l}/softcap"] = np.array(layer.softcap)
        for name in PER_HEAD:
            if name in layer.features:
                out[f"layer{l}/{name}"] = _numpy(layer.features[name])
        out[f"layer{l}/weights"] = layer_weights(layer).numpy()
        for h in range(layer.n_heads):
            kv = layer.kv_head(h)
            for name, value in (("q", layer.q[h]), ("k", layer.k[kv]), ("v", layer.v[kv]), ("lse", layer.lse[h])):
                out[f"layer{l}/head{h}/{name}"] = _numpy(value)
            sink = layer.sink(h)
            if sink is not None:
                out[f"layer{l}/head{h}/sink"] = _numpy(sink)
            change = layer.changed.get(h)
            if change is not None:
                out[f"layer{l}/head{h}/visible"] = change.visible.bool().numpy()
                out[f"layer{l}/head{h}/scale"] = np.array(change.scale)
    return out


def layer_weights(layer: LayerTrace) -> torch.Tensor:
    """(H, L, L) float64: every head's weights, a head an intervention changed apart with its own rule."""
    H, L = layer.n_heads, layer.length
    out = torch.empty(H, L, L, dtype=torch.float64)
    plain = [h for h in range(H) if h not in layer.changed]
    if plain:
        out[plain] = layer.weights(plain)
    for h in layer.changed:
        out[h] = layer.stages(h, weighted=False)["weights"]
    return out


def _numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor as NumPy in its own precision (half precisions widened to float32, which NumPy files hold)."""
    t = t.detach().cpu()
    return (t.float() if t.dtype in (torch.bfloat16, torch.float16) else t).numpy()
