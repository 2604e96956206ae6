"""Surface (b): the CLI. Every subcommand run as `python -m selfattn.cli ...` in a subprocess, with bad
numbers, huge/NaN/inf values, bad or unwritable paths, existing files without --force, control characters,
invalid UTF-8 (bytes in argv, read by Python through surrogateescape) and rich markup in paths and texts.

A run is a traceback if stderr says "Traceback"; a clear error if it exits 1 or 2 with one
`selfattn ...: error: ...` line; wrong if it exits 0 for what must be refused (or refuses what is valid),
changes a file it had no right to change, prints invalid JSON for --json, renders markup, writes a raw
control character to the terminal, or runs past its time limit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..tally import Tally, strict_json

WORKERS = 2
"""CLI runs at once (each imports torch: two keep this 2-core machine busy without thrashing)."""
RUN_TIMEOUT_S = 90
"""One CLI run longer than this is a hang (the slowest valid one, a tiny training, takes ~5 s)."""
MARKUP = "[link=https:evil.example]click here[/link]"
ESC_NAME = "esc\x1b]8;;evil.example\x07name\x1b[2J"
"""A folder name holding a terminal hyperlink and a clear-screen sequence."""
UNWRITABLE = "/proc/sys"
"""A folder nobody may create files in, even root (this run may be root, for whom chmod does not bind)."""
ERROR_LINE = re.compile(r"^selfattn(?: [\w-]+)?: error: ", re.MULTILINE)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
LIMITS_SHIM = (
    "import json, os, resource, sys; limits = json.loads(sys.argv[1]); "
    "os.umask(limits['umask']) if 'umask' in limits else None; "
    "[resource.setrlimit(r, (limits[k], limits[k])) for k, r in (('fsize', resource.RLIMIT_FSIZE), "
    "('as', resource.RLIMIT_AS)) if k in limits]; os.execv(sys.argv[2], sys.argv[2:])"
)
"""Runs the CLI under a umask and resource limits (set in the process, kept across exec): no preexec_fn,
which is unsafe beside the runner's threads."""


@dataclass
class Case:
    label: str
    argv: list
    expect: str | None = None  # "error", "ok" or None (either, if right)
    keep: list = field(default_factory=list)  # paths (relative to the work folder) that must not change
    absent: list = field(default_factory=list)  # paths that must not exist afterwards
    check: object = None  # check(stdout, work) -> None or why it is wrong
    timeout_s: float = 0  # seconds before the run counts as a hang (0: RUN_TIMEOUT_S)
    limits: dict = field(default_factory=dict)  # {"umask": 0o022, "fsize": bytes, "as": bytes} for the run
    error_says: str = ""  # a refusal must say this (case-insensitive), else its message is unclear
    logs_before_error: bool = False  # progress lines may precede the one error line (a failure after the work)


def _snapshot(path: Path):
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):  # a FIFO, a device: never read (it blocks)
        return ("special", stat.S_IFMT(info.st_mode), info.st_ino, info.st_rdev)
    if path.is_dir():
        return sorted(
            (p.relative_to(path).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "")
            for p in path.rglob("*")
        )
    return path.read_bytes()


def _json_ok(stdout: str, work: Path) -> str | None:
    try:
        strict_json(stdout)
    except ValueError as e:
        return f"--json printed invalid JSON ({str(e)[:80]})"
    return None


def _loads(folder: str):
    def check(stdout: str, work: Path) -> str | None:
        why = _json_ok(stdout, work) if stdout.lstrip().startswith("{") else None
        if why:
            return why
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from selfattn.model.checkpoint import load_checkpoint; load_checkpoint(sys.argv[1])",
                str(work / folder),
            ],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            env=_env(),
        )
        return None if probe.returncode == 0 else f"the checkpoint it wrote does not load: {probe.stderr[-200:]}"

    return check


def _npz_ok(name: str):
    def check(stdout: str, work: Path) -> str | None:
        import numpy as np

        try:
            with np.load(work / name) as data:
                return None if len(data.files) else "empty npz"
        except (OSError, ValueError) as e:
            return f"{name} is not a readable npz ({e})"

    return check


