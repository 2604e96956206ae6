"""An ASGI guard in front of the web app: what a client can make the server hold is bounded
before the app sees the request.

    Host     must name the address the server is bound to (127.0.0.1, localhost, [::1]) and its port,
             exactly (a port may be left out only where it is 80, as HTTP says), so a page on another
             site that rebinds its DNS name to 127.0.0.1 cannot reach the API through the user's
             browser, nor a request meant for another local port (400, naming the expected values)
    body     read here, chunk by chunk, whatever the transfer encoding (Content-Length or
             chunked): past `max_body` bytes the request is answered 413 and the rest is never
             read; a smaller body is handed to the app whole (Starlette has no such bound). The
             whole body must arrive within `body_seconds` (BODY_SECONDS): a client that declares
             more than it sends, or trickles it, is answered 408 and its connection closed
    headers  more than `max_header_bytes` in all: 431. uvicorn's `h11_max_incomplete_event_size`
             (set by `server.serve`) bounds only a header block still incomplete when a read ends:
             100 KB of headers arriving in one read pass it (tests/explainer/web/test_server_process.py)

Every refusal is a JSON `{"detail": "..."}` with a one-line message, like the app's own.
"""

from __future__ import annotations

import asyncio
import json

from ...limits import MAX_HEADER_BYTES

__all__ = ["HttpGuard", "MAX_HEADER_BYTES", "BODY_SECONDS", "allowed_hosts"]

BODY_SECONDS = 5.0
"""Seconds a request body may take to arrive in full: the largest body accepted (64 KiB) takes
milliseconds on a loopback connection."""
MAX_LENGTH_DIGITS = 19
"""Digits a Content-Length may have (a 64-bit count); a longer one is refused before it is converted."""
DEFAULT_PORT = 80

LOOPBACK_NAMES = {
    "127.0.0.1": ("127.0.0.1", "localhost"),
    "localhost": ("127.0.0.1", "localhost"),
    "::1": ("[::1]", "localhost"),
}


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """The Host header values that name a server bound to `host`:`port` (lower case): each name with the
    port, and without it only where the port is DEFAULT_PORT."""
    names = LOOPBACK_NAMES.get(host, ("[" + host + "]" if ":" in host else host,))
    return frozenset(
        n.lower() for name in names for n in (f"{name}:{port}", *((name,) if port == DEFAULT_PORT else ()))
    )


class HttpGuard:
    """ASGI middleware: `HttpGuard(app, max_body=..., hosts=allowed_hosts(host, port), body_seconds=...)`.

    `hosts=None` checks no Host header (for an app behind a proxy that checks it)."""

    def __init__(
        self,
        app,
        *,
        max_body: int,
        hosts: frozenset[str] | None,
        max_header_bytes: int = MAX_HEADER_BYTES,
        body_seconds: float = BODY_SECONDS,
    ):
        self.app = app
        self.max_body = max_body
        self.max_header_bytes = max_header_bytes
        self.hosts = hosts
        self.body_seconds = body_seconds

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if sum(len(k) + len(v) for k, v in scope.get("headers", [])) > self.max_header_bytes:
            return await _refuse(send, 431, f"request headers are larger than {self.max_header_bytes} bytes")
        if self.hosts is not None:
            host = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), "")
            if host.lower() not in self.hosts:
                expected = ", ".join(sorted(self.hosts))
                return await _refuse(send, 400, f"Host {host[:100]!r} is not this server (expected one of {expected})")
        return await self._bounded(scope, receive, send)

    async def _bounded(self, scope, receive, send):
        """The app, given the body whole once it is read within `max_body` bytes (413 past it) and
        `body_seconds` (408 past it)."""
        headers = scope.get("headers", [])
        declared = next((v for k, v in headers if k == b"content-length"), None)
        if declared is not None and (
            not declared.isdigit() or len(declared) > MAX_LENGTH_DIGITS or int(declared) > self.max_body
        ):
            return await _refuse(send, 413, f"the request body is larger than {self.max_body} bytes")
        try:
            body = await asyncio.wait_for(self._read(receive), timeout=self.body_seconds)
        except asyncio.TimeoutError:
            return await _refuse(send, 408, f"the request body did not arrive within {self.body_seconds:g} s")
        if body is None:  # the client left
            return None
        if len(body) > self.max_body:
            return await _refuse(send, 413, f"the request body is larger than {self.max_body} bytes")
        delivered = False

        async def replay():
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    async def _read(self, receive) -> bytes | None:
        """The body, read until its end or one byte past `max_body` (the caller refuses it); None when the
        client disconnected."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            chunks.append(chunk)
            if size > self.max_body or not message.get("more_body", False):
                return b"".join(chunks)


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
