"""What names a model read from files, and the small JSON entries kept under such names in the cache folder: what
was measured or checked once of those files, read back by the next command instead of done again.

    stamp(paths)              the files as they are now: each one's path, size, mtime, ctime, inode and device
    folder_files(folder)      the regular files of a transformers folder (its weights, config and tokenizer files)
    source_digest()           the SHA-256 of selfattn's own sources: what did the measuring and the checking
    entries = Entries(kind)   the entries of one kind, in `selfattn.dirs.cache_dir()`/kind (or a folder given)
    entries.read(named, whole=None) / entries.write(named, value) / entries.evict()

An entry is named by the SHA-256 of `named` (a JSON-able dict: the stamp and whatever else the value depends on)
with the versions of torch and transformers, torch's CPU capability and threads (which decide every float a model
computes) and `source_digest()` (so a changed checkout never reads what older code wrote). A file written since
its stamp was taken has another ctime, which no one can set back (`touch -r` and `cp -p` set the mtime only), so
files changed on disk never meet an old entry.

Read back only whole: at most MAX_ENTRY_BYTES, naming its own key, the SHA-256 of its value as written, and what
the caller's `whole` accepts; anything else is ignored (and replaced by the next write). Written atomically; at
most ENTRIES per kind, the least recently used (a hit touches its file) removed first. A folder that cannot be
written is left as it is: the next command does the work again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from ...dirs import cache_dir
from ...files import read_json, write_atomic
from ...limits import MAX_ENTRY_BYTES

__all__ = ["FORMAT", "ENTRIES", "Entries", "stamp", "folder_files", "source_digest"]

FORMAT = "selfattn-entry-1"
"""The layout of an entry; a change of it changes every key."""
ENTRIES = 64
"""At most this many entries are kept per kind (the probe's some hundred kB each: a 24 × 14 model's take 0.3 MB)."""


def stamp(paths: Iterable[str | os.PathLike]) -> str | None:
    """What names these files as they are now (symlinks followed): each one's absolute path, size, mtime, ctime,
    inode and device, as JSON; None when there is none or one of them cannot be read (no entry is then read or
    kept)."""
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
    """The SHA-256 of selfattn's own sources (every .py, .cpp and .h of the package, by path). Read once per
    process (a few ms)."""
    root = Path(__file__).resolve().parents[2]
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


class Entries:
    """The entries of one `kind` ("probe", "loaded"), in `folder` (default `cache_dir()`/kind): see the module doc."""

    def __init__(self, kind: str, folder: str | os.PathLike | None = None):
        self.kind = kind
        self.folder = Path(folder) if folder is not None else cache_dir() / kind

    def key(self, named: dict) -> str:
        """The entry's name: the SHA-256 of `named`, the kind, the versions and the code (see the module doc)."""
        full = dict(named) | {
            "format": FORMAT,
            "kind": self.kind,
            "torch": torch.__version__,
            "transformers": _version("transformers"),
            "capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(),
            "selfattn": source_digest(),
        }
        return hashlib.sha256(json.dumps(full, sort_keys=True).encode()).hexdigest()

    def read(self, named: dict, whole: Callable[[Any], bool] | None = None) -> Any:
        """The value kept under `named`, or None (none kept, or one not whole: `whole(value)` False among them)."""
        key = self.key(named)
        path = self.folder / f"{key}.json"
        try:
            entry = read_json(path, max_bytes=MAX_ENTRY_BYTES, what=f"{self.kind} entry")
            value = entry.get("value")
            if entry.get("key") != key or entry.get("sha256") != _digest(value):
                return None
        except (OSError, ValueError, TypeError):
            return None
        if whole is not None and not whole(value):
            return None
        try:
            os.utime(path)  # used now: the last to be removed
        except OSError:
            pass
        return value

    def write(self, named: dict, value: Any) -> None:
        """Keep `value` (JSON-able) under `named` (nothing when it would be over MAX_ENTRY_BYTES, or holds a NaN);
        then remove the least recently used beyond ENTRIES."""
        key = self.key(named)
        try:
            data = json.dumps({"key": key, "sha256": _digest(value), "value": value}, allow_nan=False)
            if len(data) > MAX_ENTRY_BYTES:
                return
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomic(self.folder / f"{key}.json", data, force=True)
            self.evict()
        except (OSError, ValueError, TypeError):  # an unwritable folder, a NaN, a value JSON cannot hold
            pass

    def evict(self, keep: int = ENTRIES) -> list[Path]:
        """Remove the least recently used entries beyond `keep`; returns those removed."""
        found = []
        for path in self.folder.glob("*.json"):
            try:
                found.append((path.stat().st_mtime_ns, path))
            except OSError:
                continue
        removed = []
        for _, path in sorted(found)[: max(0, len(found) - keep)]:
            path.unlink(missing_ok=True)
            removed.append(path)
        return removed


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, allow_nan=False).encode()).hexdigest()
