"""Reading and writing files, written once: bounded JSON reads, atomic writes, no silent overwrite.

read_json(path, max_bytes=...)    the size is checked before a byte is parsed; too deep a nesting is refused
write_atomic(path, data, force=)  temp file in the same folder, fsync, rename: a reader sees the
                                  old file or the new one, never half of one
check_writable(path, force=)      before a long job: refuses an existing file without --force and
                                  a folder that cannot be written, so the failure comes first
json_float(x)                     a float for JSON: ±inf as the strings "inf" / "-inf", NaN refused
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

__all__ = ["MAX_JSON_BYTES", "read_json", "write_atomic", "check_writable", "json_float"]

MAX_JSON_BYTES = 64 << 20
"""Largest JSON file read by default (64 MiB): a tokenizer of a real model is a few MiB."""


def read_json(path: str | os.PathLike, *, max_bytes: int = MAX_JSON_BYTES, what: str = "JSON file") -> dict:
    """The JSON object in `path`, refused with a ValueError naming the file if it is too big, too
    deep, not UTF-8, not JSON or not an object; FileNotFoundError if it is missing."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} not found: {path}") from None
    if size > max_bytes:
        raise ValueError(f"{path}: {size:,} bytes, over the {max_bytes:,}-byte limit for a {what}")
    with open(path, "rb") as f:  # at most one byte past the limit, however big the file has grown
        raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise ValueError(f"{path}: grew past the {max_bytes:,}-byte limit for a {what} while being read")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except RecursionError:  # the decoder recurses once per level of nesting
        raise ValueError(f"{path}: JSON nested too deeply to read") from None
    except ValueError as e:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise ValueError(f"{path}: not a usable JSON file ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object at the top, got {type(data).__name__}")
    return data


def check_writable(path: str | os.PathLike, *, force: bool = False, flag: str = "--force") -> Path:
    """`path` as a Path if it may be written now: refuses an existing file (unless `force`), a path
    that is a folder, and a parent folder that does not exist or cannot be written."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder; give a file name")
    if path.exists() and not force:
        raise FileExistsError(f"{path} already exists; pass {flag} to overwrite")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise FileNotFoundError(f"folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise PermissionError(f"folder {parent} is not writable")
    return path


def write_atomic(path: str | os.PathLike, data: bytes | str, *, force: bool = False) -> Path:
    """Write `data` to `path` through a temporary file in the same folder and a rename.

    A crash or a full disk leaves either the old file or nothing, never a truncated one; an
    existing file is replaced only with `force`."""
    path = check_writable(path, force=force)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        if path.exists() and not force:  # appeared while we wrote
            raise FileExistsError(f"{path} already exists; pass --force to overwrite")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def json_float(x: float) -> float | str:
    """`x` for JSON: finite floats as they are, ±inf as "inf" / "-inf"; NaN is a bug, refused."""
    x = float(x)
    if math.isnan(x):
        raise ValueError("NaN cannot be written to JSON")
    return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")
