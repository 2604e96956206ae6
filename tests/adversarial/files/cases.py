"""Surface "files": output paths, the GGUF cache's key and ranges in arguments, through the library.

special targets     write_atomic, check_writable, the file set of explain and a checkpoint save aimed at a
                    FIFO, a private /dev/full (mknod c 1 7), a socket and a symlink to the device, with and
                    without force: a ValueError naming it, the file left what it was ("lost" otherwise)
stale temporaries   a killed write's .NAME.XXXXXXXX.tmp is removed by the next write to that target; files
                    of other names and a live writer's temporary file are kept ("lost" otherwise)
the GGUF cache key  one byte changed anywhere in a GGUF file (first, middle, last), its size and mtime put
                    back: another key ("wrong" otherwise: the old weights would be loaded)
ranges              --layers and --ablate texts past any model, of huge digits or many items: refused at
                    once (under RANGE_SECONDS), never expanded
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

from ..library.cases import call
from ..tally import Tally

RANGE_SECONDS = 1.0
"""A range or list refused takes less than this (it is refused before it is expanded or read in full)."""


def _specials(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    os.mkfifo(folder / "fifo")
    os.mknod(folder / "full", stat.S_IFCHR | 0o600, os.makedev(1, 7))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(folder / "sock"))
    s.close()
    (folder / "link_full").symlink_to("full")
    return {name: folder / name for name in ("fifo", "full", "sock", "link_full")}


def _kept(tally: Tally, label: str, path: Path, before: os.stat_result) -> None:
    after = os.lstat(path)
    if (stat.S_IFMT(after.st_mode), after.st_ino) != (stat.S_IFMT(before.st_mode), before.st_ino):
        tally.record("lost", label + " (the target)", f"{path} was replaced by a {stat.filemode(after.st_mode)}")


def special_target_cases(tally: Tally, work: Path) -> None:
    from selfattn import files
    from selfattn.explainer.views import fileset
    from selfattn.model.checkpoint import save_checkpoint
    from selfattn.model.tokenizer import WordTokenizer
    from tests.explainer.tiny import SENTENCES, tiny_model

    tokenizer = WordTokenizer.from_words(SENTENCES)
    model = tiny_model(vocab_size=tokenizer.vocab_size)
    for name, path in _specials(work / "special").items():
        for force in (False, True):
            writers = {
                "write_atomic": lambda p=path, f=force: files.write_atomic(p, b"x", force=f),
                "check_writable": lambda p=path, f=force: files.check_writable(p, force=f),
                "fileset": lambda p=path, f=force: fileset.write_all({work / "set.html": b"x", p: b"y"}, force=f),
            }
            for writer, fn in writers.items():
                label = f"{writer} onto {name} force={force}"
                before = os.lstat(path)
                call(tally, label, fn, expect="error")
                _kept(tally, label, path, before)
            if (work / "set.html").exists():
                tally.record("wrong", f"fileset onto {name} force={force}", "wrote part of the set")
                (work / "set.html").unlink()
        ckpt = work / f"ckpt_{name}"
        ckpt.mkdir()
        target = ckpt / "model.safetensors"
        target.symlink_to(path)  # a checkpoint file that is a link to the FIFO, the device, the socket
        before = os.lstat(target)
        for force in (False, True):
            label = f"save_checkpoint over a {name} model.safetensors force={force}"
            call(tally, label, lambda c=ckpt, f=force: save_checkpoint(model, tokenizer, c, force=f), expect="error")
            _kept(tally, label, target, before)


def _killed_write(target: Path) -> Path | None:
    code = (
        "import os, signal\nfrom pathlib import Path\nfrom selfattn import files\n"
        "files.os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
        f"files.write_atomic(Path({str(target)!r}), b'half', force=True)\n"
    )
    src = str(Path(__file__).resolve().parents[3] / "src")
    subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": src}, timeout=60)
    left = [p for p in target.parent.iterdir() if p.name.startswith(f".{target.name}.") and p.name.endswith(".tmp")]
    if len(left) != 1:
        return None
    old = time.time() - 3600
    os.utime(left[0], (old, old))
    return left[0]


def stale_temp_cases(tally: Tally, work: Path) -> None:
    from selfattn import files

    folder = work / "stale"
    folder.mkdir()
    for name in ("report.html", "trace.npz", "a b.png", ".hidden", "x.tmp"):
        target = folder / name
        left = _killed_write(target)
        label = f"a killed write to {name!r}, then another"
        if left is None:
            tally.record("wrong", label, "the killed write left no temporary file to test with")
            continue
        others = [folder / f".{name}.backup", folder / f".{name}.0123abcd.tmp.keep", folder / f"{name}.0123abcd.tmp"]
        for other in others:
            other.write_bytes(b"mine")
        fd, live = files._new_temp_file(folder / name)
        old = time.time() - 3600
        os.utime(live, (old, old))
        try:
            call(tally, label, lambda t=target: files.write_atomic(t, b"whole", force=True), expect="ok")
        finally:
            os.close(fd)
        if left.exists():
            tally.record("wrong", label, f"{left.name} is still there")
        lost = [o.name for o in others if not o.exists() or o.read_bytes() != b"mine"] + (
            [] if live.exists() else [live.name + " (a live writer's)"]
        )
        if lost:
            tally.record("lost", label, f"removed or changed {lost}")
        for other in [*others, live]:
            other.unlink(missing_ok=True)


def gguf_key_cases(tally: Tally, work: Path) -> None:
    import numpy as np
    import torch
    from gguf import GGUFWriter

    from selfattn.explainer.source import gguf_cache

    path = work / "m.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    rng = np.random.default_rng(0)
    for i in range(3):
        writer.add_tensor(f"blk.0.t{i}.weight", rng.standard_normal(3 << 20).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    size = path.stat().st_size
    for where in (0, 40, size // 2, (33 << 20) + 7, size - 1):
        before = os.stat(path)
        key = gguf_cache._key(gguf_cache.identity(path, torch.float32))
        with open(path, "r+b") as f:
            f.seek(where)
            byte = f.read(1)
            f.seek(where)
            f.write(bytes([byte[0] ^ 0x01]))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        label = f"GGUF byte {where:,} of {size:,} changed, size and mtime kept"
        call(
            tally,
            label,
            lambda: gguf_cache._key(gguf_cache.identity(path, torch.float32)),
            lambda new, k=key: "the same key: the old weights would be loaded" if new == k else None,
            expect="ok",
        )


def range_cases(tally: Tally) -> None:
    import argparse

    from selfattn.cli_args import _layers_list
    from selfattn.explainer.experiments import pairs, parse_heads

    def timed(fn):
        def run():
            start = time.monotonic()
            try:
                return fn()
            finally:
                if time.monotonic() - start > RANGE_SECONDS:
                    raise RuntimeError(f"took {time.monotonic() - start:.1f} s to answer")

        return run

    def layers(text):
        try:
            return _layers_list(text)
        except argparse.ArgumentTypeError as e:  # argparse's refusal as the library's, raised where it was
            raise ValueError(str(e)).with_traceback(e.__traceback__) from None

    for text in ["0-99999999", "0-" + "9" * 40, "512", "0-512", "3,600", "²", "٣", "1-0", "0-5," * 10 + "999999"]:
        call(tally, f"--layers {text[:40]!r}", timed(lambda t=text: layers(t)), expect="error")
    call(tally, "--layers 0-511", timed(lambda: layers("0-511")), lambda v: None if len(v) == 512 else v, "ok")
    many = ",".join(f"{i}.{j}" for i in range(100) for j in range(200))
    for text in [many, "9" * 5000 + ".1", "0." + "9" * 5000, "512.0", "0.1024", "².1", "1.1,1.1"]:
        call(tally, f"--ablate {text[:40]!r}", timed(lambda t=text: parse_heads(t)), expect="error")
        call(tally, f"ablate= {text[:40]!r}", timed(lambda t=text: pairs(t)), expect="error")
    call(tally, "ablate= 2,000 pairs", timed(lambda: pairs([[0, h] for h in range(2000)])), expect="error")


def run(work: Path) -> Tally:
    work.mkdir(parents=True, exist_ok=True)
    tally = Tally("files, GGUF key, ranges (library)")
    special_target_cases(tally, work)
    stale_temp_cases(tally, work)
    gguf_key_cases(tally, work)
    range_cases(tally)
    return tally
