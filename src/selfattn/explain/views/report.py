"""One HTML file that explains a real model's attention: `selfattn explain --html report.html`.

    html = render_html(doc)              # doc: the export dict of `Explainer.explain` / `export.to_dict`
    write_html(doc, "report.html")       # refuses to overwrite an existing file unless force=True

The page is self-contained: its CSS (`web/static/explorer.css`), its JavaScript — ES modules under
`web/static/`, one job each, inlined in dependency order as one script (`bundle.bundle`: why a bundle
is in its doc) — and the data are inlined; a Content-Security-Policy in the page runs only that
script and style (by hash) and forbids every network request (`connect-src 'none'`, no external
source of any kind), so it works offline, from the app, and inside an `<iframe srcdoc>`, and sends
nothing anywhere. The local web app (`web/server.py`) serves the same page in "live" mode (`render_app`).

The page's data block:

    {"mode": "report" | "live", "doc": pack(doc) | None, "texts": {key: {zh, en}}, "interventions": [...],
     "pick_rule": {zh, en}, and in live mode "limits" {max_chars, max_tokens}, "api", "error"}

`pack` (views/packing.py) gives every number the page shows, computed by Python at the precision it
is shown; `texts` holds the sentences the page's modules and template name (views/texts.py), so the
JS holds no sentence; `interventions` describes the controls the live page builds (contract 3).

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

from ...files import check_writable, write_atomic
from ..capture import interventions
from .bundle import bundle
from .heads import PICK_RULE
from .packing import pack, unpack
from .texts import TEXTS, text

__all__ = ["render_html", "render_app", "write_html", "pack", "unpack", "policy", "page_texts", "script", "STATIC_DIR"]

STATIC_DIR = Path(__file__).resolve().parents[1] / "web" / "static"
PAGE, ENTRY, STYLE = "explorer.html", "main.js", "explorer.css"
TITLE_CHARS = 40

_SLOT = re.compile(r"\{\{(TITLE|CSP|STYLE|SCRIPT|DATA|NOSCRIPT)\}\}")
_TEXT_KEY = re.compile(r"""["'](\w+)["']""")


# --- the page ------------------------------------------------------------------------------


def render_html(doc: dict) -> str:
    """The self-contained report for one export dict (no network request, ever)."""
    return _page({"mode": "report", "doc": pack(doc)}, live=False)


def render_app(
    doc: dict | None,
    *,
    max_chars: int,
    max_tokens: int,
    api: str = "/api/explain",
    error: str | None = None,
) -> str:
    """The same page in "live" mode for `selfattn serve`: a text box and interventions that call `api`.

    doc    the first text's export dict (shown at once), or None
    error  a message to show on load (for example why a `?text=` was refused)
    """
    data = {
        "mode": "live",
        "doc": None if doc is None else pack(doc),
        "limits": {"max_chars": int(max_chars), "max_tokens": int(max_tokens)},
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
    return _policy(script(), _static(STYLE), "'self'" if live else "'none'")


@functools.cache
def script() -> str:
    """The page's modules as the one inline script (`bundle.bundle` from web/static/main.js)."""
    return bundle(STATIC_DIR, ENTRY)


@functools.cache
def page_texts() -> dict[str, dict[str, str]]:
    """The texts the page names: every TEXTS key written as a string in its modules or as a
    data-i18n attribute of its template (the JS passes keys only as string literals)."""
    named = set(_TEXT_KEY.findall(script())) | set(re.findall(r'data-i18n="(\w+)"', _static(PAGE)))
    return {key: TEXTS[key] for key in sorted(named & TEXTS.keys())}


def _policy(script: str, style: str, connect: str) -> str:
    return (
        "default-src 'none'; "
        f"script-src '{_sha256(script)}'; style-src '{_sha256(style)}'; "
        f"img-src data: blob:; connect-src {connect}; base-uri 'none'; form-action 'none'"
    )


def _page(data: dict, *, live: bool) -> str:
    template, style = _static(PAGE), _static(STYLE)
    doc = data.get("doc") or {}
    data = data | {"texts": page_texts(), "interventions": interventions.as_data(), "pick_rule": PICK_RULE}
    title = text("page_title", "zh")
    if doc:
        shown = str(doc.get("text", ""))
        title = f"{shown[:TITLE_CHARS]}{'…' if len(shown) > TITLE_CHARS else ''} · {title}"
    slots = {
        "TITLE": html.escape(title),
        "CSP": html.escape(policy(live=live)),
        "STYLE": style,
        "SCRIPT": script(),
        "DATA": _json_for_script(data),
        "NOSCRIPT": html.escape(" / ".join(text("noscript", lang) for lang in ("zh", "en"))),
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
