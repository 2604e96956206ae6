"""Reading and writing files, written once: bounded JSON reads, atomic writes, no silent overwrite.

read_json(path, max_bytes=...)    the size is checked before a byte is parsed; too deep a nesting is refused
open_regular(path, what=...)      a file opened for reading only if it is a regular file: a FIFO, a
                                  device or a folder is refused at once, never waited on
write_atomic(path, data, force=)  temp file in the same folder, fsync, rename: a reader sees the
                                  old file or the new one, never half of one
temp_folder(parent, name)         a new, empty folder for files that are moved into place later
check_writable(path, force=)      before a long job: refuses an existing file without --force and
                                  a folder that cannot be written, so the failure comes first
json_float(x)                     a float for JSON: ±inf as the strings "inf" / "-inf", NaN refused

What is written gets the permissions a plain `open()` would give it: a new file 0666 and a new folder
0777 less the umask, a replaced file the mode it had (never mkstemp's 0600, which nobody else can read).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import stat
from pathlib import Path

__all__ = [
    "MAX_JSON_BYTES",
    "read_json",
    "open_regular",
    "write_atomic",
    "temp_folder",
    "sync_folder",
    "check_writable",
    "json_float",
]

MAX_JSON_BYTES = 64 << 20
"""Largest JSON file read by default (64 MiB): a tokenizer of a real model is a few MiB."""

NEW_FILE_MODE = 0o666
NEW_FOLDER_MODE = 0o777
"""The modes `open()` and `os.mkdir` ask for; the kernel takes the umask off."""

TEMP_NAME_TRIES = 100
"""Random temporary names tried before giving up (each is 8 hex digits: a clash is already rare)."""

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | os.PathLike, *, what: str = "file"):
    """`path` opened for reading in binary ("rb"), if it is a regular file (symlinks followed).

    Opened non-blocking and checked with fstat on the open descriptor: a FIFO (whose open or read
    waits for a writer forever), a device or a folder gets a ValueError naming what it is, at once;
    FileNotFoundError if it is missing."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} not found: {path}") from None
    except IsADirectoryError:  # Windows; POSIX opens a folder and fstat says so below
        raise ValueError(f"{path} is a folder, not a {what}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ValueError(f"{path} is {_kind(mode)}, not a regular file: a {what} is read only from a regular file")
    return os.fdopen(fd, "rb")


def read_json(path: str | os.PathLike, *, max_bytes: int = MAX_JSON_BYTES, what: str = "JSON file") -> dict:
    """The JSON object in `path`, refused with a ValueError naming the file if it is too big, too
    deep, not UTF-8, not JSON or not an object; FileNotFoundError if it is missing."""
    path = Path(path)
    with open_regular(path, what=what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise ValueError(f"{path}: {size:,} bytes, over the {max_bytes:,}-byte limit for a {what}")
        raw = f.read(max_bytes + 1)  # at most one byte past the limit, however big the file has grown
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
    fd, tmp = _new_temp_file(path)
    try:
        with os.fdopen(fd, "wb") as f:
            if path.is_file():  # replaced: keep its mode, as writing into it would
                os.fchmod(f.fileno(), stat.S_IMODE(path.stat().st_mode))
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


def _new_temp_file(path: Path) -> tuple[int, Path]:
    """(descriptor, path) of a new file beside `path` named .NAME.XXXXXXXX.tmp, created with NEW_FILE_MODE
    (the umask applies, as for open()) and O_EXCL (never an existing file, never through a symlink)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(TEMP_NAME_TRIES):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, flags, NEW_FILE_MODE), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file beside {path} ({TEMP_NAME_TRIES} names taken)")


def temp_folder(parent: str | os.PathLike, name: str) -> Path:
    """A new, empty folder `parent`/.NAME.XXXXXXXX.tmp, created with NEW_FOLDER_MODE (less the umask, as
    os.mkdir gives), for files written in full before they are moved into place."""
    parent = Path(parent)
    for _ in range(TEMP_NAME_TRIES):
        folder = parent / f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            folder.mkdir(NEW_FOLDER_MODE)
        except FileExistsError:
            continue
        return folder
    raise FileExistsError(f"could not create a temporary folder in {parent} ({TEMP_NAME_TRIES} names taken)")


def sync_folder(folder: str | os.PathLike) -> None:
    """fsync a folder, so that the renames into it survive a power cut (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on a folder
        pass
    finally:
        os.close(fd)


def json_float(x: float) -> float | str:
    """`x` for JSON: finite floats as they are, ±inf as "inf" / "-inf"; NaN is a bug, refused."""
    x = float(x)
    if math.isnan(x):
        raise ValueError("NaN cannot be written to JSON")
    return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")
