"""Several files written as one set: all of them, or none changed (`selfattn explain --plots`, --npz, --html).

`files.write_atomic` makes one file whole; a set needs more: a picture set of which the disk took 3 of 4
is as broken as a half-written picture. So every file is first written to a temporary name beside its
target, and only when all of them are on disk are they renamed, one after the other.
"""

from __future__ import annotations

from pathlib import Path

from ...files import Staged, check_target, check_writable, commit, discard, stage

__all__ = ["write_all"]


def write_all(files: dict, *, force: bool = False) -> list[Path]:
    """Write every {path: bytes} as one set: first each to a temporary name beside it (where a full disk
    fails, and then every temporary file is removed and no target touched), then, once every target is
    checked again (none turned into a FIFO or a device meanwhile, none appeared without `force`), each renamed
    onto its path. An existing path is replaced only with `force`, and never what is not a regular file
    (`files.check_target`). Returns the paths, in order."""
    staged: list[Staged] = []
    try:
        for path, data in files.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            check_writable(path, force=force)
            staged.append(stage(path, data))
        for part in staged:
            check_target(part.path)
            if part.path.exists() and not force:  # appeared while we wrote
                raise FileExistsError(f"{part.path} already exists; pass --force to overwrite")
        for part in staged:
            commit(part, force=force)
    finally:
        for part in staged:
            discard(part)
    return [Path(p) for p in files]
