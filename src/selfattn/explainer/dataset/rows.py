"""A dataset of prompts read and checked: a JSONL or CSV file (or rows given in Python) → `PromptRow`s.

    read_rows(path)                 the file's rows: .jsonl (one JSON object a line) or .csv (a header line)
    check_rows(rows, source)        rows given as mappings ({"text": …, "corrupted": …}), checked alike

Fields (FIELDS): `text` (required), `corrupted` (the same prompt changed, for activation patching: the same token
length as the text), `target` and `foil` (the two tokens of the logit difference target − foil at the last
position, both or neither; JSONL may give a token id). Every row is checked before any model runs; a bad one is a
ValueError naming the file, the line and the field. The file's size (DATASET_BYTES) and its row count
(MAX_DATASET_ROWS) are bounded before they are read; blank lines of a JSONL file are skipped.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...files import read_text
from ...limits import DATASET_BYTES, MAX_DATASET_ROWS
from ..session import check_text

__all__ = ["FIELDS", "FORMATS", "PromptRow", "read_rows", "check_rows"]

FIELDS = ("text", "corrupted", "target", "foil")
"""The fields a row may hold, in the order the results and the CSV name them."""
FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}
"""A dataset's suffix → how it is read."""


@dataclass(frozen=True)
class PromptRow:
    """One prompt of a dataset.

    text       the prompt (clean, for patching)
    corrupted  the prompt changed (activation patching runs where it is given), or None
    target, foil  the tokens of the logit difference (text such as " Mary", or an id), both or None
    line       where it was read: the file's line (JSONL, CSV) or the row's number from 1 (rows given in Python)"""

    text: str
    corrupted: str | None = None
    target: str | int | None = None
    foil: str | int | None = None
    line: int = 0

    def fields(self) -> dict:
        """{field: value} of FIELDS (None where not given): what the results file keys a prompt by."""
        return {name: getattr(self, name) for name in FIELDS}


def read_rows(path: str | os.PathLike) -> list[PromptRow]:
    """The checked rows of the dataset file `path` (the module doc): a ValueError names the file, the line and the
    field of the first bad row; a file over DATASET_BYTES or MAX_DATASET_ROWS rows is refused before it is parsed."""
    path = Path(path)
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise ValueError(f"{path}: a dataset is a .jsonl or a .csv file, got the suffix {path.suffix or '(none)'!r}")
    content = read_text(path, max_bytes=DATASET_BYTES, what="dataset", encoding="utf-8-sig")
    numbered = _jsonl(path, content) if kind == "jsonl" else _csv(path, content)
    return check_rows(numbered, str(path), numbered=True)


def _jsonl(path: Path, content: str) -> list[tuple[int, Mapping]]:
    """(line, object) of each non-blank line."""
    out: list[tuple[int, Mapping]] = []
    for number, line in enumerate(content.splitlines(), start=1):
        if not line.strip():
            continue
        _count(path, len(out))
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError, ValueError) as e:
            raise ValueError(f"{path}, line {number}: not a JSON object ({e.__class__.__name__})") from None
        if not isinstance(item, dict):
            raise ValueError(f"{path}, line {number}: expected a JSON object, got {type(item).__name__}")
        out.append((number, item))
    return out


def _csv(path: Path, content: str) -> list[tuple[int, Mapping]]:
    """(line, {column: cell}) of each row after the header; an empty cell is no value."""
    reader = csv.reader(io.StringIO(content, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path}: empty, expected a header line naming the columns ({', '.join(FIELDS)})")
        header = [name.strip() for name in header]
        _known(path, 1, header)
        if len(set(header)) != len(header):
            raise ValueError(f"{path}, line 1: a column is named twice in the header {header}")
        out: list[tuple[int, Mapping]] = []
        for cells in reader:
            if not any(c.strip() for c in cells):
                continue
            _count(path, len(out))
            if len(cells) != len(header):
                raise ValueError(
                    f"{path}, line {reader.line_num}: {len(cells)} cells, the header names {len(header)} columns"
                )
            out.append((reader.line_num, {k: v for k, v in zip(header, cells, strict=True) if v != ""}))
    except csv.Error as e:
        raise ValueError(f"{path}, line {reader.line_num}: not CSV ({e})") from None
    return out


def _count(path: Path | str, held: int) -> None:
    if held >= MAX_DATASET_ROWS:
        raise ValueError(f"{path}: more than {MAX_DATASET_ROWS:,} prompts, the most a dataset holds")


def _known(source, line: int, names: Iterable[str]) -> None:
    unknown = [n for n in names if n not in FIELDS]
    if unknown:
        raise ValueError(f"{source}, line {line}: unknown field {unknown[0]!r:.80}; a row holds {', '.join(FIELDS)}")


def check_rows(rows, source: str = "rows", *, numbered: bool = False) -> list[PromptRow]:
    """`rows` (mappings of FIELDS; with `numbered`, (line, mapping) pairs) as PromptRows, each checked: `text` a
    text explain accepts, `corrupted` one too, `target` and `foil` tokens (text or id), both or neither; either
    every row has a corrupted text or none has. A ValueError names `source`, the line (or row) and the field."""
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, (list, tuple)):
        raise TypeError(f"rows must be a list of mappings such as {{'text': …}}, got {type(rows).__name__}")
    if len(rows) > MAX_DATASET_ROWS:
        raise ValueError(f"{source}: {len(rows):,} prompts, more than the {MAX_DATASET_ROWS:,} a dataset holds")
    pairs = rows if numbered else list(enumerate(rows, start=1))
    where = "line" if numbered else "row"
    out = [_row(source, f"{where} {number}", number, item) for number, item in pairs]
    if not out:
        raise ValueError(f"{source}: holds no prompt; give one row per prompt with at least a 'text'")
    patched = [r.corrupted is not None for r in out]
    if any(patched) and not all(patched):
        first, odd = out[patched.index(True)], out[patched.index(False)]
        raise ValueError(
            f"{source}, {where} {odd.line}: field 'corrupted' is missing, and {where} {first.line} has one: "
            "give a corrupted text on every row or on none"
        )
    return out


def _row(source: str, at: str, number: int, item) -> PromptRow:
    if not isinstance(item, Mapping):
        raise TypeError(f"{source}, {at}: a row must be a mapping such as {{'text': …}}, got {type(item).__name__}")
    bad = next((k for k in item if not isinstance(k, str) or k not in FIELDS), None)
    if bad is not None:
        raise ValueError(f"{source}, {at}: unknown field {bad!r:.80}; a row holds {', '.join(FIELDS)}")
    if item.get("text") is None:
        raise ValueError(f"{source}, {at}: field 'text' is missing; every row needs its prompt")
    values: dict[str, Any] = {}
    for name in ("text", "corrupted"):
        value = item.get(name)
        if value is None:
            continue
        try:
            values[name] = check_text(value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{source}, {at}: field {name!r}: {e}") from None
    for name in ("target", "foil"):
        value = item.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
            raise ValueError(f"{source}, {at}: field {name!r} must be a token's text or id, got {value!r:.80}")
        if isinstance(value, int) and value < 0:
            raise ValueError(f"{source}, {at}: field {name!r} is a token id, from 0, got {value}")
        values[name] = value
    if ("target" in values) != ("foil" in values):
        missing = "foil" if "target" in values else "target"
        raise ValueError(f"{source}, {at}: field {missing!r} is missing; target and foil go together")
    return PromptRow(line=number, **values)
