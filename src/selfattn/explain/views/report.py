"""One HTML file that explains a real model's attention: `selfattn explain --html report.html`.

    html = render_html(doc)              # doc: the export dict of `Explainer.explain` / `export.to_dict`
    write_html(doc, "report.html")       # refuses to overwrite an existing file unless force=True

The page is self-contained: the explorer's CSS and JS (package files `static/explorer.css`
and `static/explorer.js`) and the data are inlined; a Content-Security-Policy in the page
forbids every network request (`connect-src 'none'`, no external source of any kind), so it
works offline and sends nothing anywhere. The local web app (`server.py`) serves the same
page and the same JS in "live" mode (`render_app`).

The data is the export dict itself, with its large float arrays packed (`pack`):

    {"dtype": "f32" | "f64", "shape": [...], "b64": little-endian bytes in base64}
    {"dtype": "bits", "shape": [L, L], "b64": np.packbits, row-major, first element = high bit}

float32 is used only where it holds every value exactly, so nothing is rounded on the way.
The N×N `stages` are left out: the page recomputes every stage of the selected query row
from q, k, v, lse, scale and visible with the formulas of `LayerTrace.stages`, so a short
and a 1,000-token input go through one code path.

Token text never becomes markup: the JSON is embedded with `<`, `>` and `&` escaped as
`\\u003c`-style sequences (no token can close the `<script>` that holds it), and the JS
writes token text with `textContent` only.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
import os
import re
from pathlib import Path

import numpy as np

from ...files import check_writable, write_atomic
from ..export import restore_inf
from ..heads import PICK_RULE
from ..trace import TEMPERATURE_RANGE

__all__ = ["render_html", "render_app", "write_html", "pack", "unpack", "policy", "STATIC_DIR"]

STATIC_DIR = Path(__file__).resolve().parents[1] / "web" / "static"
PAGE, SCRIPT, STYLE = "explorer.html", "explorer.js", "explorer.css"

LAYER_ARRAYS = ("x", "attn_out", "output")
HEAD_ARRAYS = ("q", "k", "v", "lse")
TITLE_CHARS = 40
REQUIRED = ("tokens", "model", "intervention", "selected", "summaries", "prediction", "layers")

_SLOT = re.compile(r"\{\{(TITLE|CSP|STYLE|SCRIPT|DATA)\}\}")


# --- packing ---------------------------------------------------------------------------------


def pack(doc: dict) -> dict:
    """A copy of the export dict with float arrays as base64 and without the N×N `stages`."""
    if not isinstance(doc, dict):
        raise TypeError(f"doc must be the export dict of Explainer.explain, got {type(doc).__name__}")
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise ValueError(f"doc lacks {missing}: pass the dict of Explainer.explain / export.to_dict")
    layers = []
    for l, layer in enumerate(doc["layers"]):
        if layer.get("omitted"):  # asked without this layer's arrays
            layers.append(dict(layer))
            continue
        out = {k: v for k, v in layer.items() if k not in LAYER_ARRAYS + ("visible", "heads")}
        for name in LAYER_ARRAYS:
            out[name] = _pack_floats(layer[name], f"layers[{l}].{name}")
        out["visible"] = _pack_bits(layer["visible"], f"layers[{l}].visible")
        out["heads"] = []
        for h, head in enumerate(layer["heads"]):
            packed = {k: v for k, v in head.items() if k not in HEAD_ARRAYS + ("stages", "visible")}
            for name in HEAD_ARRAYS:
                packed[name] = _pack_floats(head[name], f"layers[{l}].heads[{h}].{name}")
            if "visible" in head:  # a head an intervention changed apart from its layer
                packed["visible"] = _pack_bits(head["visible"], f"layers[{l}].heads[{h}].visible")
            out["heads"].append(packed)
        layers.append(out)
    return {**doc, "layers": layers}


def unpack(packed) -> np.ndarray:
    """One packed array back as NumPy (float64, or bool for "bits"): the inverse of `pack`'s encoding."""
    raw = base64.b64decode(packed["b64"])
    shape = tuple(packed["shape"])
    if packed["dtype"] == "bits":
        n = int(np.prod(shape))
        return np.unpackbits(np.frombuffer(raw, dtype=np.uint8))[:n].astype(bool).reshape(shape)
    dtype = {"f32": "<f4", "f64": "<f8"}[packed["dtype"]]
    return np.frombuffer(raw, dtype=dtype).astype(np.float64).reshape(shape)


