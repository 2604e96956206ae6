"""Surface (c): HTTP against a real `selfattn serve` process on 127.0.0.1 (never another address).

Hostile JSON bodies (wrong types, `"temperature": true`, huge numbers, NaN literals, deep nesting,
invalid UTF-8), hostile framing (100 KB headers, a foreign or missing Host, absurd Content-Length,
broken chunks), then the measurements (`measure`). A request ends as: ok (200 with strict
JSON or the page), a clear error (4xx with a one-line `detail`, or h11's own 400/431 for broken
framing), wrong (a 200 for what must be refused, a 4xx for what is valid), or a traceback (a 5xx, a
dropped connection, or "Traceback" in the server's output).
"""

from __future__ import annotations

import json
import socket
import time

from tests.live_server import HOST, Server, raw, request

from ..tally import Tally, strict_json

SHORT = "一只蓝色怪兽走进森林"
LONG = "一只蓝色怪兽走进森林。" * 169
"""1,015 tokens of the default model (<bos> + 169 × 6), just under its 1,024 positions."""


def _strict(body: bytes) -> bool:
    try:
        strict_json(body)
        return True
    except ValueError:
        return False


def _judge(
    tally: Tally, label: str, expect: str | None, status: int | None, body: bytes, *, closed_ok: bool = False
) -> None:
    """closed_ok: broken framing, which a server may refuse by closing the connection (h11 does)."""
    if status is None and closed_ok:
        tally.record("error", label)
    elif status is None:
        tally.record("traceback", label, f"connection closed without an answer ({body[:80]!r})")
    elif status >= 500:
        tally.record("traceback", label, f"{status} {body[:200]!r}")
    elif status == 200:
        page = body.lstrip().startswith(b"<!")
        if expect == "error":
            tally.record("wrong", label, f"200 for what must be refused: {body[:120]!r}")
        elif not page and not _strict(body):
            tally.record("wrong", label, "200 with invalid JSON (NaN?)")
        else:
            tally.record("ok", label)
    else:
        detail_ok = (b'"detail"' in body and len(body) < 4000) or status in (400, 404, 405, 413, 431)
        if expect == "ok":
            tally.record("wrong", label, f"valid request refused: {status} {body[:200]!r}")
        elif not detail_ok:
            tally.record("wrong", label, f"{status} without a one-line detail: {body[:200]!r}")
        else:
            tally.record("error", label)


def json_cases() -> list[tuple[str, str, bytes]]:
    """(label, expect, body) of POST /api/explain."""
    ok = [
        ("short", {"text": SHORT}),
        ("packed", {"text": SHORT, "format": "packed"}),
        ("layer 1 head 3", {"text": SHORT, "layer": 1, "head": 3}),
        ("find", {"text": SHORT, "find": ["走进", "怪兽"]}),
        ("temperature 0.01", {"text": SHORT, "temperature": 0.01}),
        ("temperature 100", {"text": SHORT, "temperature": 100.0}),
        ("no causal, no scaling", {"text": SHORT, "causal": False, "scaling": False, "only_layer": 1}),
        ("markup text", {"text": "一只[link=https:evil.example]x[/link]<script>alert(1)</script>"}),
        ("layers []", {"text": SHORT, "layers": []}),
    ]
    bad = [
        ("text int", {"text": 123}),
        ("text null", {"text": None}),
        ("text list", {"text": [SHORT]}),
        ("no text", {}),
        ("empty text", {"text": ""}),
        ("blank text", {"text": " \n "}),
        ("ESC text", {"text": "一只\u001b[2J"}),
        ("NUL text", {"text": "一只\u0000"}),
        ("lone surrogate", {"text": "一只\ud800"}),
        ("4001 chars", {"text": "怪" * 4001}),
        ("1100 tokens", {"text": "一只蓝色怪兽走进森林。" * 190}),
        ("layer str", {"text": SHORT, "layer": "0"}),
        ("layer float", {"text": SHORT, "layer": 1.0}),
        ("layer true", {"text": SHORT, "layer": True}),
        ("layer 99", {"text": SHORT, "layer": 99}),
        ("layer -1", {"text": SHORT, "layer": -1}),
        ("layer 10**30", {"text": SHORT, "layer": 10**30}),
        ("head 99", {"text": SHORT, "head": 99}),
        ("scaling 1", {"text": SHORT, "scaling": 1}),
        ("causal yes", {"text": SHORT, "causal": "yes"}),
        ("temperature true", {"text": SHORT, "temperature": True}),
        ("temperature str", {"text": SHORT, "temperature": "1"}),
        ("temperature 0", {"text": SHORT, "temperature": 0}),
        ("temperature 1e-300", {"text": SHORT, "temperature": 1e-300}),
        ("temperature 1e308", {"text": SHORT, "temperature": 1e308}),
        ("temperature -1", {"text": SHORT, "temperature": -1.0}),
        ("only_layer 99", {"text": SHORT, "only_layer": 99}),
        ("only_head 99", {"text": SHORT, "only_head": 99}),
        ("format xml", {"text": SHORT, "format": "xml"}),
        ("layers [99]", {"text": SHORT, "layers": [99]}),
        ("layers str", {"text": SHORT, "layers": ["0"]}),
        ("layers 2000", {"text": SHORT, "layers": [0] * 2000}),
        ("find one", {"text": SHORT, "find": ["走进"]}),
        ("find three", {"text": SHORT, "find": [1, 2, 3]}),
        ("find unknown", {"text": SHORT, "find": ["走进", "不存在"]}),
        ("find bool", {"text": SHORT, "find": [True, 0]}),
        ("find 10**30", {"text": SHORT, "find": [0, 10**30]}),
        ("extra field", {"text": SHORT, "evil": 1}),
    ]
    cases = [(f"json {n}", "ok", json.dumps(b).encode()) for n, b in ok]
    cases += [(f"json {n}", "error", json.dumps(b).encode()) for n, b in bad]
    literal = '{"text": "一只", "temperature": %s}'
    cases += [
        (f"json temperature {v}", "error", (literal % v).encode())
        for v in ("NaN", "Infinity", "-Infinity", "1e400", "1" + "0" * 5000)
    ]
    cases += [
        ("json layer 5000 digits", "error", ('{"text": "一只", "layer": %s}' % ("9" * 5000)).encode()),
        ("json nested 30000 deep", "error", b'{"text": ' + b"[" * 30000 + b"]" * 30000 + b"}"),
        ("json nested objects", "error", b'{"text": "x", "find": ' + b'{"a":' * 20000 + b"1" + b"}" * 20000 + b"}"),
        ("not JSON", "error", b"text=hello"),
        ("JSON array", "error", b'["a"]'),
        ("JSON null", "error", b"null"),
        ("invalid UTF-8", "error", b'{"text": "\xff\xfe"}'),
        ("empty body", "error", b""),
        ("duplicate keys", "ok", (f'{{"text": 1, "text": "{SHORT}"}}').encode()),
    ]
    return cases