def cases() -> list[Case]:
    bad_numbers = ["0", "-1", "1e23", "nan", "inf", "-inf", "", "1.5", "0x10", "99999999999999999999999999"]
    c = [Case("no command", []), Case("unknown command", ["nope"], "error"), Case("--version", ["--version"], "ok")]
    c += [
        Case("walkthrough", ["walkthrough"], "ok"),
        Case("walkthrough --json", ["walkthrough", "--json"], "ok", check=_json_ok),
        Case("walkthrough --lang xx", ["walkthrough", "--lang", "xx"], "error"),
        Case("walkthrough --d-k 10**20", ["walkthrough", "--d-k", str(10**20), "--json"], check=_json_ok),
    ]
    c += [Case(f"walkthrough --d-k {v!r}", ["walkthrough", "--d-k", v], "error") for v in bad_numbers]
    c += [
        Case(f"walkthrough --seed {v!r}", ["walkthrough", "--seed", v], "error")
        for v in ["-1", "1e23", str(2**64), "nan"]
    ]
    # explain
    c += [
        Case("explain --json", ["explain", "一只蓝色怪兽走进森林", "--json"], "ok", check=_json_ok),
        Case("explain --temperature 0.01 --json", ["explain", "--temperature", "0.01", "--json"], "ok", check=_json_ok),
        Case("explain --find --json", ["explain", "--find", "走进", "怪兽", "--json"], "ok", check=_json_ok),
        Case("explain tables, text with markup", ["explain", f"一只{MARKUP}怪兽"], None),
        Case("explain --find unknown token", ["explain", "--find", "走进", "不存在"], "error"),
        Case(
            "explain --npz new (no .npz) --json",
            ["explain", "--npz", "fresh_out", "--json"],
            "ok",
            check=_npz_ok("fresh_out"),
        ),
    ]
    c += [
        Case(f"explain --temperature {v!r}", ["explain", "--temperature", v], "error")
        for v in ["1e-300", "0", "-1", "nan", "inf", "1e23", "100.5", "true"]
    ]
    c += [
        Case(f"explain {flag} {v!r}", ["explain", flag, v], "error")
        for flag, v in [
            ("--layer", "99"),
            ("--layer", "-1"),
            ("--layer", "1e23"),
            ("--head", "99"),
            ("--only-layer", "5"),
            ("--only-head", "64"),
        ]
    ]
    c += [
        Case("explain empty text", ["explain", ""], "error"),
        Case("explain blank text", ["explain", "  \n "], "error"),
        Case("explain ESC in text", ["explain", "一只\x1b[31m怪兽"], "error"),
        Case("explain invalid UTF-8 text", ["explain", b"\xff\xfe\xe4\xb8"], "error"),
        Case("explain 5000 characters", ["explain", "怪" * 5000], "error"),
        Case("explain 1100 tokens", ["explain", "一只蓝色怪兽走进森林。" * 190], "error"),
    ]
    c += [
        Case("explain --npz existing, no --force", ["explain", "--npz", "out.npz"], "error", keep=["out.npz"]),
        Case(
            "explain --npz DIR --force",
            ["explain", "--npz", "dir_npz", "--force"],
            "error",
            keep=["dir_npz"],
            absent=["dir_npz.npz"],
        ),
        Case("explain --html existing", ["explain", "--html", "report.html"], "error", keep=["report.html"]),
        Case("explain --html unwritable", ["explain", "--html", f"{UNWRITABLE}/x.html"], "error"),
        Case("explain --html missing folder", ["explain", "--html", "nowhere/x.html"], "error"),
        Case("explain --html under a file", ["explain", "--html", "afile.txt/x.html"], "error"),
        Case(
            "explain --html ok, --plots a file",
            ["explain", "--html", "new.html", "--plots", "afile.txt"],
            "error",
            absent=["new.html"],
            keep=["afile.txt"],
        ),
        Case(
            "explain --npz ok, --plots unwritable",
            ["explain", "--npz", "new2.npz", "--plots", f"{UNWRITABLE}/p"],
            "error",
            absent=["new2.npz"],
        ),
        Case("explain --model missing, markup", ["explain", "--model", f"gone/{MARKUP}"], "error"),
        Case("explain --model checkpoint named with markup", ["explain", "--model", f"evil/{MARKUP}"], "ok"),
        Case("explain --model checkpoint named with ESC", ["explain", "--model", f"evil/{ESC_NAME}"], "ok"),
        Case("explain --model broken checkpoint (n_layers 10M)", ["explain", "--model", "huge_ckpt"], "error"),
        Case("explain --model ESC in path", ["explain", "--model", "gone\x1b]8;;https://evil.example\x07x"], "error"),
        Case("explain --model invalid UTF-8 path", ["explain", "--model", b"gone\xff"], "error"),
        Case("explain --model hub id offline", ["explain", "--model", "evil-org/not-cached"], "error"),
        Case("explain --model pickle-only folder", ["explain", "--model", "pickles"], "error"),
    ]
    # train: every refusal must come before any training
    c += [
        Case(f"train {flag} {v!r}", ["train", "--preset", "tiny", "--out", "never", flag, v], "error", absent=["never"])
        for flag, v in [
            ("--seed", "1e23"),
            ("--seed", "-1"),
            ("--seed", str(2**63)),
            ("--epochs", "0"),
            ("--lr", "nan"),
            ("--lr", "inf"),
            ("--lr", "0"),
            ("--batch-size", "0"),
            ("--threads", "0"),
            ("--threads", "5000"),
            ("--epochs", "1e23"),
        ]
    ]
    c += [
        Case(
            "train --out an existing file",
            ["train", "--preset", "tiny", "--out", "afile.txt"],
            "error",
            keep=["afile.txt"],
        ),
        Case(
            "train --out existing checkpoint, no --force",
            ["train", "--preset", "tiny", "--out", "ckpt"],
            "error",
            keep=["ckpt"],
        ),
        Case(
            "train --plot existing, no --force",
            ["train", "--preset", "tiny", "--out", "never2", "--plot", "existing.png"],
            "error",
            keep=["existing.png"],
            absent=["never2"],
        ),
        Case(
            "train --plot unwritable",
            ["train", "--preset", "tiny", "--out", "never3", "--plot", f"{UNWRITABLE}/x.png"],
            "error",
            absent=["never3"],
        ),
        Case("train --out unwritable", ["train", "--preset", "tiny", "--out", f"{UNWRITABLE}/m"], "error"),
        Case("train --out markup", ["train", "--preset", "tiny", "--out", f"afile.txt/{MARKUP}"], "error"),
        Case(
            "train tiny --seed 1",
            ["train", "--preset", "tiny", "--seed", "1", "--out", "t1", "--no-progress"],
            "ok",
            check=_loads("t1"),
        ),
        Case("train tiny --json", ["train", "--preset", "tiny", "--out", "t2", "--json"], "ok", check=_loads("t2")),
        Case(
            "train tiny --lr 1e23",
            ["train", "--preset", "tiny", "--out", "t3", "--lr", "1e23", "--json"],
            check=_loads("t3"),
        ),
        Case(
            "train tiny --batch-size 10**9",
            ["train", "--preset", "tiny", "--out", "t4", "--batch-size", str(10**9), "--no-progress"],
            check=_loads("t4"),
        ),
    ]
    # generate
    c += [
        Case("generate --json", ["generate", "一只", "--json"], "ok", check=_json_ok),
        Case(
            "generate --temperature 0.01 --json",
            ["generate", "一只", "--temperature", "0.01", "--json"],
            "ok",
            check=_json_ok,
        ),
        Case("generate --top-k 10**9", ["generate", "一只", "--top-k", str(10**9), "--json"], check=_json_ok),
        Case(
            "generate 900 new tokens",
            ["generate", "一只", "--max-new-tokens", "900", "--greedy", "--json"],
            check=_json_ok,
        ),
        Case(
            "generate --max-new-tokens 10**9 (stops at max_len)",
            ["generate", "一只", "--max-new-tokens", str(10**9), "--json"],
            check=_json_ok,
        ),
        Case("generate ESC text", ["generate", "一只\x1b[2J"], "error"),
        Case("generate invalid UTF-8", ["generate", b"\xff\xfe"], "error"),
        Case("generate empty", ["generate", ""], "error"),
        Case("generate --model markup", ["generate", "一只", "--model", f"gone/{MARKUP}"], "error"),
    ]
    c += [
        Case(f"generate {flag} {v!r}", ["generate", "一只", flag, v], "error")
        for flag, v in [
            ("--temperature", "1e-300"),
            ("--temperature", "0"),
            ("--temperature", "nan"),
            ("--max-new-tokens", "0"),
            ("--top-k", "0"),
            ("--seed", "1e23"),
            ("--seed", "-5"),
        ]
    ]
    # bench, vocab, serve (refusals only: a serve that starts would not stop by itself)
    c += [
        Case(f"bench {' '.join(a)}", ["bench", *a], "error")
        for a in (
            ["--case", "nope"],
            ["--load", "-1"],
            ["--load", str(10**6)],
            ["--threads", "0"],
            ["--threads", "1e23"],
        )
    ]
    c += [
        Case("vocab --json", ["vocab", "--json"], "ok", check=_json_ok),
        Case("vocab --model missing markup", ["vocab", "--model", f"gone/{MARKUP}"], "error"),
        Case("vocab --model broken", ["vocab", "--model", "huge_ckpt"], "error"),
    ]
    c += [Case(f"serve --port {v!r}", ["serve", "--port", v], "error") for v in ["0", "70000", "-1", "nan", "1e23"]]
    c += [
        Case("serve --host unroutable", ["serve", "--host", "256.0.0.1", "--port", "8765"], "error"),
        Case("serve --model missing", ["serve", "--model", f"gone/{MARKUP}", "--port", "8766"], "error"),
    ]
    return c + special_file_cases() + range_cases()


