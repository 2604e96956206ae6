"""The HTTP guard in front of the web app (`explainer.web.guard`): the Host header names this server by its
address AND its port, and a request body that does not arrive in BODY_SECONDS is answered 408 and its
connection closed (a client that declares more bytes than it sends, or sends them slowly, held a server
connection for 90 s and more).

The ASGI cases call the guard directly; the last one speaks to a real `selfattn serve` over a raw socket."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest

from selfattn.explainer.web.guard import BODY_SECONDS, HttpGuard, allowed_hosts
from tests.live_server import HOST, Server

PORT = 8123


async def _app(scope, receive, send):
    message = await receive()
    body = message.get("body", b"")
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"read " + str(len(body)).encode()})


def _call(guard: HttpGuard, host: bytes | None, receive=None) -> tuple[int, bytes]:
    headers = [] if host is None else [(b"host", host)]
    scope = {"type": "http", "method": "POST", "path": "/api/explain", "headers": headers}
    sent = []

    async def whole():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(guard(scope, receive or whole, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def _guard(**kwargs) -> HttpGuard:
    return HttpGuard(_app, max_body=1024, hosts=allowed_hosts("127.0.0.1", PORT), **kwargs)


@pytest.mark.parametrize("host", [f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"LOCALHOST:{PORT}"])
def test_the_servers_own_address_and_port_pass(host):
    assert _call(_guard(), host.encode()) == (200, b"read 2")


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:1", f"127.0.0.1:{PORT + 1}", "localhost:80", f"evil.example:{PORT}", "127.0.0.1", "", None],
)
def test_another_port_or_name_or_no_port_is_refused_naming_the_right_one(host):
    status, body = _call(_guard(), None if host is None else host.encode())
    detail = json.loads(body)["detail"]
    assert status == 400 and f"127.0.0.1:{PORT}" in detail, detail


def test_the_default_port_is_the_only_one_a_host_may_leave_out():
    guard = HttpGuard(_app, max_body=1024, hosts=allowed_hosts("127.0.0.1", 80))
    assert _call(guard, b"127.0.0.1")[0] == 200 and _call(guard, b"127.0.0.1:80")[0] == 200
    assert _call(guard, b"127.0.0.1:8000")[0] == 400
    v6 = HttpGuard(_app, max_body=1024, hosts=allowed_hosts("::1", PORT))
    assert _call(v6, f"[::1]:{PORT}".encode())[0] == 200 and _call(v6, b"[::1]:1")[0] == 400


def test_a_body_that_does_not_arrive_in_time_is_answered_408():
    async def never():
        await asyncio.sleep(60)
        return {"type": "http.request", "body": b"", "more_body": False}

    start = time.monotonic()
    status, body = _call(_guard(body_seconds=0.3), f"127.0.0.1:{PORT}".encode(), never)
    assert status == 408 and "0.3" in json.loads(body)["detail"]
    assert time.monotonic() - start < 5


def test_a_short_body_on_a_real_server_is_cut_at_the_deadline(tmp_path):
    """Content-Length 1000, 10 bytes sent, then nothing: a 408 within BODY_SECONDS (and some slack), and the
    server closes the connection; the server still answers others."""
    assert BODY_SECONDS <= 10
    with Server(tmp_path) as server:
        with socket.create_connection((HOST, server.port), timeout=BODY_SECONDS + 20) as s:
            s.sendall(
                f"POST /api/explain HTTP/1.1\r\nHost: {HOST}:{server.port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: 1000\r\n\r\n".encode()
                + b'{"text": "'
            )
            start = time.monotonic()
            data = b""
            while part := s.recv(65536):  # until the server closes
                data += part
            waited = time.monotonic() - start
        assert data.startswith(b"HTTP/1.1 408"), data[:200]
        assert waited < BODY_SECONDS + 10, f"held {waited:.1f} s"
        with socket.create_connection((HOST, server.port), timeout=30) as s:
            body = b'{"text": "\xe4\xb8\x80\xe5\x8f\xaa"}'
            s.sendall(
                f"POST /api/explain HTTP/1.1\r\nHost: {HOST}:{server.port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            answer = b""
            while part := s.recv(65536):
                answer += part
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
