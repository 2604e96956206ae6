"""A raw HTTP/1.1 client over one socket, for hostile requests a normal client will not send
(chunked bodies far over the limit, 100 KB headers, a foreign Host). Used by the tests of a real
`selfattn serve` process and by scripts/hostile_run.py; it only ever connects to 127.0.0.1."""

from __future__ import annotations

import socket

HOST = "127.0.0.1"


def raw(port: int, head: bytes, chunks=(), timeout: float = 30.0) -> tuple[int | None, bytes]:
    """Send `head` and then each of `chunks`; return (status, body), status None if the server closed
    without an HTTP answer. Sending stops quietly once the server closes (a refused body)."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        try:
            s.sendall(head)
            for chunk in chunks:
                s.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = b""
        try:
            while True:
                part = s.recv(1 << 16)
                if not part:
                    break
                data += part
                if _complete(data):
                    break
        except (TimeoutError, ConnectionResetError):
            pass
    if not data.startswith(b"HTTP/1."):
        return None, data
    head_, _, body = data.partition(b"\r\n\r\n")
    return int(head_.split(b" ", 2)[1]), body


def _complete(data: bytes) -> bool:
    """Whether `data` holds a whole response with a Content-Length (a keep-alive answer ends there)."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value.strip())
    return False
