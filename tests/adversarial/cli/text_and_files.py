"""Surface "cli-texts": the CLI's texts, files and configs once handled wrong, and their neighbours, run like
`cli.cases` (a subprocess each).

output paths      checked before any work: --plots into a folder holding the user's grid.svg or a head
                  picture, --npz X --html X, train --plot onto a file of the checkpoint it writes
failed writes     a file size limit the weights / a plot / the report exceed: train --force must leave
                  the old checkpoint intact ("lost" otherwise), --plots and --html leave no partial output
special files     tokenizer.json / config.json a FIFO or /dev/zero: refused within the timeout (a hang else)
oversized models  a transformers config of 1.3e10 / 6.9e10 parameters with a one-element weights file:
                  refused before allocating (the run is capped at 4 GiB of address space)
escapes           terminal escapes in a checkpoint's tokens never reach the terminal raw (vocab, generate)
Unicode           U+3000, U+00A0, U+200D, U+FEFF, U+00AD are text; C0/C1 controls and DEL are refused
permissions       written files follow the umask (0644 under 022, 0664 under 002, 0600 under 077)
"""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..tally import Tally
from .cases import WORKERS, Case, _json_ok, _run_one

TIMEOUT_S = 60
"""A run of this surface longer than this is a hang (a FIFO that blocks; the slowest valid run, a tiny
training, takes ~12 s on two busy cores)."""
FILE_LIMIT = 100 << 10
"""Larger than the default report's config, npz and some plots, smaller than its weights, grid.svg and HTML."""
BIG_AS = 4 << 30
"""Address space of a run that must refuse a huge model before allocating it."""
ORDINARY = {"U+3000": "\u3000", "U+00A0": "\u00a0", "U+200D": "\u200d", "U+FEFF": "\ufeff", "U+00AD": "\u00ad"}
ORDINARY_TOO = {"U+200C": "\u200c", "U+202F": "\u202f"}
"""Like them: the zero-width non-joiner (Persian, Hindi) and the narrow no-break space (French): text."""
CONTROLS = {"BEL": "\x07", "BS": "\x08", "DEL": "\x7f", "C1 NEL": "\x85", "C1 CSI": "\x9b"}
TOKEN_ESCAPES = ("\x1b]8;;https://evil.example\x07link\x1b]8;;\x07", "\x1b[2J\x1b[H", "\u202e")
BIDI = "\u202e"
TEXT_EN = "a blue monster walks into the forest"


def _modes(paths: list[str], umask: int):
    def check(stdout: str, work: Path) -> str | None:
        want = 0o666 & ~umask
        files = [p for name in paths for p in ([work / name] if (work / name).is_file() else (work / name).glob("*"))]
        bad = {p.name: oct(p.stat().st_mode & 0o777) for p in files if p.stat().st_mode & 0o777 != want}
        if not files:
            return f"none of {paths} was written"
        return f"written {bad}, the umask {umask:03o} says {oct(want)}" if bad else None

    return check


def _no_bidi(stdout: str, work: Path) -> str | None:
    return "a raw U+202E from a token reached the terminal" if BIDI in stdout else None


