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

Identity: the file's size and mtime_ns, the SHA-256 of its first HEAD_BYTES (the header and the metadata:
config, tokenizer, tensor table — and the start of the data), the dtype, and the versions of transformers,
gguf and torch (which dequantize and convert), with this module's FORMAT. A file replaced or touched, or a
new transformers, gets a new entry.

Verified on read: every file of the manifest is there with its size and CRC-32; a missing, truncated or
changed file, or an unreadable manifest, and the entry is removed, never trusted. The CRC catches a disk's
or a killed writer's damage; it is no defence against someone who can write the cache folder (who could
rewrite the manifest too).

Bounded: after a store, the oldest entries (by last use: a hit touches its manifest) are removed until the
folder holds at most `limits.GGUF_CACHE_BYTES`; an entry larger than that alone is not stored.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zlib
from pathlib import Path

import torch

from ..dirs import cache_dir
from ..files import NEW_FILE_MODE, open_regular, sync_folder, temp_folder
from ..kernels.notice import LOGGER
from ..limits import GGUF_CACHE_BYTES

__all__ = [
    "FORMAT",
    "HEAD_BYTES",
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

FORMAT = "selfattn-gguf-cache-1"
HEAD_BYTES = 32 << 20
"""Bytes at the start of a GGUF file that are hashed: its header and metadata (the tokenizer of a 256k-token
vocabulary takes a few MiB) and the first tensors."""
CHUNK = 8 << 20
"""Bytes read at a time when hashing."""
WEIGHTS = "model.safetensors"
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 1 << 20


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


def identity(path: Path, dtype: torch.dtype) -> dict:
    """What names the entry of the GGUF file `path` loaded in `dtype` (see the module's docstring)."""
    with open_regular(path, what="GGUF file") as f:
        stat = os.fstat(f.fileno())
        head = hashlib.sha256(f.read(HEAD_BYTES)).hexdigest()
    return {
        "format": FORMAT,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "head_sha256": head,
        "head_bytes": HEAD_BYTES,
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
    for name, want in files.items():
        path = folder / name
        if not isinstance(name, str) or "/" in name or not isinstance(want, dict):
            return f"its manifest names a bad file {name!r}"
        try:
            size = path.stat().st_size
            if size != want.get("size"):
                return f"{name} has {size:,} bytes, the manifest says {want.get('size')}"
            if _crc(path) != want.get("crc32"):
                return f"{name} does not have the CRC-32 of the manifest"
        except (OSError, ValueError) as e:
            return f"{name} cannot be read ({e})"
    return None


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


def store(path: Path, dtype: torch.dtype, model: torch.nn.Module, tokenizer, config: dict) -> Path | None:
    """Write the entry of the GGUF file `path` (its `model` loaded in `dtype`, its `tokenizer` and `config`)
    and evict the oldest beyond GGUF_CACHE_BYTES. Returns its folder, or None where it is not stored: larger
    than the limit alone, or the cache folder cannot be written (the model is still used, only not kept)."""
    from safetensors.torch import save

    from ..model.safetensors_io import _tied_names

    ident = identity(path, dtype)
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
        _write(tmp / WEIGHTS, save(tensors, metadata={"format": "pt"}))  # transformers reads "format"
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