def run(server: Server) -> Tally:
    tally = Tally("HTTP (real selfattn serve)")
    port = server.port
    for label, expect, body in json_cases():
        _judge(tally, label, expect, *request(port, body))
    page_cases = [
        ("GET /", "ok", "GET", "/", None),
        ("GET /?text=<script>", "ok", "GET", "/?text=%3Cscript%3E", None),
        ("GET /?text=ESC", "ok", "GET", "/?text=%1B%5B2J", None),
        ("GET /nope", "error", "GET", "/nope", None),
        ("GET /api/explain", "error", "GET", "/api/explain", None),
        ("PUT /", "error", "PUT", "/", None),
        ("Host evil.example", "error", "POST", "/api/explain", "evil.example"),
        ("Host evil:port", "error", "POST", "/api/explain", f"evil.example:{port}"),
        ("no Host", "error", "POST", "/api/explain", ""),
        ("Host localhost", "ok", "POST", "/api/explain", f"localhost:{port}"),
        ("Host 127.0.0.1:1 (another port)", "error", "POST", "/api/explain", f"{HOST}:1"),
        ("Host 127.0.0.1:port+1", "error", "POST", "/api/explain", f"{HOST}:{port + 1}"),
        ("Host 127.0.0.1 (no port)", "error", "POST", "/api/explain", HOST),
        ("Host LOCALHOST:port", "ok", "POST", "/api/explain", f"LOCALHOST:{port}"),
    ]
    for label, expect, method, path, host in page_cases:
        _judge(
            tally,
            label,
            expect,
            *request(port, json.dumps({"text": SHORT}).encode(), method=method, path=path, host=host),
        )
    body = json.dumps({"text": SHORT}).encode()
    framing = [
        ("100 KB header", b"X-Evil: " + b"a" * 100_000 + b"\r\n"),
        ("4000 small headers", b"".join(f"X-{i}: v\r\n".encode() for i in range(4000))),
    ]
    for label, extra in framing:
        _judge(tally, label, "error", *request(port, body, extra=extra), closed_ok=True)
    _judge(tally, "control chars in an unused header", None, *request(port, body, extra=b"X-Evil: a\x01b\r\n"))
    head = f"POST /api/explain HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n".encode()
    for label, headers, payload in [
        ("Content-Length 10**12", b"Content-Length: 1000000000000\r\n", body),
        ("Content-Length -1", b"Content-Length: -1\r\n", body),
        ("Content-Length abc", b"Content-Length: abc\r\n", body),
        ("two Content-Lengths", f"Content-Length: {len(body)}\r\nContent-Length: 5\r\n".encode(), body),
        ("chunk size not hex", b"Transfer-Encoding: chunked\r\n", b"zz\r\nabc\r\n0\r\n\r\n"),
        ("chunk size 2**64", b"Transfer-Encoding: chunked\r\n", b"10000000000000000\r\nabc\r\n"),
        ("chunked + Content-Length", f"Transfer-Encoding: chunked\r\nContent-Length: {len(body)}\r\n".encode(), body),
    ]:
        _judge(
            tally,
            label,
            "error",
            *raw(port, head + headers + b"Connection: close\r\n\r\n" + payload, timeout=10),
            closed_ok=True,
        )
    ok_chunked = hex(len(body))[2:].encode() + b"\r\n" + body + b"\r\n0\r\n\r\n"
    _judge(
        tally,
        "valid chunked body",
        "ok",
        *raw(port, head + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + ok_chunked),
    )
    slowloris(tally, port)
    short_bodies(tally, port)
    return tally  # the server's log is read for tracebacks once, after the measurements (scripts/hostile_run.py)


