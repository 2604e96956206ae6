"""The local web explorer: `selfattn serve` (FastAPI + uvicorn, 127.0.0.1 by default).

    GET  /               the explorer page in live mode (the same page and JS as the HTML report);
                         `?text=…` opens it on that text
    POST /api/explain    {text, layer?, head?, interventions?: {name: {param: value}, layer?, head?}, format?,
                          layers?, find?, ablate?, ablate_mode?, patch?, lens?}  (`body.ExplainRequest`, generated
                          from the interventions' registry)
                         -> the page document (interventions.layer / .head limit the interventions to one layer /
                            head; the top-level layer / head name the head to show; without them the head an
                            intervention is limited to is shown, or the first head ablated: selected.rule says so)

The body is a `pipeline.Spec` (`body.ExplainRequest.request`), answered by `pipeline.explain`, the one path of `selfattn
explain` and of the Python API, so the same request gives the same dict from all three. The experiments
(`ablate`, `patch`, `lens`) add doc["ablation"], doc["patching"], doc["lens"], exactly the export's dicts. Their
results are kept (the pipeline's results: by experiment, text and arguments, and for the lens the intervention),
so asking again — the page re-asks on every change of an intervention — costs nothing; the lens reads the
text's trace from the trace cache. A request with `patch` runs in the heavy lane, whatever its length (2 ×
layers batched passes).

`format` is "json" (default: the dict of `Explainer.explain`, exactly what `selfattn explain --json`
prints) or "packed" (the page's document: `export.document`, its layers packed as the page reads them).

Responses are sized by what the view needs: `layers` names the layers whose arrays are sent (the
others keep their scalars; summaries, descriptions and predictions always cover every layer). Its
default is every layer for "json" and only the shown layer for "packed" (the page asks for another
layer when you pick it). A request that names `layers` gets no `experiment` (no second run without
the intervention): the page asks for its baseline itself. `find: [query, key]` adds the head search
(`heads.search`, the one copy: with `layers: []` the answer is the ranking and the scalars only).

One forward pass per change: the app keeps the traces it computed by (text, intervention) in a bounded
`TraceCache` (TRACE_CACHE_BYTES), so the experiment's baseline, the page's own request for it, another
layer's arrays and a head search on a text already shown are read back, not recomputed. A change of
intervention on a shown text runs the changed pass only; the first view of a text with an intervention
runs it and its baseline, once each, even when the page asks for both at the same time.
A response estimated over MAX_RESPONSE_BYTES is refused with a 422 that says how to ask for less.
GET / goes through the same lanes and the same limit, and carries the shown layer's arrays only.

Every refusal is a 4xx with a one-line message in `detail`, never a 500, in the language the request
asked for (`lang`, default English; `messages` holds it in zh and en: `views.texts` "server.…"): a malformed or
oversized body, a wrong type, an empty text, a text over `session.MAX_CHARS` characters or
over the model's context in tokens, a control character, an intervention's value outside its range
(a temperature outside [MIN_TEMPERATURE, MAX_TEMPERATURE]), a layer or head that does not exist.

Interventions travel in a context of the request's own thread (`selfattn.intercept`), so requests
are answered concurrently, with no global lock. What they hold is bounded by lanes: a text of up to
LIGHT_CHARS characters is explained in the light lane (LIGHT_SLOTS at once), a longer one in the heavy
lane (HEAVY_SLOTS at once), so short requests never queue behind long ones and the memory of the
explanations being computed is at most HEAVY_SLOTS long ones plus LIGHT_SLOTS short ones, whatever
the number of clients. After a long one the freed heap is given back to the system (`release_memory`).
Answers not yet read by their clients are held too: at most MAX_CONNECTIONS × MAX_RESPONSE_BYTES, and the
kept traces: at most TRACE_CACHE_BYTES.
"""

from __future__ import annotations

import ctypes
import json
import socket
import threading

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse

