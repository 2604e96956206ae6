"""A GGUF file's dequantized weights, kept in the cache folder so that the next command loads them in seconds.

    key = identity(path, dtype)         what names an entry (below)
    folder = find(path, dtype)          the entry of this file, verified; None when there is none or it is not
                                        trusted (then it is removed, and the caller dequantizes and stores again)
    cached_config(path)                 the config of any entry of this file (its metadata not parsed again)
    store(path, dtype, model, tokenizer, config)   writes the entry once after a GGUF load
    entries(root) / evict(root, limit)  the entries, oldest first; the oldest removed beyond `limit` bytes

An entry is a folder `cache_dir()/gguf/<key>/`, an ordinary transformers folder: config.json (the config read
from the GGUF metadata), model.safetensors (the state dict as loaded, tied tensors once), the tokenizer's
files, and manifest.json, written last, naming the identity and each file's size and CRC-32. It is built in
a temporary folder and renamed into place, so a reader sees a whole entry or none.

Identity: the SHA-256 of every byte of the file (read once, in CHUNK pieces: a 98 MB file in about 0.1 s, where
dequantizing it takes seconds) and its size, the dtype, and the versions of transformers, gguf and torch (which
dequantize and convert), with this module's FORMAT. A byte changed anywhere in the file, whatever its size and
mtime say (`touch -r`, `cp -p` and `rsync -t` put an old mtime back), or a new transformers, gets a new entry;
the same bytes under another name or time find the entry they made. A file is hashed once while its path,
device, inode, size, mtime and ctime stay the same (a write changes the ctime, which no one can set back): within
a process, and across commands through a small entry of `stamps.Entries` ("gguf_sha"); an entry is stored only if
the file did not change since it was first hashed (it may have changed under the load), so the key always names
the bytes the weights came from.

Verified on read: every file of the manifest is there with its size and CRC-32; a missing, truncated or
changed file, or an unreadable manifest, and the entry is removed, never trusted. The files' CRCs are read once
per stamp of them (an entry of "gguf_verified" remembers that files with those stamps matched the manifest): a
command after the first reads 0.23 s less of SmolLM2's 540 MB. The CRC catches damage done by writing (a copy,
a restore, a killed writer), which moves the ctime; it is no defence against someone who can write the cache
folder (who could rewrite the manifest too), nor, after the first check, against a disk that flips bits.

Bounded: after a store, the oldest entries (by last use: a hit touches its manifest) are removed until the
folder holds at most `limits.GGUF_CACHE_BYTES`; an entry larger than that alone is not stored.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
import zlib
from pathlib import Path

import torch

from ...dirs import cache_dir
from ...files import NEW_FILE_MODE, open_regular, sync_folder, temp_folder
from ...kernels.notice import LOGGER
from ...limits import GGUF_CACHE_BYTES, MAX_MANIFEST_BYTES
from . import stamps

__all__ = [
    "FORMAT",
    "root",
    "identity",
    "find",
    "cached_config",
    "store",
    "entries",
    "evict",
    "WEIGHTS",
    "MANIFEST",
]

FORMAT = "selfattn-gguf-cache-2"
"""Version 2: the key hashes the whole file (version 1 hashed its first 32 MiB, with its mtime)."""
CHUNK = 8 << 20
"""Bytes read at a time when hashing."""
HASHED_FILES = 16
"""Files whose hash one process remembers (by inode, size, mtime and ctime)."""
WEIGHTS = "model.safetensors"
MANIFEST = "manifest.json"


def root() -> Path:
    """The folder of the entries: `selfattn.dirs.cache_dir()`/gguf."""
    return cache_dir() / "gguf"


def _versions() -> dict[str, str]:
    """The installed versions of what reads, dequantizes and converts the weights (read without importing)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("transformers", "gguf", "torch"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "absent"
    return found


_hashed: dict[Path, tuple[tuple[int, ...], int, str]] = {}
"""{resolved path: (its stat when hashed, when it was hashed (ns), the SHA-256 of its bytes)}."""
_hashed_lock = threading.Lock()
RACY_NS = 2 * 10**9
"""A file whose ctime is this close to the time it was hashed is hashed again: file times tick in steps of a
few milliseconds, so a write just after the hash can leave them as they were (git's "racy" files)."""


def _stamp(stat: os.stat_result) -> tuple[int, ...]:
    """What changes when a file's bytes do: a write sets the ctime to now (utime cannot set it back)."""
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def _remembered(path: Path) -> str | None:
    """The SHA-256 this process last computed for `path`, or None."""
    with _hashed_lock:
        known = _hashed.get(Path(os.path.realpath(path)))
    return None if known is None else known[2]


def _content_hash(path: Path) -> tuple[int, str]:
    """(size, SHA-256 of every byte) of the regular file `path`; a file hashed before by this process and not
    changed since (`_stamp`, and not within RACY_NS of that hash) is not read again."""
    with open_regular(path, what="GGUF file") as f:
        before = os.fstat(f.fileno())
        key = Path(os.path.realpath(path))
        with _hashed_lock:
            known = _hashed.get(key)
        if known is not None and known[0] == _stamp(before) and before.st_ctime_ns < known[1] - RACY_NS:
            return before.st_size, known[2]
        named = {"file": str(key), "stamp": list(_stamp(before))}
        kept = stamps.Entries(SHA_ENTRIES).read(named, whole=lambda value: _whole_hash(value, before))
        if kept is not None:  # hashed by an earlier command, unchanged since
            with _hashed_lock:
                _hashed[key] = (_stamp(before), kept["hashed_at"], kept["sha256"])
            return before.st_size, kept["sha256"]
        hashed_at = time.time_ns()
        digest = hashlib.sha256()
        size = 0
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
        after = os.fstat(f.fileno())
    if _stamp(after) != _stamp(before) or size != before.st_size:
        raise ValueError(f"{path} changed while it was being read ({size:,} bytes read); load it again")
    with _hashed_lock:
        if len(_hashed) >= HASHED_FILES and key not in _hashed:
            _hashed.pop(next(iter(_hashed)))
        _hashed[key] = (_stamp(after), hashed_at, digest.hexdigest())
    if after.st_ctime_ns < hashed_at - RACY_NS:
        stamps.Entries(SHA_ENTRIES).write(named, {"size": size, "sha256": digest.hexdigest(), "hashed_at": hashed_at})
    return size, digest.hexdigest()


SHA_ENTRIES, VERIFIED_ENTRIES = "gguf_sha", "gguf_verified"
"""The kinds of `stamps.Entries` that keep a GGUF file's SHA-256 and a cache entry's verified CRCs across commands."""


def _whole_hash(value, stat: os.stat_result) -> bool:
    """Whether a kept hash is one of this file as it is: its size, a SHA-256, taken after the file's last change
    (not within RACY_NS of it)."""
    return (
        isinstance(value, dict)
        and value.get("size") == stat.st_size
        and isinstance(value.get("sha256"), str)
        and len(value["sha256"]) == 64
        and isinstance(value.get("hashed_at"), int)
        and stat.st_ctime_ns < value["hashed_at"] - RACY_NS
    )


def identity(path: Path, dtype: torch.dtype) -> dict:
    """What names the entry of the GGUF file `path` loaded in `dtype` (see the module's docstring)."""
    size, sha = _content_hash(Path(path))
    return {
        "format": FORMAT,
        "size": size,
        "sha256": sha,
        "dtype": str(dtype).removeprefix("torch."),
        **_versions(),
    }


def _key(ident: dict) -> str:
    """The entry's folder name: a hash of the file's identity, then the dtype (the entries of one file in several
    dtypes share the prefix, and any of them gives its config, `cached_config`)."""
    file = {k: v for k, v in ident.items() if k != "dtype"}
    return hashlib.sha256(json.dumps(file, sort_keys=True).encode()).hexdigest()[:32] + "-" + ident["dtype"]


def _crc(path: Path) -> int:
    crc = 0
    with open_regular(path, what="cache file") as f:
        while chunk := f.read(CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def _manifest(folder: Path) -> dict | None:
    """The manifest of an entry, or None when it is missing or unreadable."""
    try:
        with open_regular(folder / MANIFEST, what="cache manifest") as f:
            data = json.loads(f.read(MAX_MANIFEST_BYTES + 1)[:MAX_MANIFEST_BYTES])
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _verified(folder: Path, ident: dict) -> str | None:
    """Why the entry in `folder` is not to be trusted, or None when every file is as the manifest says."""
    manifest = _manifest(folder)
    if manifest is None:
        return "no readable manifest"
    if manifest.get("identity") != ident:
        return "its manifest names another file"
    files = manifest.get("files")
    if not isinstance(files, dict) or WEIGHTS not in files:
        return "its manifest lists no weights"
    bad = [name for name, want in files.items() if "/" in name or not isinstance(want, dict)]  # JSON keys: str
    if bad:
        return f"its manifest names a bad file {bad[0]!r}"
    named = {"manifest": files, "identity": ident, "stamp": stamps.stamp(folder / name for name in files)}
    kept = stamps.Entries(VERIFIED_ENTRIES)
    if named["stamp"] is not None and kept.read(named, whole=_verified_after(folder, files)) is not None:
        return None  # these files, unchanged since, matched the manifest before
    checked_at = time.time_ns()
    for name, want in files.items():
        path = folder / name
        try:
            size = path.stat().st_size
            if size != want.get("size"):
                return f"{name} has {size:,} bytes, the manifest says {want.get('size')}"
            if _crc(path) != want.get("crc32"):
                return f"{name} does not have the CRC-32 of the manifest"
        except (OSError, ValueError) as e:
            return f"{name} cannot be read ({e})"
    if named["stamp"] is not None and named["stamp"] == stamps.stamp(folder / name for name in files):
        kept.write(named, checked_at)
    return None


def _verified_after(folder: Path, files: dict):
    """whole(value) for a kept verification: when it was checked (ns), after every file's last change (not within
    RACY_NS of it)."""

    def whole(value) -> bool:
        try:
            newest = max(os.stat(folder / name).st_ctime_ns for name in files)
        except OSError:
            return False
        return isinstance(value, int) and newest < value - RACY_NS

    return whole


def find(path: Path, dtype: torch.dtype) -> Path | None:
    """The verified entry of the GGUF file `path` in `dtype`, or None (an untrusted one is removed first)."""
    ident = identity(path, dtype)
    folder = root() / _key(ident)
    if not folder.is_dir():
        return None
    why = _verified(folder, ident)
    if why is not None:
        LOGGER.info("selfattn: the cached weights of %s are not trusted (%s): dequantizing again", path.name, why)
        shutil.rmtree(folder, ignore_errors=True)
        return None
    try:
        os.utime(folder / MANIFEST)  # last use: what eviction orders by
    except OSError:
        pass
    return folder


def cached_config(path: Path) -> dict | None:
    """The config of the GGUF file `path` from any entry of it (its config.json checked against the manifest),
    or None: read without parsing the file's metadata again."""
    ident = identity(path, torch.float32)
    prefix = _key(ident).rsplit("-", 1)[0]
    for folder in sorted(root().glob(prefix + "-*")):
        manifest = _manifest(folder)
        if manifest is None or {k: v for k, v in (manifest.get("identity") or {}).items() if k != "dtype"} != {
            k: v for k, v in ident.items() if k != "dtype"
        }:
            continue
        want = (manifest.get("files") or {}).get("config.json")
        try:
            raw = (folder / "config.json").read_bytes()
            if not isinstance(want, dict) or len(raw) != want.get("size") or zlib.crc32(raw) != want.get("crc32"):
                continue
            data = json.loads(raw)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return None


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, NEW_FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _sync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def store(path: Path, dtype: torch.dtype, model: torch.nn.Module, tokenizer, config: dict) -> Path | None:
    """Write the entry of the GGUF file `path` (its `model` loaded in `dtype`, its `tokenizer` and `config`)
    and evict the oldest beyond GGUF_CACHE_BYTES. Returns its folder, or None where it is not stored: larger
    than the limit alone, or the cache folder cannot be written (the model is still used, only not kept)."""
    from safetensors.torch import save_file

    from ...model.safetensors_io import _tied_names

    first_seen = _remembered(path)  # hashed by `find` before the load, when it ran in this process
    ident = identity(path, dtype)
    if first_seen is not None and first_seen != ident["sha256"]:  # the weights may be of other bytes
        LOGGER.info("selfattn: %s is not cached: it changed while it was loaded", path.name)
        return None
    first, _ = _tied_names(model)
    size = sum(t.numel() * t.element_size() for t in first.values())
    if size > GGUF_CACHE_BYTES:
        LOGGER.info("selfattn: %s is not cached: %s bytes, over the cache limit", path.name, f"{size:,}")
        return None
    base = root()
    final = base / _key(ident)
    try:
        base.mkdir(parents=True, exist_ok=True)
        tmp = temp_folder(base, final.name)
    except OSError as e:
        LOGGER.info("selfattn: %s is not cached: %s", path.name, e)
        return None
    try:
        tensors = {name: t.detach().to("cpu").contiguous() for name, t in first.items()}
        # written from the tensors' own memory (`save` would first build the whole file as bytes: a second copy
        # of the weights at the command's peak); "format" is what transformers reads
        save_file(tensors, str(tmp / WEIGHTS), metadata={"format": "pt"})
        _sync_file(tmp / WEIGHTS)
        del tensors
        _write(tmp / "config.json", json.dumps(config, ensure_ascii=False, indent=1).encode())
        tokenizer.save_pretrained(str(tmp))
        files = {p.name: {"size": p.stat().st_size, "crc32": _crc(p)} for p in sorted(tmp.iterdir()) if p.is_file()}
        _write(tmp / MANIFEST, json.dumps({"identity": ident, "source": str(path), "files": files}, indent=1).encode())
        sync_folder(tmp)
        os.rename(tmp, final)
        sync_folder(base)
    except OSError as e:
        if final.is_dir():  # another process stored it first: its entry stays
            return final
        LOGGER.info("selfattn: %s is not cached: %s", path.name, e)
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    evict(base, GGUF_CACHE_BYTES, keep=final)
    return final


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def entries(base: Path) -> list[tuple[float, int, Path]]:
    """(last use, bytes, folder) of each entry under `base`, oldest first; temporary folders left by a
    killed writer count too (as used when they were last written), so they are removed in turn."""
    found: list[tuple[float, int, Path]] = []
    if not base.is_dir():
        return found
    for folder in base.iterdir():
        if not folder.is_dir():
            continue
        stamp = folder / MANIFEST
        try:
            used = (stamp if stamp.exists() else folder).stat().st_mtime
            found.append((used, _bytes(folder), folder))
        except OSError:
            continue
    return sorted(found, key=lambda e: e[0])


def evict(base: Path, limit: int, *, keep: Path | None = None) -> list[Path]:
    """Remove the oldest entries under `base` until they hold at most `limit` bytes (never `keep`); the removed."""
    found = entries(base)
    total = sum(size for _, size, _ in found)
    removed = []
    for _, size, folder in found:
        if total <= limit:
            break
        if folder == keep:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        LOGGER.info("selfattn: removed the cached weights %s (%s bytes) to stay under the limit", folder, f"{size:,}")
        total -= size
        removed.append(folder)
    return removed