SLOW_CLIENTS = 8
SLOW_SECONDS = 6
SLOW_ANSWER_LIMIT_S = 10


def slowloris(tally: Tally, port: int) -> None:
    """SLOW_CLIENTS connections send a request one byte every half second for SLOW_SECONDS (bounded); a
    normal request made meanwhile must be answered within SLOW_ANSWER_LIMIT_S."""
    head = f"POST /api/explain HTTP/1.1\r\nHost: {HOST}:{port}\r\nX-Slow: ".encode()
    socks = [socket.create_connection((HOST, port), timeout=5) for _ in range(SLOW_CLIENTS)]
    try:
        end = time.monotonic() + SLOW_SECONDS
        answered, i = None, 0
        while time.monotonic() < end:
            for s in socks:
                try:
                    s.sendall(head[i % len(head) : i % len(head) + 1])
                except OSError:
                    pass
            i += 1
            if answered is None and i == 4:
                start = time.monotonic()
                status, _ = request(port, json.dumps({"text": SHORT}).encode())
                answered = (status, time.monotonic() - start)
            time.sleep(0.5)
    finally:
        for s in socks:
            s.close()
    status, seconds = answered or (None, 0.0)
    label = f"a request during {SLOW_CLIENTS} slowloris connections"
    if status == 200 and seconds < SLOW_ANSWER_LIMIT_S:
        tally.record("ok", label)
    else:
        tally.record("wrong", label, f"status {status} after {seconds:.1f} s")


SHORT_BODY_LIMIT_S = 20
"""A body that never arrives in full must be answered (408) and its connection closed within this long."""


def short_bodies(tally: Tally, port: int) -> None:
    """Bodies that do not arrive: a Content-Length larger than what is sent, a chunked body left open, and one
    byte a second; each must be answered 408 (or 400) and closed within SHORT_BODY_LIMIT_S, never held."""
    head = f"POST /api/explain HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: application/json\r\n".encode()
    for label, headers, sent, trickle in [
        ("Content-Length 1000, 10 bytes sent", b"Content-Length: 1000\r\n", b'{"text": "', False),
        ("chunked body never ended", b"Transfer-Encoding: chunked\r\n", b'5\r\n{"tex\r\n', False),
        ("a body trickled one byte a second", b"Content-Length: 60\r\n", b'{"text": "', True),
    ]:
        start = time.monotonic()
        data = b""
        try:
            with socket.create_connection((HOST, port), timeout=SHORT_BODY_LIMIT_S + 5) as s:
                s.sendall(head + headers + b"\r\n" + sent)
                s.settimeout(1.0 if trickle else SHORT_BODY_LIMIT_S + 5)
                while time.monotonic() - start < SHORT_BODY_LIMIT_S + 5:
                    try:
                        part = s.recv(65536)
                    except TimeoutError:
                        s.sendall(b"a")  # the trickle: one more byte, never the whole body
                        continue
                    if not part:
                        break
                    data += part
        except OSError as e:
            data = data or str(e).encode()
        waited = time.monotonic() - start
        status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.") else None
        if status in (400, 408) and waited < SHORT_BODY_LIMIT_S:
            tally.record("ok" if b"detail" in data else "wrong", label, "" if b"detail" in data else "no detail")
        elif status is None:
            tally.record("hang", label, f"no answer, connection held {waited:.1f} s")
        else:
            tally.record("wrong", label, f"status {status} after {waited:.1f} s")


def unicode_cases(server: Server) -> Tally:
    """Ordinary Unicode in the text is text (200 with strict JSON), real control characters are refused (4xx
    with a detail); the same characters as the CLI's (`cli.text_and_files`)."""
    from ..cli.text_and_files import CONTROLS, ORDINARY, ORDINARY_TOO

    tally = Tally("HTTP: Unicode and control characters")
    for name, ch in {**ORDINARY, **ORDINARY_TOO}.items():
        for text in (f"一只{ch}蓝色怪兽", f"{ch}一只蓝色怪兽{ch}"):
            body = json.dumps({"text": text, "format": "packed"}).encode()
            _judge(tally, f"json text with {name} ({text.index(ch)})", "ok", *request(server.port, body))
    for name, ch in CONTROLS.items():
        body = json.dumps({"text": f"一只{ch}怪兽"}).encode()
        _judge(tally, f"json text with {name}", "error", *request(server.port, body))
    return tally
