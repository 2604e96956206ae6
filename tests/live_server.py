"""A real `selfattn serve` process on a free loopback port (`Server`), a raw HTTP/1.1 client over one
socket (`raw`) for hostile requests a normal client will not send (chunked bodies far over the limit,
100 KB headers, a foreign Host), and `request`: one whole request with a body, built on `raw`.
Used by tests/explainer/web/test_server_process.py and scripts/hostile_run.py; everything stays on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"
START_TIMEOUT_S = 120
"""How long `selfattn serve` may take to answer its first page (model load, imports)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Server:
    """`selfattn serve` on a free loopback port, its output kept in a file; stopped on exit."""

    def __init__(self, work: Path, args: tuple[str, ...] = (), start_timeout: float = START_TIMEOUT_S):
        """args: further `selfattn serve` arguments (("--model", PATH)); start_timeout: seconds to the first page."""
        self.port = free_port()
        self.log = work / "serve.log"
        self._log_file = self.log.open("wb")
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "selfattn.cli", "serve", "--host", HOST, "--port", str(self.port), *args],
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"selfattn serve exited: {self.log.read_text(errors='replace')[-500:]}")
            try:
                with urllib.request.urlopen(f"http://{HOST}:{self.port}/", timeout=10) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError("selfattn serve did not answer in time")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)
        self._log_file.close()

    def status(self, field: str) -> int:
        """A /proc/PID/status field in KiB (VmRSS, VmHWM)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise RuntimeError(f"no {field}")

    def reset_peak(self) -> None:
        """Reset VmHWM to the current RSS (Linux: write 5 to /proc/PID/clear_refs)."""
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


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


def request(
    port: int,
    body: bytes,
    *,
    path: str = "/api/explain",
    method: str = "POST",
    host: str | None = None,
    extra: bytes = b"",
    content_type: bytes = b"application/json",
    timeout: float = 30.0,
) -> tuple[int | None, bytes]:
    """One `method path` request carrying `body` (Connection: close), through `raw`.

    host    the Host header's value: None for this server's own address, "" to send no Host at all
    extra   further header lines, each ending in CRLF
    """
    host_line = b"" if host == "" else b"Host: " + (host or f"{HOST}:{port}").encode() + b"\r\n"
    head = (
        f"{method} {path} HTTP/1.1\r\n".encode()
        + host_line
        + b"Content-Type: "
        + content_type
        + b"\r\n"
        + f"Content-Length: {len(body)}\r\n".encode()
        + extra
        + b"Connection: close\r\n\r\n"
    )
    return raw(port, head + body, timeout=timeout)


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