from ... import checks
from ...limits import (
    HEAD_WORDS_BYTES,
    MAX_BODY_BYTES,
    MAX_RESPONSE_BYTES,
    PAGE_FIXED_BYTES,
    RESULT_CACHE_BYTES,
    TEMPERATURE_RANGE,
    THUMBNAIL_BYTES,
    TRACE_CACHE_BYTES,
)
from .. import pipeline
from ..capture.cache import TraceCache
from ..session import DEFAULT_TEXT, MAX_CHARS, Explainer
from ..views import checkable, export, report, texts
from ..views.page_budget import layer_page_bytes
from .body import ExplainRequest, Needs
from .guard import BODY_SECONDS, MAX_HEADER_BYTES, HttpGuard, allowed_hosts

__all__ = ["create_app", "serve", "ExplainRequest", "MAX_BODY_BYTES", "MIN_TEMPERATURE", "MAX_TEMPERATURE"]

MIN_TEMPERATURE, MAX_TEMPERATURE = TEMPERATURE_RANGE
LOOPBACK = ("127.0.0.1", "localhost", "::1")
MAX_CONNECTIONS = 64
"""Connections served at once; past it uvicorn answers 503 at once instead of holding more responses."""
LIGHT_CHARS = 256
"""Texts up to this many characters are explained in the light lane."""
LIGHT_SLOTS = 4
HEAVY_SLOTS = 2
"""Explanations computed at once per lane: a 1,015-token explanation of the default model holds ~50 MB."""
QUEUE_SECONDS = 120
"""A request that waited this long for a slot is answered 503."""
LISTEN_BACKLOG = 2048
"""Pending connections the kernel queues (uvicorn's own default)."""
KEEP_ALIVE_SECONDS = 5
"""An idle keep-alive connection is closed after this long."""
TRACE_CACHE_ENTRIES = 64
"""Most traces the app keeps: a text brings up to 1 + `word_relations.MAX_CONTRASTS` (its control and contrast
sentences), so a few texts and their changes."""
RESULT_CACHE_ENTRIES = 64
BUSY = texts.text("server.busy", "en")


class Busy(Exception):
    """No slot of the request's lane freed within QUEUE_SECONDS (answered 503)."""


def create_app(explainer: Explainer, *, hosts: frozenset[str] | None = None) -> FastAPI:
    """The web app for one explainer (a model and its tokenizer), behind an `HttpGuard`: bodies over
    MAX_BODY_BYTES (streamed or not) or not whole within BODY_SECONDS (408, the connection closed), oversized
    headers and, when `hosts` is given, a Host header that does not name this server's address and port are
    refused before any endpoint runs (`serve` passes the bound address)."""
    if not isinstance(explainer, Explainer):
        raise TypeError(f"explainer must be a selfattn.explainer.session.Explainer, got {type(explainer).__name__}")
    app = FastAPI(title="selfattn explorer", docs_url=None, redoc_url=None, openapi_url=None)
    work = _Work(explainer)
    app.state.traces = work.traces
    app.state.results = work.results
    app.add_middleware(HttpGuard, max_body=MAX_BODY_BYTES, hosts=hosts, body_seconds=BODY_SECONDS)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError):
        return _error(422, "server.invalid", _lang_of(exc.body), reason=_validation_message(exc))

    @app.get("/", response_class=HTMLResponse)
    def page(text: str | None = None, lang: str | None = None):
        status = 200
        lang = lang if lang in texts.LANGS else None
        try:
            doc, error = work.in_lane(DEFAULT_TEXT if text is None else text, lambda: work.first_doc(text, lang))
        except Busy:
            doc, error, status = None, texts.text("server.busy", lang or "zh"), 503
        html = report.render_app(doc, max_chars=MAX_CHARS, max_tokens=explainer.card.max_len, error=error)
        return HTMLResponse(html, status_code=status, headers=_page_headers())

    @app.post("/api/explain")
    def api_explain(body: ExplainRequest):
        try:
            return work.in_lane(body.text, lambda: work.answer(body), heavy=body.patch is not None)
        except Busy:
            return _error(503, "server.busy", body.lang)

    return app


