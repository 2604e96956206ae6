"""Library cases that may hang or take the machine: each runs in a child process with a
timeout and resource limits, and the parent judges what the child reports and what it left on disk.

    FIFO / device files    config.json or tokenizer.json a FIFO (blocks a plain open), /dev/zero or
                           /dev/urandom (endless): refused, within the timeout (else a hang)
    sdpa at L = 65536      window 128: refused clearly or right on sampled rows, within an address-space
                           limit far below the 16 GiB dense mask; "auto" must serve it, "naive" refuses
    failed saves           save_checkpoint over an existing checkpoint with a file size limit the weights
                           exceed: an OSError, and the old checkpoint byte for byte intact and loadable
                           (else "lost"); into a new folder: nothing broken left behind

The child prints one JSON line: its tally's counts and notes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..cli.cases import LIMITS_SHIM
from ..tally import Tally

CHILD_TIMEOUT_S = 60
"""One child may take this long (imports on two busy cores included) before it counts as a hang."""
SMALL_AS = 3 << 30
"""Address-space limit of a child that must not allocate anything large (torch itself takes ~0.8 GiB)."""
FILE_LIMIT = 40 << 10
"""A file size limit the default model's weights (1.3 MB) exceed and its config (10 KB) does not."""
L_LONG, WINDOW = 65536, 128
SAMPLED_ROWS = (0, 1, 127, 128, 4095, 65535)


def _digest(folder: Path):
    if not folder.exists():
        return None
    return sorted((p.name, hashlib.sha256(p.read_bytes()).hexdigest()) for p in folder.iterdir() if p.is_file())


# --- what runs in the child ------------------------------------------------------------------------------------


def _load(tally: Tally, arg: str) -> None:
    from selfattn.model.checkpoint import load_checkpoint

    from ..judge import named

    named(tally, f"load_checkpoint {Path(arg).name}", lambda: load_checkpoint(arg))


def _long_window(tally: Tally, backend: str) -> None:
    import numpy as np
    import torch

    import selfattn

    from ...tolerances import TOL
    from ..judge import named

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, L_LONG, 8, generator=g) for _ in range(3))

    def check(out):
        for i in SAMPLED_ROWS:
            lo = max(0, i - WINDOW + 1)
            s = (q[0, 0, i].double() @ k[0, 0, lo : i + 1].double().T) / np.sqrt(8)
            want = torch.softmax(s, -1) @ v[0, 0, lo : i + 1].double()
            err = float((out[0, 0, i].double() - want).abs().max())
            if not err < TOL["float32_long_window_row"]:
                return f"row {i} differs from its window's softmax by {err:.3g}"
        return None

    expect = {"naive": "error", "auto": "ok"}.get(backend)
    named(
        tally,
        f"{backend} causal window {WINDOW} at L={L_LONG}",
        lambda: selfattn.attention(q, k, v, causal=True, window=WINDOW, backend=backend),
        check=check,
        expect=expect,
    )


def _save_over(tally: Tally, arg: str) -> None:
    from selfattn.model.checkpoint import DEFAULT_DIR, load_checkpoint, save_checkpoint

    from .cases import call

    ckpt = load_checkpoint(DEFAULT_DIR)
    force = Path(arg).exists()
    call(
        tally,
        f"save_checkpoint {'--force over a checkpoint' if force else 'into a new folder'}, file size limit",
        lambda: save_checkpoint(ckpt.model, ckpt.tokenizer, arg, force=force),
        expect="error",
    )


CHILD = {"load": _load, "long_window": _long_window, "save_over": _save_over}


def child(name: str, arg: str) -> None:
    tally = Tally("child")
    CHILD[name](tally, arg)
    print(json.dumps({"counts": tally.counts, "notes": tally.notes}))


# --- the parent ------------------------------------------------------------------------------------------------


def _spawn(tally: Tally, label: str, name: str, arg: str, *, address_space=SMALL_AS, file_size=None) -> str:
    """Run CHILD[name](arg) in a child; record (and return) its one outcome."""
    repo = Path(__file__).resolve().parents[3]
    code = f"import sys; sys.path[:0] = [{str(repo)!r}]; from tests.adversarial.library.edges_child import child; "
    code += "child(sys.argv[1], sys.argv[2])"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(repo / "src")}
    limits = {"as": address_space, **({"fsize": file_size} if file_size else {})}
    argv = [sys.executable, "-c", LIMITS_SHIM, json.dumps(limits), sys.executable, "-c", code, name, arg]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return tally.record("hang", label, f"still running after {CHILD_TIMEOUT_S} s (killed)")
    lines = proc.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1])
    except (IndexError, ValueError):
        return tally.record(
            "traceback", label, f"the child died (exit {proc.returncode}): {proc.stderr.strip()[-200:]}"
        )
    (outcome,) = [o for o, n in report["counts"].items() for _ in range(n)]
    tally.counts[outcome] += 1
    tally.notes.extend(report["notes"])
    return outcome


def _overrule(tally: Tally, outcome: str, new: str, label: str, detail: str) -> None:
    """The child's outcome was judged on what it returned; what it left on disk makes it `new`."""
    tally.counts[outcome] -= 1
    tally.record(new, label, detail)


def _checkpoint_copy(work: Path, name: str) -> Path:
    from selfattn.model.checkpoint import DEFAULT_DIR

    d = work / name
    shutil.copytree(DEFAULT_DIR, d)
    config = json.loads((d / "config.json").read_text())
    config.pop("files", None)  # the cases change files on purpose: no manifest to trip over first
    (d / "config.json").write_text(json.dumps(config))
    return d


def run_children(tally: Tally, work: Path) -> None:
    for target, how in [
        ("tokenizer.json", "fifo"),
        ("config.json", "fifo"),
        ("tokenizer.json", "/dev/zero"),
        ("config.json", "/dev/urandom"),
    ]:
        d = _checkpoint_copy(work, f"special_{target}_{how.strip('/').replace('/', '_')}")
        (d / target).unlink()
        os.mkfifo(d / target) if how == "fifo" else (d / target).symlink_to(how)
        _spawn(tally, f"load_checkpoint with {target} a {how}", "load", str(d))
    for backend in ("sdpa", "auto", "naive", "tiled"):
        _spawn(tally, f"{backend} window at L={L_LONG}", "long_window", backend)
    from selfattn.model.checkpoint import load_checkpoint

    old = _checkpoint_copy(work, "save_over_old")
    before = _digest(old)
    label = "save over a checkpoint, file size limit"
    outcome = _spawn(tally, label, "save_over", str(old), file_size=FILE_LIMIT)
    if _digest(old) != before:
        _overrule(tally, outcome, "lost", label, f"the old checkpoint changed: {_digest(old)}")
    else:
        try:
            load_checkpoint(old)
        except (OSError, ValueError) as e:
            _overrule(tally, outcome, "lost", label, f"the old checkpoint no longer loads: {e}")
    new = work / "save_new_folder"
    label = "save into a new folder, file size limit"
    outcome = _spawn(tally, label, "save_over", str(new), file_size=FILE_LIMIT)
    if new.exists() and any(new.iterdir()):
        left = sorted(p.name for p in new.iterdir())
        _overrule(tally, outcome, "wrong", label, f"left a broken checkpoint behind: {left}")