SPECIALS = {"fifo": "a FIFO", "full": "a character device", "link_full": "a symlink to a character device"}
"""The special files `prepare` makes (name: what the refusal says): never replaced, even with --force."""


def special_file_cases() -> list[Case]:
    """Every output path aimed at a FIFO, a private /dev/full (mknod c 1 7) or a symlink to it, with --force:
    refused in one line naming it, the file left what it was ("lost" otherwise)."""
    c = []
    for name, says in SPECIALS.items():
        for flag in ("--html", "--npz"):
            argv = ["explain", "一只蓝色怪兽", flag, f"special/{name}", "--force"]
            c.append(Case(f"explain {flag} {name} --force", argv, "error", keep=[f"special/{name}"], error_says=says))
        c.append(
            Case(
                f"train --plot {name} --force",
                ["train", "--preset", "tiny", "--out", f"special_out_{name}", "--plot", f"special/{name}", "--force"],
                "error",
                keep=[f"special/{name}"],
                absent=[f"special_out_{name}"],
                error_says=says,
            )
        )
    c.append(
        Case(
            "explain --plots into a folder holding a FIFO named grid.png",
            ["explain", "一只蓝色怪兽", "--plots", "special_plots", "--force"],
            "error",
            keep=["special_plots/grid.png"],
            error_says="FIFO",
        )
    )
    c.append(
        Case(
            "train --out a folder whose config.json is a device, --force",
            ["train", "--preset", "tiny", "--out", "special_ckpt", "--force"],
            "error",
            keep=["special_ckpt/config.json"],
            error_says="character device",
        )
    )
    return c


