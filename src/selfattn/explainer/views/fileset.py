"""Several files written as one set: all of them, or none changed (`selfattn explain --plots`, --npz, --html).

`files.write_atomic` makes one file whole; a set needs more: a picture set of which the disk took 3 of 4
is as broken as a half-written picture. So every file is first written to a temporary name beside its
target, and only when all of them are on disk are they renamed, one after the other.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from ...files import check_writable, write_atomic

__all__ = ["write_all"]


def write_all(files: dict, *, force: bool = False) -> list[Path]:
    """Write every {path: bytes} as one set: first each to a temporary name beside it (where a full disk
    fails, and then every temporary file is removed and no target touched), then each renamed onto its
    path. An existing path is replaced only with `force`. Returns the paths, in order."""
    parts: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            check_writable(path, force=force)
            part = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
            write_atomic(part, data)
            parts.append((part, path))
        for _, path in parts:
            if path.exists() and not force:  # appeared while we wrote
                raise FileExistsError(f"{path} already exists; pass --force to overwrite")
        for part, path in parts:
            os.replace(part, path)
    finally:
        for part, _ in parts:
            part.unlink(missing_ok=True)
    return [Path(p) for p in files]
