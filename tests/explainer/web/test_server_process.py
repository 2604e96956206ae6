"""The web app as a user runs it: a real `selfattn serve` process, spoken to over real sockets.

Regression tests of issue 11's HTTP findings: a chunked body cannot make the server read past
MAX_BODY_BYTES, a foreign Host header (DNS rebinding) and oversized headers are refused, and a
short request is answered while a long one is being computed (no global lock).
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from selfattn.explainer.web.server import MAX_BODY_BYTES

from ...live_server import Server, raw, request

LONG_TEXT = "一只蓝色怪兽走进森林。" * 90  # ~ 550 tokens of the default model


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("serve")) as live:
        yield live


def _post(port: int, payload: dict, host: str | None = None) -> tuple[int, dict]:
    status, answer = request(port, json.dumps(payload).encode(), host=host)
    return status, json.loads(answer) if answer else {}


def test_a_chunked_body_is_cut_at_the_limit_and_memory_stays_flat(server):
    port = server.port
    before = server.status("VmRSS")
    chunk = b"a" * 65536
    frame = b"%x\r\n%s\r\n" % (len(chunk), chunk)
    head = (
        f"POST /api/explain HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ).encode()
    status, body = raw(port, head, (frame for _ in range(32 * 1024 * 1024 // len(chunk))))  # 32 MiB offered
    assert status == 413
    assert f"larger than {MAX_BODY_BYTES} bytes".encode() in body
    grown_mib = (server.status("VmRSS") - before) / 1024
    assert grown_mib < 16, f"the server grew by {grown_mib:.0f} MiB reading a refused body"


def test_a_declared_oversized_body_is_refused_unread(server):
    port = server.port
    head = (
        f"POST /api/explain HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {300 << 20}\r\n"
        f"Connection: close\r\n\r\n"
    ).encode()
    status, body = raw(port, head)
    assert status == 413 and b"larger than" in body


def test_a_foreign_host_header_is_refused(server):
    port = server.port
    status, body = _post(port, {"text": "一只蓝色怪兽"}, host=f"evil.example:{port}")
    assert status == 400
    assert "evil.example" in body["detail"] and "not this server" in body["detail"]
    status, _ = _post(port, {"text": "一只蓝色怪兽"}, host=f"localhost:{port}")
    assert status == 200


def test_oversized_headers_are_refused(server):
    port = server.port
    head = (
        f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Padding: {'a' * 100_000}\r\nConnection: close\r\n\r\n"
    ).encode()
    status, _ = raw(port, head)
    assert status in (400, 431)


def test_strict_types_over_http(server):
    port = server.port
    status, body = _post(port, {"text": "一只蓝色怪兽", "temperature": True})
    assert status == 422 and "temperature" in body["detail"]


def test_a_short_request_is_not_held_behind_a_long_one(server):
    port = server.port
    finished: list[str] = []

    def ask(name: str, text: str) -> None:
        status, _ = _post(port, {"text": text})
        assert status == 200
        finished.append(name)

    long = threading.Thread(target=ask, args=("long", LONG_TEXT))
    long.start()
    time.sleep(0.3)  # the long request is being computed
    ask("short", "一只蓝色怪兽")
    long.join(timeout=120)
    assert finished == ["short", "long"]