def range_cases() -> list[Case]:
    """Ranges and lists bounded before they are expanded: one line, at once, whatever the numbers."""
    fast = 60
    c = [
        Case(f"explain --layers {v[:30]!r}", ["explain", "--layers", v], "error", timeout_s=fast)
        for v in ["0-99999999", "0-" + "9" * 40, "3,600", "²", "0-5,6-", "5-3", "-1"]
    ]
    many = ",".join(f"{i}.{j}" for i in range(40) for j in range(40))
    c += [
        Case("explain --ablate 1,600 heads", ["explain", "--ablate", many], "error", timeout_s=fast, error_says="1024"),
        Case("explain --ablate 5,000-digit layer", ["explain", "--ablate", "9" * 5000 + ".1"], "error", timeout_s=fast),
        Case("explain --ablate 512.0", ["explain", "--ablate", "512.0"], "error", timeout_s=fast, error_says="512"),
        Case("explain --layers 0-511 (the largest)", ["explain", "--layers", "0-511"], "error", error_says="layer"),
    ]
    return c


def _env() -> dict:
    src = str(Path(__file__).resolve().parents[3] / "src")
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": src, "COLUMNS": "120", "TERM": "xterm-256color"}


def prepare(work: Path) -> None:
    """The files and folders the cases point at."""
    from selfattn.model.checkpoint import DEFAULT_DIR

    work.mkdir(parents=True, exist_ok=True)
    (work / "existing.png").write_bytes(b"\x89PNG old picture")
    (work / "out.npz").write_bytes(b"old npz")
    (work / "report.html").write_text("<p>old report</p>")
    (work / "afile.txt").write_text("a file, not a folder")
    (work / "dir_npz").mkdir()
    shutil.copytree(DEFAULT_DIR, work / "ckpt")
    (work / "evil").mkdir()
    shutil.copytree(DEFAULT_DIR, work / "evil" / MARKUP)
    shutil.copytree(DEFAULT_DIR, work / "evil" / ESC_NAME)
    shutil.copytree(DEFAULT_DIR, work / "huge_ckpt")
    config = json.loads((work / "huge_ckpt" / "config.json").read_text())
    config["model"]["n_layers"] = 10_000_000
    (work / "huge_ckpt" / "config.json").write_text(json.dumps(config))
    (work / "pickles").mkdir()
    (work / "pickles" / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 1}))
    (work / "pickles" / "pytorch_model.bin").write_bytes(b"\x80\x04cos\nsystem\n(S'echo pwned'\ntR.")
    _special_files(work)