def _pack_floats(values, where: str) -> dict:
    a = np.array(restore_inf(values), dtype=np.float64)
    if a.dtype != np.float64 or a.ndim == 0:
        raise ValueError(f"{where} is not a numeric array")
    if np.isnan(a).any():
        raise ValueError(f"{where} holds NaN")
    with np.errstate(over="ignore"):
        exact32 = bool(np.array_equal(a.astype(np.float32).astype(np.float64), a))
    dtype, code = ("<f4", "f32") if exact32 else ("<f8", "f64")
    return {"dtype": code, "shape": list(a.shape), "b64": base64.b64encode(a.astype(dtype).tobytes()).decode("ascii")}


def _pack_bits(values, where: str) -> dict:
    a = np.asarray(values)
    if a.ndim != 2 or not np.isin(a, (0, 1)).all():
        raise ValueError(f"{where} must be an L×L matrix of 0/1")
    bits = np.packbits(a.astype(bool).ravel())
    return {"dtype": "bits", "shape": list(a.shape), "b64": base64.b64encode(bits.tobytes()).decode("ascii")}


# --- the page ------------------------------------------------------------------------------


def render_html(doc: dict) -> str:
    """The self-contained report for one export dict (no network request, ever)."""
    return _page({"mode": "report", "doc": pack(doc), "pick_rule": PICK_RULE}, live=False)


def render_app(
    doc: dict | None,
    *,
    max_chars: int,
    max_tokens: int,
    api: str = "/api/explain",
    error: str | None = None,
    temperature: tuple[float, float] = TEMPERATURE_RANGE,
) -> str:
    """The same page in "live" mode for `selfattn serve`: a text box and interventions that call `api`.

    doc    the first text's export dict (shown at once), or None
    error  a message to show on load (for example why a `?text=` was refused)
    temperature  (lowest, highest) temperature the server accepts: the page checks and shows these
    """
    low, high = (float(t) for t in temperature)
    data = {
        "mode": "live",
        "doc": None if doc is None else pack(doc),
        "pick_rule": PICK_RULE,
        "limits": {"max_chars": int(max_chars), "max_tokens": int(max_tokens)},
        "temperature": {"min": low, "max": high},
        "api": api,
        "error": error,
    }
    return _page(data, live=True)


def write_html(doc: dict, path: str | os.PathLike, *, force: bool = False) -> Path:
    """Write `render_html(doc)` to path (UTF-8) atomically: a temporary file in the same folder, then a
    rename, so a failure leaves no half-written page. An existing file is kept unless force=True."""
    check_writable(path, force=force)  # refused before the page is rendered
    return write_atomic(path, render_html(doc), force=force)


@functools.cache
def policy(*, live: bool) -> str:
    """The page's Content-Security-Policy: only its own inline script and style (by hash) run;
    the report may connect nowhere, the live page only to the server that sent it. Computed once
    per mode (the files ship with the package: `_static`)."""
    return _policy(_static(SCRIPT), _static(STYLE), "'self'" if live else "'none'")


def _policy(script: str, style: str, connect: str) -> str:
    return (
        "default-src 'none'; "
        f"script-src '{_sha256(script)}'; style-src '{_sha256(style)}'; "
        f"img-src data: blob:; connect-src {connect}; base-uri 'none'; form-action 'none'"
    )


def _page(data: dict, *, live: bool) -> str:
    template, script, style = (_static(name) for name in (PAGE, SCRIPT, STYLE))
    doc = data.get("doc") or {}
    title = "Self-Attention 是什么"
    if doc:
        text = str(doc.get("text", ""))
        title = f"{text[:TITLE_CHARS]}{'…' if len(text) > TITLE_CHARS else ''} · {title}"
    slots = {
        "TITLE": html.escape(title),
        "CSP": html.escape(policy(live=live)),
        "STYLE": style,
        "SCRIPT": script,
        "DATA": _json_for_script(data),
    }
    # One pass: text put into a slot is never searched for further slots.
    return _SLOT.sub(lambda m: slots[m.group(1)], template)


def _json_for_script(data) -> str:
    """JSON that cannot end its <script> element: <, > and & become \\u escapes (JSON.parse reads them back)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


@functools.cache
def _static(name: str) -> str:
    """A package file of the page, read once per process (they ship with the package and do not change)."""
    return (STATIC_DIR / name).read_text(encoding="utf-8")
