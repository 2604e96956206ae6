"""Reading and writing files, written once: bounded JSON reads, atomic writes, no silent overwrite.

read_json(path, max_bytes=...)    the size is checked before a byte is parsed; too deep a nesting is refused
open_regular(path, what=...)      a file opened for reading only if it is a regular file: a FIFO, a
                                  device or a folder is refused at once, never waited on
write_atomic(path, data, force=)  temp file in the same folder, fsync, rename: a reader sees the
                                  old file or the new one, never half of one
staged = stage(path, data)        the first half of write_atomic, for a set of files written together
commit(staged, force=) / discard(staged)   the rename (checked again just before it) / the cleanup
temp_folder(parent, name)         a new, empty folder for files that are moved into place later
check_writable(path, force=)      before a long job: refuses an existing file without --force and
                                  a folder that cannot be written, so the failure comes first
check_target(path)                refuses a path that exists and is not a regular file (below)
json_float(x)                     a float for JSON: ±inf as the strings "inf" / "-inf", NaN refused

Only a regular file is ever replaced: a FIFO, a character or block device, a socket (or a symlink to one of
them) is refused with a ValueError naming it, with or without --force, when the write is checked and again
just before the rename (a device made in between is not replaced either); a folder is refused as before.

A write killed between its temporary file and the rename leaves `.NAME.XXXXXXXX.tmp` beside the target: the
next write to that target removes it. A writer holds a lock (flock) on its temporary file until the rename, so
only files of that exact pattern that no live writer holds, and older than STALE_AFTER_S, are removed.

What is written gets the permissions a plain `open()` would give it: a new file 0666 and a new folder
0777 less the umask, a replaced file the mode it had (never mkstemp's 0600, which nobody else can read).
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import stat
import time
from pathlib import Path
from typing import NamedTuple

from .limits import MAX_JSON_BYTES

try:
    import fcntl
except ImportError:  # not a Unix: no locks, and no temporary file is ever taken for a killed write's
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "MAX_JSON_BYTES",
    "read_json",
    "open_regular",
    "write_atomic",
    "Staged",
    "stage",
    "commit",
    "discard",
    "check_target",
    "temp_folder",
    "sync_folder",
    "check_writable",
    "check_creatable",
    "json_float",
]


NEW_FILE_MODE = 0o666
NEW_FOLDER_MODE = 0o777
"""The modes `open()` and `os.mkdir` ask for; the kernel takes the umask off."""

TEMP_NAME_TRIES = 100
"""Random temporary names tried before giving up (each is 8 hex digits: a clash is already rare)."""
TEMP_HEX = 8
"""Hex digits in a temporary file's name: .NAME.XXXXXXXX.tmp."""
STALE_AFTER_S = 1.0
"""A temporary file no writer holds is removed only once this old: a new writer takes its lock microseconds
after creating it, and this leaves that moment alone."""

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


