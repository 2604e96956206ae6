"""The files of `selfattn explain` (--npz, --html, --csv, --plots) as one set: checked before the work, written whole.

    check(npz=, html=, csv=, plots=, force=, selected=)     before the model is loaded: every path known so far
    files = render(e, doc, npz=, html=, csv=, table=, plots=, lang=)
                                                    {Path: bytes}: every file drawn in memory, every path checked
    write_all(files, force=)                        each to a temporary name, then all renamed (`fileset`)

A refusal (an existing file without --force, the same path given twice, a folder where a file goes) comes
before anything is written: the picture of the shown head is named after it (head-L1-H2.png), so when the
head is picked by the rule that name is checked once the model has run, still before the first file is
written. A failure while writing (a full disk) leaves the files as they were, with no partial set and no
temporary file (`write_all`).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

from ...files import check_target, check_writable
from . import plots
from .fileset import write_all

if TYPE_CHECKING:
    from ..result import Explanation

__all__ = ["check", "render", "write_all", "arrays_bytes"]


def _planned(npz, html, plots_dir, selected, csv=None) -> list[tuple[str, Path]]:
    """(flag, path) of every file the flags will write that can be named now (`selected`: (layer, head) or None)."""
    out = [(flag, Path(p)) for flag, p in (("--npz", npz), ("--html", html), ("--csv", csv)) if p is not None]
    if plots_dir is not None:
        out += [("--plots", Path(plots_dir) / name) for name in plots.file_names(selected)]
    return out


def check(
    *, npz=None, html=None, plots_dir=None, force: bool = False, selected: tuple[int, int] | None = None, csv=None
) -> None:
    """Refuse (OSError/ValueError) what the writes would refuse: an existing file without `force`, a folder
    that does not exist or cannot be written, a --plots path that is a file, one path named twice."""
    from ...files import check_creatable  # plots are written into a folder made when missing

    if plots_dir is not None and Path(plots_dir).exists() and not Path(plots_dir).is_dir():
        check_target(plots_dir)  # a FIFO or a device is named as what it is
        raise NotADirectoryError(f"--plots {plots_dir} is a file; give a folder")
    seen: dict[Path, str] = {}
    planned = _planned(npz, html, plots_dir, selected, csv)
    folders = {parent: f"{flag} {path}" for flag, path in planned for parent in path.resolve().parents}
    for flag, path in planned:
        where = path.resolve()
        if where in seen:
            raise ValueError(f"{flag} {path} is also the file of {seen[where]}: give each output its own path")
        if where in folders:  # --npz X --plots X: a file where another output needs a folder
            raise ValueError(f"{flag} {path} is the folder of {folders[where]}: give each output its own path")
        seen[where] = f"{flag} {path}"
        if flag == "--plots":
            check_creatable(path, force=force)
        else:
            check_writable(path, force=force)


def render(
    e: Explanation,
    doc: dict | None,
    *,
    npz=None,
    html=None,
    plots_dir=None,
    force: bool = False,
    lang: str = "zh",
    arrays=None,
    csv=None,
    table=None,
) -> dict:
    """{path: bytes} of every file asked for: the pictures drawn from `e` (`plots.render`), the page from `doc`
    (its document, `export.document`; None when the page is not asked for), the .npz from `arrays` ({name: array},
    `checkable.npz_arrays`; default every tensor of every layer of `e`), the .csv at `csv` from `table`
    (`csv_table.rows`' rows, written as `csv_table.csv_bytes`); every path
    checked again (`check`), the shown head's pictures included, before anything is drawn."""
    selected = (e.shown.layer, e.shown.head)
    check(npz=npz, html=html, plots_dir=plots_dir, force=force, selected=selected, csv=csv)
    files: dict[Path, bytes] = {}
    if csv is not None:
        from .csv_table import csv_bytes

        if table is None:
            raise ValueError("--csv needs its table: give the rows (csv_table.rows)")
        files[Path(csv)] = csv_bytes(table)
    if npz is not None:
        from .checkable import npz_arrays

        files[Path(npz)] = arrays_bytes(npz_arrays(e) if arrays is None else arrays)
    if html is not None:
        from .report import render_html

        files[Path(html)] = render_html(_the(doc) | {"lang": lang}).encode("utf-8")  # it speaks --lang
    if plots_dir is not None:
        files |= {Path(plots_dir) / name: data for name, data in plots.render(e, lang=lang).items()}
    return files


def _the(doc: dict | None) -> dict:
    """The document a page is drawn from; without one, a ValueError."""
    if doc is None:
        raise ValueError("the page is drawn from the page's document: give doc (export.document)")
    return doc


def arrays_bytes(arrays: dict) -> bytes:
    """{name: array} as the bytes of a compressed .npz: written to the path given as it is (NumPy's savez would add
    ".npz" to a file name without it)."""
    import numpy as np

    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()
