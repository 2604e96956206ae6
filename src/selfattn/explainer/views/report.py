"""One HTML file that explains a real model's attention: `selfattn explain --html report.html`.

    html = render_html(doc)              # doc: the page's document of an Explanation (`export.document`)
    html = render_html(doc, compare=doc2, start={"view": "compare"})   # two texts side by side
    write_html(doc, "report.html")       # refuses to overwrite an existing file unless force=True
    html = render_attention(weights, tokens, view="head")   # attention given directly (views.notebook)

The page is self-contained: its CSS (`web/static/explorer.css`), its JavaScript — ES modules under
`web/static/`, one job each, inlined in dependency order as one script (`bundle.bundle`: why a bundle
is in its doc) — and the data are inlined; a Content-Security-Policy in the page runs only that
script and style (by hash) and forbids every network request (`connect-src 'none'`, no external
source of any kind), so it works offline, from the app, and inside an `<iframe srcdoc>`, and sends
nothing anywhere. The local web app (`web/server.py`) serves the same page in "live" mode (`render_app`).

The page's data block:

    {"mode": "report" | "live", "doc": doc | None, "texts": {key: {zh, en}}, "interventions": [...],
     "pick_rule": {zh, en}, "views": [the page's `registry` entries: its tabs and panes],
     "compare": doc2 (the compare view's second text) | absent,
     "start": {"view", "layer", "head", "query"} (what opens first; the URL hash wins) | absent,
     and in live mode "limits" {max_chars, max_tokens}, "api", "error"}

The attention page (`render_attention`, entry `attention.js`, template `attention.html`) shows only the
head view and the model view of weights given directly (no Q/K/V, so no stages):

    {"mode": "attention", "tokens": [...], "weights": pack_weights((layers, heads, L, L)),
     "types": [[type | None per head] per layer], "head_types": legend(), "start": {...}, "texts": {...}}

The document's layers (`packing`, views/packing.py) hold every number the page shows, computed by Python at the
precision it is shown; `texts` holds the sentences the page's modules and template name (the catalogue,
explainer/locale), so the JS holds no sentence; `interventions` describes the controls the live page builds
(contract 3).

Token text never becomes markup: the JSON is embedded with `<`, `>` and `&` escaped as
`\\u003c`-style sequences (no token can close the `<script>` that holds it), and the JS
writes token text with `textContent` only.
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import os
import re
import secrets
from pathlib import Path

from ... import checks
from ...files import check_writable, write_atomic
from .. import interventions
from . import registry
from .bundle import bundle
from .codec import base64_text
from .head_sentences import PICK_RULE
from .packing import head_type_names, pack_weights, unpack
from .texts import TEXTS, text
from .type_legend import legend

__all__ = [
    "render_html",
    "render_app",
    "render_attention",
    "write_html",
    "unpack",
    "policy",
    "page_texts",
    "script",
    "template",
    "STATIC_DIR",
]

STATIC_DIR = Path(__file__).resolve().parents[1] / "web" / "static"
PAGE, ENTRY, STYLE = "explorer.html", "main.js", "explorer.css"
ATTENTION_PAGE, ATTENTION_ENTRY = "attention.html", "attention.js"
SHELL, BODY_MARK = "page.html", "\n<!-- body -->\n"
TITLE_CHARS = 40

_SLOT = re.compile(r"\{\{(TITLE|CSP|STYLE|SCRIPT|DATA|NOSCRIPT)\}\}")
_TEXT_KEY = re.compile(r"""["']([a-z_]+\.[\w.]+)["']""")


# --- the page ------------------------------------------------------------------------------


PAGE_KEYS = ("tokens", "model", "experiment", "selected", "summaries", "prediction", "layers", "scale_words")
"""What a page's document holds at least (`export.document` with display: its layers packed, the page's words)."""


def _page_doc(doc) -> dict:
    """`doc` if it is a page's document; else a TypeError or ValueError naming what it is or lacks."""
    if not isinstance(doc, dict):
        raise TypeError(f"doc must be a page's document (export.document of an Explanation), not {type(doc).__name__}")
    missing = [k for k in PAGE_KEYS if k not in doc]
    if missing:
        raise ValueError(f"doc lacks {missing}: pass the page's document of an Explanation (export.document)")
    return doc


def render_html(doc: dict, *, compare: dict | None = None, start: dict | None = None) -> str:
    """The self-contained report for one page's document (`export.document`; no network request, ever).

    compare  a second document (another text, same model): the compare view shows both on one head
    start    {"view", "layer", "head", "query"} (any of them): what the page opens on (see `check_start`)
    """
    data = {"mode": "report", "doc": _page_doc(doc)}
    if compare is not None:
        data["compare"] = _page_doc(compare)
    if start is not None:
        data["start"] = check_start(start, registry.names("explorer", other=compare is not None))
    return _page(data, live=False)


def render_attention(
    weights,
    tokens: list[str],
    *,
    start: dict | None = None,
    causal: bool | None = None,
    lang: str = "zh",
    layer_numbers: list[int] | None = None,
) -> str:
    """The attention page: head view and model view of weights given directly.

    weights  (layers, heads, L, L) NumPy float64 in [0, 1], checked by the caller (`views.notebook`)
    tokens   L strings
    start    as `check_start`, and "heads": the heads the head view draws first (a list)
    causal   whether the head types are measured as a decoder's (None: when no weight is above the diagonal)
    lang     the page's language first, "zh" or "en" (a button switches it)
    layer_numbers  the model's number of each layer given (default 0, 1, …), shown and linked (start's layer too)
    """
    import numpy as np

    if lang not in ("zh", "en"):
        raise ValueError(f"lang must be 'zh' or 'en', got {lang!r}")
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 4 or w.shape[2:] != (len(tokens), len(tokens)):
        raise ValueError(f"weights must be (layers, heads, L, L) with L = {len(tokens)} tokens, got {w.shape}")
    if causal is None:
        causal = not np.triu(w, k=1).any()
    ids = [list(tokens).index(tok) for tok in tokens]
    data = {
        "mode": "attention",
        "tokens": [str(tok) for tok in tokens],
        "weights": pack_weights(w),
        "types": [head_type_names(layer, ids, causal=causal) for layer in w],
        "head_types": legend(),
        "start": _attention_start(start or {"view": "head"}),
        "lang": lang,
        "layer_numbers": list(range(w.shape[0])) if layer_numbers is None else [int(n) for n in layer_numbers],
    }
    if len(data["layer_numbers"]) != w.shape[0]:
        raise ValueError(f"layer_numbers must name each of the {w.shape[0]} layers, got {layer_numbers!r}")
    return _page(data, live=False, page=ATTENTION_PAGE, entry=ATTENTION_ENTRY)


def _attention_start(start: dict) -> dict:
    """`check_start` for the attention page, which also takes "heads" (the heads drawn first)."""
    rest = {k: v for k, v in start.items() if k != "heads"} if isinstance(start, dict) else start
    out = check_start(rest, registry.names("attention"))
    if isinstance(start, dict) and start.get("heads") is not None:
        out["heads"] = [checks.integer(f"heads[{i}]", h, low=0) for i, h in enumerate(start["heads"])]
    return out


def check_start(start: dict, views) -> dict:
    """{"view", "layer", "head", "query"}: view one of `views`, the others integers ≥ 0 (the page checks
    them against the data's sizes, as it checks the URL hash); anything else is a ValueError naming it."""
    if not isinstance(start, dict):
        raise TypeError(f"start must be a dict, got {type(start).__name__}")
    out = {}
    for key, value in start.items():
        if key == "view":
            if value not in views:
                raise ValueError(f"view must be one of {', '.join(views)}, got {value!r}")
            out[key] = value
        elif key in ("layer", "head", "query"):
            if value is not None:
                out[key] = checks.integer(key, value, low=0)
        else:
            raise ValueError(f"unknown start key {key!r}: use view, layer, head, query")
    return out


def render_app(
    doc: dict | None,
    *,
    max_chars: int,
    max_tokens: int,
    api: str = "/api/explain",
    error: str | None = None,
) -> str:
    """The same page in "live" mode for `selfattn serve`: a text box and interventions that call `api`.

    doc    the first text's page document (`export.document`: shown at once), or None
    error  a message to show on load (for example why a `?text=` was refused)
    """
    data = {
        "mode": "live",
        "doc": None if doc is None else _page_doc(doc),
        "limits": {"max_chars": int(max_chars), "max_tokens": int(max_tokens)},
        "api": api,
        "error": error,
    }
    return _page(data, live=True)


def write_html(
    doc: dict, path: str | os.PathLike, *, force: bool = False, compare: dict | None = None, start: dict | None = None
) -> Path:
    """Write `render_html(doc, compare=, start=)` to path (UTF-8) atomically: a temporary file in the same
    folder, then a rename, so a failure leaves no half-written page. An existing file is kept unless force=True."""
    check_writable(path, force=force)  # refused before the page is rendered
    return write_atomic(path, render_html(doc, compare=compare, start=start), force=force)


@functools.cache
def policy(*, live: bool, entry: str = ENTRY) -> str:
    """The page's Content-Security-Policy: only its own inline script and style (by hash) run;
    the report may connect nowhere, the live page only to the server that sent it. Computed once
    per mode and entry (the files ship with the package: `_static`)."""
    return _policy(script(entry), _static(STYLE), "'self'" if live else "'none'")


@functools.cache
def script(entry: str = ENTRY) -> str:
    """The page's modules as the one inline script (`bundle.bundle` from web/static/main.js, or the
    attention page's attention.js)."""
    return bundle(STATIC_DIR, entry)


@functools.cache
def page_texts(entry: str = ENTRY, page: str = PAGE) -> dict[str, dict[str, str]]:
    """The texts the page names: every TEXTS key written as a string in its modules or
    as a data-i18n attribute of its template (the JS passes keys only as string literals)."""
    named = set(_TEXT_KEY.findall(script(entry))) | set(re.findall(r'data-i18n="([\w.]+)"', template(page)))
    return {key: TEXTS[key] for key in sorted(named & TEXTS.keys())}


def _policy(script: str, style: str, connect: str) -> str:
    return (
        "default-src 'none'; "
        f"script-src '{_sha256(script)}'; style-src '{_sha256(style)}'; "
        f"img-src data: blob:; connect-src {connect}; base-uri 'none'; form-action 'none'"
    )


def template(page: str = PAGE) -> str:
    """A page's whole template: the shell both pages share (page.html: the head, the header with the language
    button, the data and script slots) around the page file's heading and body (split at BODY_MARK)."""
    heading, body = _static(page).split(BODY_MARK)
    return _static(SHELL).replace("{{HEADING}}", heading, 1).replace("{{BODY}}", body.removesuffix("\n"), 1)


def _page(data: dict, *, live: bool, page: str = PAGE, entry: str = ENTRY) -> str:
    style = _static(STYLE)
    doc = data.get("doc") or {}
    data = data | {
        "texts": page_texts(entry, page),
        "interventions": interventions.as_data(),
        "pick_rule": PICK_RULE,
        "views": registry.as_data("explorer" if page == PAGE else "attention"),
    }
    title = text("page.page_title", "zh") if page == PAGE else TEXTS["page.attention_weights"]["zh"]
    if doc:
        shown = str(doc.get("text", ""))
        title = f"{shown[:TITLE_CHARS]}{'…' if len(shown) > TITLE_CHARS else ''} · {title}"
    slots = {
        "TITLE": html.escape(title),
        "CSP": html.escape(policy(live=live, entry=entry)),
        "STYLE": style,
        "SCRIPT": script(entry),
        "DATA": _json_for_script(data),
        "NOSCRIPT": html.escape(" / ".join(text("page.noscript", lang) for lang in ("zh", "en"))),
    }
    # One pass: text put into a slot is never searched for further slots.
    return _SLOT.sub(lambda m: slots[m.group(1)], template(page))


def _json_for_script(data) -> str:
    """JSON that cannot end its <script> element: <, > and & become \\u escapes (JSON.parse reads them back).

    The packed arrays' base64 (most of a page's bytes, and only A–Z a–z 0–9 + / =: nothing to escape) is left
    out of the encoding and the escaping and joined back in afterwards, at a placeholder no text can hold (a
    random one per call)."""
    mark = f"selfattn-b64-{secrets.token_hex(16)}"
    blobs: list[str] = []
    light = _without_blobs(data, mark, blobs)
    text = json.dumps(light, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    parts = text.split(f'"{mark}"')
    if len(parts) != len(blobs) + 1:  # cannot happen: the mark is random
        raise RuntimeError("a packed array's placeholder occurs in the page's data")
    joined = (piece for part, blob in zip(parts, blobs, strict=False) for piece in (part, '"', blob, '"'))
    return "".join(joined) + parts[-1]


BLOB_CHARS = 256
"""Base64 strings at least this long are joined in after the encoding (`_json_for_script`); shorter ones are
encoded as any string."""
_BASE64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


def _is_base64(value: str) -> bool:
    return value.isascii() and not value.encode("ascii").translate(None, _BASE64)


def _without_blobs(x, mark: str, blobs: list[str]):
    """x with every long base64 string under a "b64" key replaced by `mark` (appended to `blobs`, in the order
    `json.dumps` writes them: dicts and lists in their own order)."""
    if isinstance(x, dict):
        out = {}
        for key, value in x.items():
            if key == "b64" and isinstance(value, str) and len(value) >= BLOB_CHARS and _is_base64(value):
                blobs.append(value)
                out[key] = mark
            else:
                out[key] = _without_blobs(value, mark, blobs)
        return out
    if isinstance(x, (list, tuple)):
        return [_without_blobs(v, mark, blobs) for v in x]
    return x


def _sha256(text: str) -> str:
    return "sha256-" + base64_text(hashlib.sha256(text.encode("utf-8")).digest())


@functools.cache
def _static(name: str) -> str:
    """A package file of the page, read once per process (they ship with the package and do not change)."""
    return (STATIC_DIR / name).read_text(encoding="utf-8")