def read_text(path: str | os.PathLike, *, max_bytes: int, what: str, encoding: str = "utf-8") -> str:
    """The text of the regular file `path` (`open_regular`), refused with a ValueError naming the file when it is
    over `max_bytes` (checked before reading, and again as read: a file growing meanwhile) or not `encoding`
    ("utf-8", or "utf-8-sig" to drop a byte-order mark); FileNotFoundError if it is missing."""
    path = Path(path)
    with open_regular(path, what=what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise ValueError(f"{path}: {size:,} bytes, over the {max_bytes:,}-byte limit for a {what}")
        raw = f.read(max_bytes + 1)  # at most one byte past the limit, however big the file has grown
    if len(raw) > max_bytes:
        raise ValueError(f"{path}: grew past the {max_bytes:,}-byte limit for a {what} while being read")
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_json(path: str | os.PathLike, *, max_bytes: int = MAX_JSON_BYTES, what: str = "JSON file") -> dict:
    """The JSON object in `path`, refused with a ValueError naming the file if it is too big, too
    deep, not UTF-8, not JSON or not an object; FileNotFoundError if it is missing."""
    path = Path(path)
    text = read_text(path, max_bytes=max_bytes, what=what)
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


def _target_kind(path: Path) -> str | None:
    """What `path` is when it exists and is not a regular file (a symlink: what it points to); else None."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISLNK(mode):
        try:
            target = os.stat(path).st_mode
        except OSError:  # a dangling link: replacing it loses nothing
            return None
        return None if stat.S_ISREG(target) else f"a symlink to {_kind(target)}"
    return None if stat.S_ISREG(mode) else _kind(mode)


def check_target(path: str | os.PathLike) -> Path:
    """`path` as a Path unless it exists and is not a regular file (a FIFO, a device, a socket, a folder, or a
    symlink to one): then a ValueError naming it and what it is, whatever --force says."""
    path = Path(path)
    kind = _target_kind(path)
    if kind is not None:
        raise ValueError(f"{path} is {kind}, not a regular file: it is never written over, even with --force")
    return path


def check_writable(path: str | os.PathLike, *, force: bool = False, flag: str = "--force") -> Path:
    """`path` as a Path if it may be written now: refuses a path that is a folder (IsADirectoryError) or
    anything else that is not a regular file (ValueError, `check_target`), an existing file (unless `force`),
    and a parent folder that does not exist or cannot be written."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder; give a file name")
    check_target(path)
    if path.exists() and not force:
        raise FileExistsError(f"{path} already exists; pass {flag} to overwrite")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise FileNotFoundError(f"folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise PermissionError(f"folder {parent} is not writable")
    return path


class Staged(NamedTuple):
    """A file written in full to `tmp` beside `path`, not yet renamed; `fd` is open and holds its lock."""

    fd: int
    tmp: Path
    path: Path


def write_atomic(path: str | os.PathLike, data: bytes | str, *, force: bool = False) -> Path:
    """Write `data` to `path` through a temporary file in the same folder and a rename.

    A crash or a full disk leaves either the old file or nothing, never a truncated one; an
    existing file is replaced only with `force`, and never what is not a regular file (`check_target`)."""
    path = check_writable(path, force=force)
    staged = stage(path, data)
    try:
        return commit(staged, force=force)
    finally:
        discard(staged)


def stage(path: str | os.PathLike, data: bytes | str) -> Staged:
    """`data` written in full (fsync) to a new temporary file beside `path` (the mode of the file it will
    replace, if any), kept open and locked until `commit` or `discard`. A killed write's temporary files of
    the same target are removed first (`remove_stale_temps`)."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    remove_stale_temps(path)
    fd, tmp = _new_temp_file(path)
    try:
        if path.is_file():  # replaced: keep its mode, as writing into it would
            os.fchmod(fd, stat.S_IMODE(path.stat().st_mode))
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        discard(Staged(fd, tmp, path))
        raise
    return Staged(fd, tmp, path)


def commit(staged: Staged, *, force: bool = False) -> Path:
    """Rename a staged file onto its path: checked again first (what is not a regular file, and an existing
    file without `force`, is refused; the temporary file stays until `discard`)."""
    check_target(staged.path)
    if staged.path.exists() and not force:  # appeared while we wrote
        raise FileExistsError(f"{staged.path} already exists; pass --force to overwrite")
    os.replace(staged.tmp, staged.path)
    return staged.path


def discard(staged: Staged) -> None:
    """Close a staged file and remove its temporary name (nothing left after a commit)."""
    try:
        os.close(staged.fd)
    except OSError:
        pass
    staged.tmp.unlink(missing_ok=True)


def remove_stale_temps(path: Path) -> list[Path]:
    """Remove the temporary files (.NAME.XXXXXXXX.tmp) that killed writes to `path` left beside it: regular
    files of that exact name pattern, no live writer's (each writer holds a lock on its own), at least
    STALE_AFTER_S old. Returns those removed; nothing where there are no locks (not a Unix)."""
    if fcntl is None:
        return []
    pattern = re.compile(re.escape(f".{path.name}.") + f"[0-9a-f]{{{TEMP_HEX}}}" + re.escape(".tmp"))
    removed = []
    try:
        entries = [e for e in os.scandir(path.parent if str(path.parent) else ".") if pattern.fullmatch(e.name)]
    except OSError:
        return []
    for entry in entries:
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or time.time() - info.st_mtime < STALE_AFTER_S:
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by a live writer: BlockingIOError
            os.unlink(entry.path)
            removed.append(Path(entry.path))
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


def _new_temp_file(path: Path) -> tuple[int, Path]:
    """(descriptor, path) of a new file beside `path` named .NAME.XXXXXXXX.tmp, created with NEW_FILE_MODE
    (the umask applies, as for open()) and O_EXCL (never an existing file, never through a symlink), and
    locked (flock) so that no other write takes it for a killed write's."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(TEMP_NAME_TRIES):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(TEMP_HEX // 2)}.tmp"
        try:
            fd = os.open(tmp, flags, NEW_FILE_MODE)
        except FileExistsError:
            continue
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new inode: nobody else holds it
        return fd, tmp
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


def check_creatable(path: str | os.PathLike, *, force: bool = False) -> Path:
    """`path` as a Path if a file may be written there by a writer that creates the missing folders
    (a checkpoint save, the loss curve, `selfattn explain --plots`): `files.check_writable(path)` once its
    folder exists; before that, the nearest existing folder above it must be a writable folder."""
    path = Path(path)
    if path.parent.is_dir():
        return check_writable(path, force=force)
    above = path.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise NotADirectoryError(f"cannot create {path.parent}: {above} is not a folder")
    if not os.access(above, os.W_OK):
        raise PermissionError(f"cannot create {path.parent}: folder {above} is not writable")
    return path