class _Work:
    """What the endpoints do for one explainer: the lanes, the kept traces, the size of an answer."""

    def __init__(self, explainer: Explainer):
        self.traces = TraceCache(max_bytes=TRACE_CACHE_BYTES, max_entries=TRACE_CACHE_ENTRIES)
        self.results = TraceCache(max_bytes=RESULT_CACHE_BYTES, max_entries=RESULT_CACHE_ENTRIES, size=_json_bytes)
        self.explainer = explainer
        self.session = pipeline.Session(explainer, cache=self.traces, results=self.results)
        self.lanes = {
            "light": threading.BoundedSemaphore(LIGHT_SLOTS),
            "heavy": threading.BoundedSemaphore(HEAVY_SLOTS),
        }

    def in_lane(self, text: str, work, *, heavy: bool = False):
        """work() in the lane of `text`: light up to LIGHT_CHARS characters (unless `heavy`), else heavy; `Busy`
        when no slot frees within QUEUE_SECONDS. The page and the API both go through here."""
        lane = "light" if len(text) <= LIGHT_CHARS and not heavy else "heavy"
        if not self.lanes[lane].acquire(timeout=QUEUE_SECONDS):
            raise Busy(BUSY)
        try:
            return work()
        finally:
            self.lanes[lane].release()
            if lane == "heavy":
                release_memory()

    def explained(self, spec: pipeline.Spec, fmt: str, *, compare: bool = True, layers="auto", lang=None) -> dict:
        """The answer for `spec`'s Explanation (`pipeline.explain` with the kept traces and results) in `fmt`: "json"
        (`checkable`) or "packed" (the page's document; `layers`, `lang`: what `Session.document` holds), refused
        (`TooLarge`) when it would exceed MAX_RESPONSE_BYTES, known before a weight is computed or a layer packed."""
        e = self.session.explain(spec, compare=compare)
        if fmt == "json":  # what `selfattn explain --json` prints (`checkable`); the page reads the packed arrays
            held = None if layers == "auto" else layers
            size = checkable.weights_bytes(e, layers=held)  # before the weights are computed
            if size > MAX_RESPONSE_BYTES:
                raise TooLarge(mb=f"{size / 2**20:.1f}", limit=MAX_RESPONSE_BYTES >> 20)
            return checkable.json_document(e, layers=held, lang=lang)
        size = response_bytes(e, layers)
        if size > MAX_RESPONSE_BYTES:
            raise TooLarge(mb=f"{size / 2**20:.1f}", limit=MAX_RESPONSE_BYTES >> 20)
        return self.session.document(e, layers=layers, lang=lang)

    def first_doc(self, text: str | None, lang: str | None = None) -> tuple[dict | None, str | None]:
        """The page's first text explained as the packed API answers it (the shown layer's arrays only:
        the page asks for the others when picked), or (if refused) the default text and why the first
        was refused, in `lang` (default zh: the page's own default)."""
        error = None
        for candidate in ([text] if text is not None else []) + [DEFAULT_TEXT]:
            try:
                return self.explained(pipeline.Spec(candidate), "packed", layers="selected", lang=lang), error
            except (ValueError, TypeError) as exc:
                error = error or _said(exc, lang or "zh")
        return None, error

    def answer(self, body: ExplainRequest):
        try:
            doc = self.explained(
                body.request(),
                body.format,
                layers=body.layers if body.layers is not None or body.format == "json" else "selected",
                compare=body.layers is None,  # a request naming layers fetches arrays; the page has its baseline
                lang=body.lang,
            )
        except Needs as exc:
            return _error(422, "server.needs", body.lang, **exc.values)
        except pipeline.ExperimentValueError as exc:
            return _error(422, "server.experiment", body.lang, reason=str(exc))
        except pipeline.ExperimentTypeError as exc:
            return _error(400, "server.experiment", body.lang, reason=str(exc))
        except TooLarge as exc:
            return _error(422, "server.too_large", body.lang, **exc.values)
        except ValueError as exc:
            return _error(422, "server.refused", body.lang, reason=str(exc))
        except TypeError as exc:
            return _error(400, "server.refused", body.lang, reason=str(exc))
        return JSONResponse(doc)


