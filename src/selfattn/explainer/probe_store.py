"""The induction probe's measures kept on disk by the commands, so that a model read from files pays the probe's
forward pass once, not on every `selfattn explain` or `selfattn heads`.

    stamp(paths)                   the files a model is read from as they are now: each one's path, size, mtime,
                                   ctime and inode (`Card.stamp`, taken by `source.build.load` before it reads them)
    store = ProbeStore()           the entries, in `selfattn.dirs.cache_dir()`/probe (or a folder given)
    store.read(ex, probe_input)    the measures kept for this model and probe, or None
    store.write(ex, probe_input, measures)

An entry is named by the SHA-256 of everything the measures depend on: the files' stamp, the model's class and
dtype, the probe's ids and keywords, the versions of torch and transformers with torch's CPU capability (which
decide every float of the forward pass), and selfattn's own code (the digest of its sources, so a changed checkout
never reads what older code measured). A file written since the stamp changes its ctime, which no one can set back
(`touch -r` and `cp -p` set the mtime only), so a model changed on disk never meets an old entry.

What a stamp cannot see is a weight changed in memory after the load (a `p.data[...] = 0` bumps no version
counter). So only the commands keep entries (`pipeline.Session(probe_store=...)`: they never change the weights
they loaded); the Python API measures the probe in each Session, from the weights as they are.

Read back only whole: at most MAX_PROBE_BYTES, the SHA-256 of its measures as written, and [layers][heads] of the
model's shape; anything else is ignored (and replaced by the next write). Written atomically; at most PROBE_ENTRIES
entries, the least recently used (a hit touches its file) removed first.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

import torch

from ..dirs import cache_dir
from ..files import read_json, write_atomic
from ..limits import MAX_PROBE_BYTES
from .formula import shape

__all__ = ["FORMAT", "PROBE_ENTRIES", "ProbeStore", "stamp", "source_digest"]

FORMAT = "selfattn-probe-1"
"""The layout of an entry; a change of it changes every key."""
PROBE_ENTRIES = 64
"""At most this many entries are kept (each some hundred kB: a 24 × 14 model's measures take 0.3 MB)."""


def stamp(paths: Iterable[str | os.PathLike]) -> str | None:
    """What names these files as they are now (symlinks followed): each one's absolute path, size, mtime, ctime,
    inode and device, as JSON; None when one of them cannot be read (no entry is then read or kept)."""
    out = []
    for path in sorted(os.path.abspath(p) for p in paths):
        try:
            st = os.stat(path)
        except OSError:
            return None
        out.append([path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev])
    return json.dumps(out) if out else None


def folder_files(folder: str | os.PathLike) -> list[Path]:
    """The regular files directly in `folder` (a transformers folder: its weights, config and tokenizer files)."""
    return sorted(p for p in Path(folder).iterdir() if p.is_file())


@functools.cache
def source_digest() -> str:
    """The SHA-256 of selfattn's own sources (every .py, .cpp and .h of the package, by path): what computed the
    measures. Read once per process (2 ms)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".cpp", ".h") and p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


class ProbeStore:
    """The probe's measures on disk (see the module doc), in `folder` (default `cache_dir()`/probe)."""

    def __init__(self, folder: str | os.PathLike | None = None):
        self.folder = Path(folder) if folder is not None else cache_dir() / "probe"

    def key(self, explainer, probe_input: tuple) -> str | None:
        """The entry's name for this explainer's model and probe (`induction_probe.probe_input`), or None where the
        model was not read from files (`Card.stamp` None)."""
        files = getattr(explainer.card, "stamp", None)
        if files is None:
            return None
        _, ids, keywords, _ = probe_input
        model = explainer.model
        first = next(model.parameters(), None)
        named = {
            "format": FORMAT,
            "files": files,
            "class": f"{type(model).__module__}.{type(model).__qualname__}",
            "dtype": None if first is None else str(first.dtype),
            "ids": [int(i) for i in ids.reshape(-1)],
            "keywords": {k: _plain(v) for k, v in sorted(keywords.items())},
            "torch": torch.__version__,
            "transformers": _version("transformers"),
            "capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(),
            "selfattn": source_digest(),
        }
        return hashlib.sha256(json.dumps(named, sort_keys=True).encode()).hexdigest()

    def read(self, explainer, probe_input: tuple) -> list[list[dict]] | None:
        """The measures kept for this model and probe, or None (none kept, or one not whole: see the module doc)."""
        key = self.key(explainer, probe_input)
        if key is None:
            return None
        path = self.folder / f"{key}.json"
        try:
            entry = read_json(path, max_bytes=MAX_PROBE_BYTES, what="probe entry")
        except (OSError, ValueError):
            return None
        measures = entry.get("measures")
        if entry.get("key") != key or entry.get("sha256") != _digest(measures) or not _shaped(measures, explainer):
            return None
        try:
            os.utime(path)  # used now: the last to be removed
        except OSError:
            pass
        return measures

    def write(self, explainer, probe_input: tuple, measures: list[list[dict]]) -> None:
        """Keep `measures` for this model and probe (nothing where the model was not read from files, or the
        entry would be over MAX_PROBE_BYTES); then remove the least recently used beyond PROBE_ENTRIES. A folder
        that cannot be written is left as it is: the next command measures the probe again."""
        key = self.key(explainer, probe_input)
        if key is None:
            return
        try:
            data = json.dumps({"key": key, "sha256": _digest(measures), "measures": measures}, allow_nan=False)
            if len(data) > MAX_PROBE_BYTES:
                return
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomic(self.folder / f"{key}.json", data, force=True)
            self.evict()
        except (OSError, ValueError, TypeError):  # unwritable folder, a NaN, a value JSON cannot hold
            pass

    def evict(self, keep: int = PROBE_ENTRIES) -> list[Path]:
        """Remove the least recently used entries beyond `keep`; returns those removed."""
        entries = []
        for path in self.folder.glob("*.json"):
            try:
                entries.append((path.stat().st_mtime_ns, path))
            except OSError:
                continue
        removed = []
        for _, path in sorted(entries)[: max(0, len(entries) - keep)]:
            path.unlink(missing_ok=True)
            removed.append(path)
        return removed


def _digest(measures) -> str:
    return hashlib.sha256(json.dumps(measures, sort_keys=True, allow_nan=False).encode()).hexdigest()


def _shaped(measures, explainer) -> bool:
    """Whether `measures` is [layers][heads] of dicts for this explainer's model (`formula.shape`)."""
    layers, heads = shape(explainer.model)
    if not isinstance(measures, list) or len(measures) != layers:
        return False
    rows = (isinstance(row, list) and len(row) == heads and all(isinstance(m, dict) for m in row) for row in measures)
    return all(rows)


def _plain(value):
    """A model keyword as JSON: a tensor's values, anything else its repr."""
    return value.tolist() if isinstance(value, torch.Tensor) else repr(value)