def cases() -> list[Case]:
    c = [
        Case(
            "explain --plots into a folder holding grid.svg",
            ["explain", "--html", "a.html", "--npz", "a.npz", "--plots", "plots_svg"],
            "error",
            keep=["plots_svg"],
            absent=["a.html", "a.npz"],
        ),
        Case(
            "explain --plots into a folder holding head-L0-H3.png",
            ["explain", "--html", "b.html", "--npz", "b.npz", "--plots", "plots_head"],
            "error",
            keep=["plots_head"],
            absent=["b.html", "b.npz"],
        ),
        Case(
            "explain --npz X --html X",
            ["explain", "--npz", "same.out", "--html", "same.out"],
            "error",
            absent=["same.out"],
        ),
        Case(
            "explain --npz X --html X --force (X exists)",
            ["explain", "--npz", "same_old.out", "--html", "same_old.out", "--force"],
            "error",
            keep=["same_old.out"],
        ),
        Case(
            "explain --npz X --plots X",
            ["explain", "--npz", "same2.npz", "--plots", "same2.npz"],
            "error",
            absent=["same2.npz"],
        ),
        Case(
            "explain --html inside --plots, named like a plot",
            ["explain", "--plots", "pp", "--html", "pp/grid.svg"],
            "error",
            absent=["pp/grid.svg", "pp/grid.png"],
        ),
        Case(
            "train --force --plot onto the checkpoint's weights",
            ["train", "--preset", "tiny", "--out", "ck_plot", "--force", "--plot", "ck_plot/model.safetensors"],
            "error",
            keep=["ck_plot"],
        ),
        Case(
            "train --force --plot onto the checkpoint folder",
            ["train", "--preset", "tiny", "--out", "ck_plot2", "--force", "--plot", "ck_plot2"],
            "error",
            keep=["ck_plot2"],
        ),
        Case(
            "train --force over a checkpoint, the save fails (file size limit)",
            ["train", "--preset", "tiny", "--out", "ck_force", "--force", "--no-progress"],
            "error",
            keep=["ck_force"],
            limits={"fsize": 40 << 10},
            logs_before_error=True,
        ),
        Case(
            "train into a new folder, the save fails (file size limit)",
            ["train", "--preset", "tiny", "--out", "ck_new_fail", "--no-progress"],
            "error",
            absent=["ck_new_fail/config.json", "ck_new_fail/model.safetensors"],
            limits={"fsize": 40 << 10},
            logs_before_error=True,
        ),
        Case(
            "explain --plots, a plot exceeds the file size limit",
            ["explain", "--plots", "plots_full"],
            "error",
            absent=["plots_full/grid.png", "plots_full/head-L0-H3.png"],
            limits={"fsize": FILE_LIMIT},
        ),
        Case(
            "explain --html, the report exceeds the file size limit",
            ["explain", "--html", "full.html"],
            "error",
            absent=["full.html"],
            limits={"fsize": FILE_LIMIT},
        ),
    ]
    for folder, what in (
        ("fifo_tok", "tokenizer.json a FIFO"),
        ("fifo_cfg", "config.json a FIFO"),
        ("zero_tok", "tokenizer.json /dev/zero"),
    ):
        c += [
            Case(f"explain --model, {what}", ["explain", "--model", folder, "--json"], "error"),
            Case(f"vocab --model, {what}", ["vocab", "--model", folder], "error"),
            Case(f"generate --model, {what}", ["generate", "一只", "--model", folder], "error"),
        ]
    for folder, n in (("llama_13b", "1.3e10"), ("llama_70b", "6.9e10")):
        c.append(
            Case(
                f"explain --model a {n}-parameter config, 1-element weights",
                ["explain", "a blue monster", "--model", folder, "--json"],
                "error",
                limits={"as": BIG_AS},
            )
        )
    c += [
        Case("explain --model transformers folder (control)", ["explain", TEXT_EN, "--model", "hf_ok", "--json"], "ok"),
        Case(
            "explain --model transformers folder, a tensor missing",
            ["explain", TEXT_EN, "--model", "hf_missing", "--json"],
            "error",
            logs_before_error=True,
        ),
        Case(
            "explain --model transformers folder, a NaN tensor",
            ["explain", TEXT_EN, "--model", "hf_nan"],
            "error",
            error_says="weight",
            logs_before_error=True,
        ),
    ]
    c += [
        Case("vocab --model, escapes in tokens", ["vocab", "--model", "esc_ck"], "ok", check=_no_bidi),
        Case("vocab --model --json, escapes in tokens", ["vocab", "--model", "esc_ck", "--json"], "ok", check=_json_ok),
        Case(
            "generate --model, escapes in tokens",
            ["generate", "一只", "--model", "esc_ck", "--greedy", "--max-new-tokens", "12"],
            "ok",
            check=_no_bidi,
        ),
        Case(
            "generate --model --json, escapes in tokens",
            ["generate", "一只", "--model", "esc_ck", "--max-new-tokens", "12", "--json"],
            "ok",
            check=_json_ok,
        ),
        Case("explain --model, escapes in tokens", ["explain", "一只", "--model", "esc_ck"], "ok", check=_no_bidi),
    ]
    for name, ch in {**ORDINARY, **ORDINARY_TOO}.items():
        c += [
            Case(f"explain text with {name}", ["explain", f"一只{ch}蓝色怪兽", "--json"], "ok", check=_json_ok),
            Case(f"generate text with {name}", ["generate", f"一只{ch}蓝色", "--json"], "ok", check=_json_ok),
        ]
    c += [Case(f"explain text with {name}", ["explain", f"一只{ch}怪兽"], "error") for name, ch in CONTROLS.items()]
    c += [
        Case(
            "explain --html --npz --plots under umask 022",
            ["explain", "--html", "perm.html", "--npz", "perm.npz", "--plots", "perm_plots"],
            "ok",
            check=_modes(["perm.html", "perm.npz", "perm_plots"], 0o022),
            limits={"umask": 0o022},
        ),
        Case(
            "explain --html under umask 002",
            ["explain", "--html", "perm2.html"],
            "ok",
            check=_modes(["perm2.html"], 0o002),
            limits={"umask": 0o002},
        ),
        Case(
            "explain --npz under umask 077",
            ["explain", "--npz", "perm3.npz"],
            "ok",
            check=_modes(["perm3.npz"], 0o077),
            limits={"umask": 0o077},
        ),
        Case(
            "train under umask 022",
            ["train", "--preset", "tiny", "--out", "perm_ck", "--no-progress"],
            "ok",
            check=_modes(["perm_ck"], 0o022),
            limits={"umask": 0o022},
        ),
    ]
    for case in c:
        case.timeout_s = TIMEOUT_S
    return c