class TooLarge(ValueError):
    """An answer over MAX_RESPONSE_BYTES; `values` fill the text "server.too_large"."""

    def __init__(self, **values):
        self.values = values
        super().__init__(texts.text("server.too_large", "en", **values))


def _said(exc: Exception, lang: str) -> str:
    """A refusal in `lang`: the server's own sentence, or the library's reason inside "server.refused"."""
    if isinstance(exc, TooLarge):
        return texts.text("server.too_large", lang, **exc.values)
    return texts.text("server.refused", lang, reason=str(exc))


def serve(explainer: Explainer, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the app with uvicorn until interrupted. Binds the loopback address unless told otherwise."""
    import uvicorn

    port = checks.integer("port", port, low=1, high=65535)  # the Host check needs the real port
    sock = listen(host, port)
    if host not in LOOPBACK:
        print(f"selfattn serve: listening on {host}, reachable from other machines")
    print(f"selfattn serve: open http://{'[::1]' if host == '::1' else host}:{port}/ (Ctrl+C stops)")
    app = create_app(explainer, hosts=allowed_hosts(host, port) if host in LOOPBACK else None)
    config = uvicorn.Config(
        app,
        log_level="warning",
        http="h11",
        limit_concurrency=MAX_CONNECTIONS,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )
    uvicorn.Server(config).run(sockets=[sock])


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port and listening, or an OSError that names the address (a host that does
    not resolve, a port in use), raised before anything is printed rather than logged by uvicorn."""
    if not isinstance(host, str) or not host:
        raise ValueError(f"host must be an address such as 127.0.0.1, got {host!r}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock


def release_memory() -> None:
    """Give the heap pages freed by a long explanation back to the system (glibc's malloc_trim): glibc
    keeps them in its per-thread arenas otherwise, and the server's RSS stays at its peak. No-op
    where there is no glibc."""
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


_LIBC: ctypes.CDLL | None
try:
    _LIBC = ctypes.CDLL(None)
except OSError:  # no C library to open (not a Unix)
    _LIBC = None


def response_bytes(e, layers) -> int:
    """At most how many bytes the page's document of `e` holding `layers` ("selected" or indices) takes: each held
    layer's bound, its vectors whole (`page_budget.layer_page_bytes`), with the page's fixed part and every head's
    words and thumbnail; known before a layer is packed."""
    held = [e.shown.layer] if layers == "selected" else sorted(export.check_layers(layers, e.card.n_layers))
    heads = sum(layer.n_heads for layer in e.trace.layers)
    fixed = PAGE_FIXED_BYTES + heads * (HEAD_WORDS_BYTES + THUMBNAIL_BYTES)
    return fixed + sum(layer_page_bytes(e.trace.layers[l], full=True) for l in held)


def _json_bytes(result: dict) -> int:
    """What one kept experiment result costs: its JSON's length."""
    return len(json.dumps(result, ensure_ascii=False))


def _error(status: int, key: str, lang: str | None, **values) -> JSONResponse:
    """A refusal: {"detail": the sentence `key` of `views.texts` in `lang` (default English), "messages": {zh, en}}."""
    messages = {code: texts.text(key, code, **values) for code in texts.LANGS}
    return JSONResponse({"detail": messages[lang or "en"], "messages": messages}, status_code=status)


def _lang_of(body) -> str | None:
    """The `lang` a body that failed validation asked for, if it named a known one."""
    lang = body.get("lang") if isinstance(body, dict) else None
    return lang if lang in texts.LANGS else None


def _validation_message(exc: RequestValidationError) -> str:
    """One line naming each refused field, for example "temperature: Input should be less than or equal to 100"."""
    parts = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        field = ".".join(loc) or "body"
        parts.append(f"{field}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def _page_headers() -> dict[str, str]:
    """The page's CSP (also in its <meta>), and no sniffing, framing or referrer."""
    return {
        "Content-Security-Policy": report.policy(live=True) + "; frame-ancestors 'none'",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }
