"""An ASGI guard in front of the web app: what a client can make the server hold is bounded
before the app sees the request.

    Host     must name the address the server is bound to (127.0.0.1, localhost, [::1]):
             Starlette's TrustedHostMiddleware decides, so a page on another site that rebinds its
             DNS name to 127.0.0.1 cannot reach the API through the user's browser (400)
    body     read here, chunk by chunk, whatever the transfer encoding (Content-Length or
             chunked): past `max_body` bytes the request is answered 413 and the rest is never
             read; a smaller body is handed to the app whole (Starlette has no such bound)
    headers  more than `max_header_bytes` in all: 431. uvicorn's `h11_max_incomplete_event_size`
             (set by `server.serve`) bounds only a header block still incomplete when a read ends:
             100 KB of headers arriving in one read pass it (tests/explainer/web/test_server_process.py)

Every refusal is a JSON `{"detail": "..."}` with a one-line message, like the app's own.
"""

from __future__ import annotations

import json
import re

from starlette.middleware.trustedhost import TrustedHostMiddleware

__all__ = ["HttpGuard", "MAX_HEADER_BYTES", "allowed_hosts"]

MAX_HEADER_BYTES = 16 * 1024
"""Most bytes of request headers (names and values together) accepted: browsers send 1-2 KB."""

LOOPBACK_NAMES = {
    "127.0.0.1": ("127.0.0.1", "localhost"),
    "localhost": ("127.0.0.1", "localhost"),
    "::1": ("[::1]", "localhost"),
}


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """The Host header values that name a server bound to `host`:`port`."""
    names = LOOPBACK_NAMES.get(host, ("[" + host + "]" if ":" in host else host,))
    return frozenset(n for name in names for n in (name, f"{name}:{port}"))


def _names(hosts: frozenset[str]) -> list[str]:
    """The names of `hosts` without a port, as TrustedHostMiddleware matches them ("[::1]", not "[::1]:8000")."""
    return sorted(h for h in hosts if not re.fullmatch(r".*:\d+", h))


class HttpGuard:
    """ASGI middleware: `HttpGuard(app, max_body=..., hosts=allowed_hosts(host, port))`.

    `hosts=None` checks no Host header (for an app behind a proxy that checks it)."""

    def __init__(self, app, *, max_body: int, hosts: frozenset[str] | None, max_header_bytes: int = MAX_HEADER_BYTES):
        self.app = app
        self.max_body = max_body
        self.max_header_bytes = max_header_bytes
        self.hosts = hosts
        self.names = None if hosts is None else _names(hosts)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if sum(len(k) + len(v) for k, v in scope.get("headers", [])) > self.max_header_bytes:
            return await _refuse(send, 431, f"request headers are larger than {self.max_header_bytes} bytes")
        if self.names is None:
            return await self._bounded(scope, receive, send)
        passed = False

        async def through(scope, receive, send):
            nonlocal passed
            passed = True
            await self._bounded(scope, receive, send)

        async def send_or_refuse(message):  # TrustedHostMiddleware's plain-text 400, said as the app says it
            if passed:
                return await send(message)
            if message["type"] == "http.response.start":
                host = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), "")
                expected = ", ".join(sorted(self.hosts or ()))
                await _refuse(send, 400, f"Host {host[:100]!r} is not this server (expected one of {expected})")
            return None

        trusted = TrustedHostMiddleware(through, allowed_hosts=self.names, www_redirect=False)
        return await trusted(scope, receive, send_or_refuse)

    async def _bounded(self, scope, receive, send):
        """The app, given the body whole once it is read within `max_body` bytes (413 past it)."""
        headers = scope.get("headers", [])
        declared = next((v for k, v in headers if k == b"content-length"), None)
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            return await _refuse(send, 413, f"the request body is larger than {self.max_body} bytes")
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            size += len(message.get("body", b""))
            if size > self.max_body:
                return await _refuse(send, 413, f"the request body is larger than {self.max_body} bytes")
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body, delivered = b"".join(chunks), False

        async def replay():
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


async def _refuse(send, status: int, message: str) -> None:
    payload = json.dumps({"detail": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