def _checkpoint(work: Path, name: str) -> Path:
    from selfattn.model.checkpoint import DEFAULT_DIR

    d = work / name
    shutil.copytree(DEFAULT_DIR, d)
    config = json.loads((d / "config.json").read_text())
    config.pop("files", None)  # these folders are changed on purpose: no manifest to trip over first
    (d / "config.json").write_text(json.dumps(config))
    return d


def _huge_llama(work: Path, name: str, **sizes) -> None:
    import torch
    from safetensors.torch import save_file

    from tests.hf.models import tokenizer

    d = work / name
    d.mkdir()
    tokenizer().save_pretrained(d)
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 32000, **sizes}
    (d / "config.json").write_text(json.dumps(config))
    save_file({"lm_head.weight": torch.zeros(1)}, str(d / "model.safetensors"), metadata={"format": "pt"})


def prepare(work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    (work / "plots_svg").mkdir()
    (work / "plots_svg" / "grid.svg").write_text("<svg>the user's own picture</svg>")
    (work / "plots_head").mkdir()
    (work / "plots_head" / "head-L0-H3.png").write_bytes(b"\x89PNG the user's own picture")
    (work / "same_old.out").write_text("the user's file")
    (work / "pp").mkdir()
    for name in ("ck_plot", "ck_plot2", "ck_force"):
        _checkpoint(work, name)
    for name, target, how in (
        ("fifo_tok", "tokenizer.json", "fifo"),
        ("fifo_cfg", "config.json", "fifo"),
        ("zero_tok", "tokenizer.json", "/dev/zero"),
    ):
        d = _checkpoint(work, name)
        (d / target).unlink()
        os.mkfifo(d / target) if how == "fifo" else (d / target).symlink_to(how)
    esc = _checkpoint(work, "esc_ck")
    tok = json.loads((esc / "tokenizer.json").read_text())
    keep = {"一只", "。"}
    tok["tokens"] = [
        t if i < 4 or t in keep else t + TOKEN_ESCAPES[i % len(TOKEN_ESCAPES)] for i, t in enumerate(tok["tokens"])
    ]
    (esc / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    import math

    import torch
    import transformers

    from ..library.edges import _hf_folder

    transformers.logging.disable_progress_bar()

    attn = lambda t: next(n for n in t if "attn" in n and t[n].dim() == 2)  # noqa: E731
    _hf_folder(work, "hf_ok", "gpt2", lambda t: None)
    _hf_folder(work, "hf_missing", "gpt2", lambda t: {n: x for n, x in t.items() if n != attn(t)})
    _hf_folder(work, "hf_nan", "gpt2", lambda t: {**t, attn(t): torch.full_like(t[attn(t)], math.nan)})
    _huge_llama(
        work,
        "llama_13b",
        hidden_size=5120,
        intermediate_size=13824,
        num_hidden_layers=40,
        num_attention_heads=40,
        num_key_value_heads=40,
    )
    _huge_llama(
        work,
        "llama_70b",
        hidden_size=8192,
        intermediate_size=28672,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
    )


def run(work: Path) -> Tally:
    prepare(work)
    tally = Tally("CLI: texts and files")
    with ThreadPoolExecutor(WORKERS) as pool:
        for _, outcome, label, detail in pool.map(lambda case: _run_one(case, work), cases()):
            tally.record(outcome, label, detail)
    return tally
