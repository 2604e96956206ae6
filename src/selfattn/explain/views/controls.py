"""The page's intervention controls as data, for today's three interventions (`trace.Intervention`).

    interventions()              -> [{name, label {zh, en}, params [{name, type, min, max, default, label}],
                                      needs_baseline}]          what the page builds its controls from
    applied(doc["intervention"]) -> {name: {param: value}, "layer": L | None, "head": H | None}
    scale_words(doc["intervention"], head_dim) -> {stage, row, how}: {zh, en} each, the words of the ÷√d_k step

The shape is contract 3's (the registry of `capture/interventions.py` as data); this module adapts
`Intervention`'s three fields to it until that registry exists, and is then replaced by it. An
intervention is applied when one of its parameters differs from its default; a parameter is named
after the request field today's server reads (`server.ExplainRequest`), so the page's request is
those fields (`web/static/live.js`: `interventionFields`).
"""

from __future__ import annotations

from ..trace import TEMPERATURE_RANGE, Intervention
from .texts import LANGS, TEXTS, text

__all__ = ["interventions", "applied", "scale_words"]


def _words(key: str, **values) -> dict[str, str]:
    return {lang: text(key, lang, **values) for lang in LANGS}


def _labels(key: str) -> dict[str, str]:
    """The raw texts (placeholders kept): the page fills them with the parameters' values."""
    return dict(TEXTS[key])


def interventions() -> list[dict]:
    """Today's three interventions, each with one parameter: ÷√d_k on/off, the causal rule on/off, T."""
    low, high = TEMPERATURE_RANGE
    default = Intervention()
    return [
        {
            "name": "scaling",
            "label": _labels("iv_scaling"),
            "params": [_param("scaling", "bool", default.scaling)],
            "needs_baseline": True,
        },
        {
            "name": "causal",
            "label": _labels("iv_causal"),
            "params": [_param("causal", "bool", default.causal)],
            "needs_baseline": True,
        },
        {
            "name": "temperature",
            "label": _labels("iv_temperature"),
            "params": [_param("temperature", "float", float(default.temperature), low=float(low), high=float(high))],
            "needs_baseline": True,
        },
    ]


def _param(name: str, kind: str, default, *, low=None, high=None) -> dict:
    return {"name": name, "type": kind, "min": low, "max": high, "default": default, "label": _words(f"param_{name}")}


def applied(intervention: dict) -> dict:
    """The interventions of an export dict's `intervention` {scaling, causal, temperature, layer?, head?}
    whose parameters differ from their defaults, as {name: {param: value}}, and the scope (layer, head)."""
    out: dict = {}
    for entry in interventions():
        values = {p["name"]: intervention.get(p["name"], p["default"]) for p in entry["params"]}
        if any(values[p["name"]] != p["default"] for p in entry["params"]):
            out[entry["name"]] = values
    return out | {"layer": intervention.get("layer"), "head": intervention.get("head")}


def scale_words(intervention: dict, head_dim: int) -> dict[str, dict[str, str]]:
    """The words of the ÷√d_k step for this intervention: the step's and the table row's name, and what
    the scale is (1/√d_k, 1/(√d_k·T), 1, 1/T)."""
    scaling = bool(intervention.get("scaling", True))
    t = float(intervention.get("temperature", 1.0))
    how = ("scale_on" if scaling else "scale_off") + ("" if t == 1 else "_t")
    return {
        "stage": _words("st_scaled" if scaling else "st_scaled_off"),
        "row": _words("row_scaled" if scaling else "row_scaled_off"),
        "how": _words(how, d=head_dim, t=_number(t)),
    }


def _number(x: float) -> str:
    """A number as JavaScript's String(x) writes it (1, 2, 0.37): what the page showed for T."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))
