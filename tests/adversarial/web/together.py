"""Concurrency over HTTP: patch and explain requests sent together, in rounds, to one real `selfattn serve` of the
default model; each answer must equal, byte for byte, the same request sent alone to a second server ("wrong"
otherwise, "traceback" for a 5xx). Two servers, since each keeps its answers."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from ..tally import Tally

HTTP_TIMEOUT_S = 300
"""One answer may take this long (a patching run on two busy cores)."""
ROUNDS = 3
PAIRS = [
    ("一只蓝色怪兽走进", "两条红色鱼游进"),
    ("一只红色怪兽走进", "一只蓝色小鸟飞进"),
    ("两只蓝色怪兽走进", "一条红色鱼游进"),
    ("小鸟飞进", "鱼游进"),
]
"""Clean and corrupted texts of one token length for the default model; patched for "森林" against "大海"."""
SHORT = ["一只蓝色怪兽", "小鸟飞进森林", "红色鱼游进大海", "一只怪兽走进森林", "两条鱼"]


def _ask(port: int, payload: dict) -> tuple[int | None, bytes]:
    from tests.live_server import request

    try:
        return request(port, json.dumps(payload).encode(), timeout=HTTP_TIMEOUT_S)
    except OSError as e:
        return None, str(e).encode()


def _rounds() -> list[list[dict]]:
    rounds = []
    for r in range(ROUNDS):
        pairs = (PAIRS[r], PAIRS[r + 1][::-1])
        patches = [{"text": c, "patch": {"corrupted": x, "target": "森林", "foil": "大海"}} for c, x in pairs]
        rounds.append(patches + [{"text": t + "。" * r} for t in SHORT])
    return rounds


def _together(port: int, payloads: list[dict]) -> list:
    """Every payload sent at once, one thread each released by a barrier; None for one not answered in time."""
    got: list = [None] * len(payloads)
    start = threading.Barrier(len(payloads))

    def send(k: int) -> None:
        start.wait()
        got[k] = _ask(port, payloads[k])

    threads = [threading.Thread(target=send, args=(k,), daemon=True) for k in range(len(payloads))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HTTP_TIMEOUT_S)
    return got


def run_http(work: Path) -> Tally:
    """Each round's requests sent together (a barrier releases the threads) to one server, then one at a time
    to the other; every answer compared byte for byte."""
    from tests.live_server import Server

    tally = Tally("concurrency over HTTP")
    (work / "alone").mkdir(parents=True)
    (work / "together").mkdir()
    with Server(work / "alone") as alone, Server(work / "together") as together:
        for n, payloads in enumerate(_rounds()):
            got = _together(together.port, payloads)
            for payload, answer in zip(payloads, got, strict=True):
                label = f"round {n}: {'patch' if 'patch' in payload else 'explain'} {payload['text']}"
                if answer is None:
                    tally.record("hang", label, f"no answer within {HTTP_TIMEOUT_S} s")
                    continue
                status, body = answer
                want_status, want = _ask(alone.port, payload)
                if status is None or status >= 500:
                    tally.record("traceback", label, f"together: {status} {body[:200]!r}")
                elif want_status != 200 or status != 200:
                    tally.record("wrong", label, f"together {status}, alone {want_status}: {body[:200]!r}")
                elif body != want:
                    tally.record("wrong", label, "together the answer differs from the same request alone")
                else:
                    tally.record("ok", label)
        for server in (alone, together):
            if "Traceback" in server.log.read_text(errors="replace"):
                tally.record("traceback", "server log", "Traceback in its output")
    return tally