def _special_files(work: Path) -> None:
    """A FIFO, a private /dev/full and a symlink to it, a FIFO where --plots writes, a device as a checkpoint's
    config.json (mknod: the campaign runs as root, as the attacker did)."""
    (work / "special").mkdir()
    os.mkfifo(work / "special" / "fifo")
    (work / "special_plots").mkdir()
    os.mkfifo(work / "special_plots" / "grid.png")
    (work / "special_ckpt").mkdir()
    for path in (work / "special" / "full", work / "special_ckpt" / "config.json"):
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 7))
    (work / "special" / "link_full").symlink_to("full")


def _run_one(case: Case, work: Path) -> tuple[Case, str, str, str]:
    """(case, outcome, label, detail) of one run."""
    before = {p: _snapshot(work / p) for p in case.keep}
    argv = [sys.executable, "-m", "selfattn.cli", *case.argv]
    if case.limits:
        argv = [sys.executable, "-c", LIMITS_SHIM, json.dumps(case.limits), *argv]
    timeout_s = case.timeout_s or RUN_TIMEOUT_S
    try:
        proc = subprocess.run(argv, cwd=work, env=_env(), capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return case, "hang", case.label, f"still running after {timeout_s:g} s (killed)"
    out = proc.stdout.decode("utf-8", "replace")
    err = proc.stderr.decode("utf-8", "replace")
    changed = [p for p in case.keep if _snapshot(work / p) != before[p]]
    if changed:  # before the traceback: a crash that destroyed the user's files is counted as the loss
        return case, "lost", case.label, f"changed {changed} (exit {proc.returncode})"
    if "Traceback" in err:
        return case, "traceback", case.label, err.strip().splitlines()[-1][:200] if err.strip() else ""
    present = [p for p in case.absent if (work / p).exists()]
    if present:
        return case, "wrong", case.label, f"left {present} behind (exit {proc.returncode})"
    if "click here" in out + err and "[link=" not in out + err:
        return case, "wrong", case.label, "rich markup from the input was rendered"
    if CONTROL.search(err.replace("\r", "")) or CONTROL.search(out):  # \r on stderr: a progress bar
        return case, "wrong", case.label, "a raw control character reached the terminal (from the input or a log)"
    if proc.returncode == 0 or (not case.argv and proc.returncode == 2):
        if case.expect == "error":
            return case, "wrong", case.label, "exit 0, should be refused"
        why = case.check(out, work) if case.check else None
        return (case, "wrong", case.label, why) if why else (case, "ok", case.label, "")
    lines = err.strip().splitlines()
    if case.logs_before_error:  # a run that fails after its work began: its log lines, then one error line
        lines = lines[-1:]
    if not lines or not ERROR_LINE.search(lines[0] if case.logs_before_error else err) or len(lines) > 2:
        return case, "wrong", case.label, f"exit {proc.returncode} without a one-line error: {err[-200:]!r}"
    if case.expect == "ok":
        return case, "wrong", case.label, f"valid run refused: {err.strip()[-200:]}"
    if case.error_says and case.error_says.lower() not in "\n".join(lines).lower():
        return case, "wrong", case.label, f"refused without saying {case.error_says!r}: {err.strip()[-200:]}"
    return case, "error", case.label, ""


def run(work: Path) -> Tally:
    prepare(work)
    tally = Tally("CLI (subprocesses)")
    with ThreadPoolExecutor(WORKERS) as pool:
        for _, outcome, label, detail in pool.map(lambda case: _run_one(case, work), cases()):
            tally.record(outcome, label, detail)
    return tally
