"""Measurements against a real `selfattn serve`: peak RSS under a 300 MB chunked body and under
ten clients that never read, the size of a 1,015-token answer, and the latency of short requests
while long ones run (20 clients). Every loop is bounded in count and in time.

RSS is read from /proc/PID/status: VmHWM (the peak, reset before each measurement through
/proc/PID/clear_refs) and VmRSS (now).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from pathlib import Path

from tests.live_server import request

from .cases import HOST, LONG, SHORT, Server

CHUNKED_TOTAL = 300 << 20
CHUNK = 1 << 20
CHUNKED_TIME_LIMIT_S = 60
NON_READERS = 10
SETTLE_LIMIT_S = 90
"""Longest wait for the server to finish the non-readers' work (it is idle when its CPU time stops)."""
CLIENTS = 20
LONG_CLIENTS = 10
LATENCY_DURATION_S = 25
MIB = 1024


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _settle(server: Server, limit_s: float) -> float:
    """Wait until the server has used no CPU for a second (bounded); return the seconds waited."""
    start = time.monotonic()
    last = _cpu_ticks(server.proc.pid)
    while time.monotonic() - start < limit_s:
        time.sleep(1.0)
        now = _cpu_ticks(server.proc.pid)
        if now == last:
            break
        last = now
    return time.monotonic() - start


def chunked_body(server: Server) -> dict:
    server.reset_peak()
    before = server.status("VmRSS")
    head = (
        f"POST /api/explain HTTP/1.1\r\nHost: {HOST}:{server.port}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ).encode()
    frame = hex(CHUNK)[2:].encode() + b"\r\n" + b"x" * CHUNK + b"\r\n"
    sent, status, start = 0, None, time.monotonic()
    with socket.create_connection((HOST, server.port), timeout=30) as s:
        try:
            s.sendall(head)
            while sent < CHUNKED_TOTAL and time.monotonic() - start < CHUNKED_TIME_LIMIT_S:
                s.sendall(frame)
                sent += CHUNK
            s.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            answer = s.recv(4096)
            status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.") else None
        except (OSError, IndexError, ValueError):
            pass
    return {
        "sent_mib_before_refusal": round(sent / 2**20),
        "status": status,
        "rss_before_mib": before // MIB,
        "peak_rss_mib": server.status("VmHWM") // MIB,
        "peak_growth_mib": (server.status("VmHWM") - before) // MIB,
        "seconds": round(time.monotonic() - start, 1),
    }


def non_readers(server: Server, body: dict) -> dict:
    """NON_READERS clients send `body` and never read the answer; peak and held RSS, then RSS after they go."""
    server.reset_peak()
    before = server.status("VmRSS")
    payload = json.dumps(body).encode()
    head = (
        f"POST /api/explain HTTP/1.1\r\nHost: {HOST}:{server.port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    socks = []
    try:
        for _ in range(NON_READERS):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the answer stays on the server's side
            s.settimeout(30)
            s.connect((HOST, server.port))
            s.sendall(head + payload)
            socks.append(s)
        waited = _settle(server, SETTLE_LIMIT_S)
        peak, held = server.status("VmHWM"), server.status("VmRSS")
    finally:
        for s in socks:
            s.close()
    time.sleep(2)
    return {
        "rss_before_mib": before // MIB,
        "peak_rss_mib": peak // MIB,
        "peak_growth_mib": (peak - before) // MIB,
        "rss_while_held_mib": held // MIB,
        "rss_after_close_mib": server.status("VmRSS") // MIB,
        "seconds_to_settle": round(waited, 1),
    }


def answer_size(server: Server, body: dict) -> dict:
    payload = json.dumps(body).encode()
    start = time.monotonic()
    status, answer = request(server.port, payload, timeout=120)
    return {
        "status": status,
        "bytes": len(answer),
        "seconds": round(time.monotonic() - start, 2),
        **({"detail": json.loads(answer)["detail"][:160]} if status and status != 200 else {}),
    }


def latency(server: Server) -> dict:
    """CLIENTS threads for LATENCY_DURATION_S: LONG_CLIENTS ask for the 1,015-token text again and again, the
    others for the short one; the latency of each answer (packed, what the page asks for)."""
    results = {"short": [], "long": []}
    failures = []
    stop = time.monotonic() + LATENCY_DURATION_S

    def client(kind: str) -> None:
        body = json.dumps({"text": LONG if kind == "long" else SHORT, "format": "packed"})
        while time.monotonic() < stop:
            conn = http.client.HTTPConnection(HOST, server.port, timeout=120)
            start = time.monotonic()
            try:
                conn.request("POST", "/api/explain", body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                (results[kind] if response.status == 200 else failures).append(
                    time.monotonic() - start if response.status == 200 else response.status
                )
            except OSError as e:
                failures.append(type(e).__name__)
            finally:
                conn.close()

    threads = [threading.Thread(target=client, args=("long" if i < LONG_CLIENTS else "short",)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=LATENCY_DURATION_S + 150)

    def stats(xs):
        xs = sorted(xs)
        if not xs:
            return {"n": 0}
        pick = lambda q: round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)  # noqa: E731
        return {"n": len(xs), "p50_s": pick(0.5), "p99_s": pick(0.99), "max_s": round(xs[-1], 3)}

    return {
        "clients": CLIENTS,
        "long_clients": LONG_CLIENTS,
        "seconds": LATENCY_DURATION_S,
        "short": stats(results["short"]),
        "long": stats(results["long"]),
        "failures": failures[:10],
        "failed": len(failures),
    }


def run(server: Server) -> dict:
    out = {"chunked_300mb": chunked_body(server)}
    out["answer_1015_tokens"] = {
        "packed (default of the page)": answer_size(server, {"text": LONG, "format": "packed"}),
        "json, every layer": answer_size(server, {"text": LONG}),
        "json, layers [0]": answer_size(server, {"text": LONG, "layers": [0]}),
    }
    out["non_readers_packed"] = non_readers(server, {"text": LONG, "format": "packed"})
    out["non_readers_json_layer0"] = non_readers(server, {"text": LONG, "layers": [0]})
    out["latency"] = latency(server)
    out["server_rss_end_mib"] = server.status("VmRSS") // MIB
    return out
