"""A dataset run's results file (`--out FILE`, `out=`): each prompt's result written as it finishes, so that a run
stopped half-way resumes where it stopped.

    JSONL, UTF-8: a header line {"kind": KIND, "version", "what", "model", "run", "options"}, then one line per
    finished prompt {"index", "line", "key", "result"} (`PromptResult.as_dict`), in the order they finished.

Every write rewrites the whole file atomically (`files.write_atomic`: a temporary name, fsync, a rename), so a
killed run leaves the file as it was after its last finished prompt, never half a line.

Keys (sha256, hex): `run_key` of what was run (which experiments, their options, and the model's `fingerprint`:
its name and every parameter's name, shape, dtype and float64 sum), and each prompt's `prompt_key` (its row's
fields and the run key). A rerun with the same file reads back the prompts whose key it finds at their index and
runs the rest. A file of another run (other options or model), a prompt changed since its result was written, or a
file that is not a results file at all is refused by name: nothing is mixed or overwritten without `force`
(--force), which starts the file over (never a folder, a FIFO or a device: `files.check_target`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import torch

from ...files import check_target, check_writable, open_regular, write_atomic
from ...limits import DATASET_RESULTS_BYTES
from .rows import PromptRow

__all__ = ["KIND", "VERSION", "fingerprint", "run_key", "prompt_key", "check_apart", "ResultsFile"]

KIND = "selfattn.dataset.results"
"""The header's "kind": what marks a file as a dataset run's results."""
VERSION = 1
"""The layout of the lines; a file of another version is refused, not misread."""
FINGERPRINT_CHUNK = 1 << 20
"""Parameters summed in float64 at once by `fingerprint` (8 MiB of float64 at a time, however large the matrix)."""


def _digest(doc) -> str:
    text = json.dumps(doc, sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fingerprint(explainer) -> str:
    """The model's identity: its name and every parameter's name, shape, dtype and float64 sum (one pass over
    the weights: another checkpoint of the same architecture differs)."""
    parts: list = [explainer.name]
    with torch.no_grad():
        for name, p in explainer.model.named_parameters():
            chunks = p.detach().reshape(-1).split(FINGERPRINT_CHUNK)  # float64 a chunk at a time, not a whole copy
            total = math.fsum(float(c.double().sum()) for c in chunks)
            parts.append([name, list(p.shape), str(p.dtype), total])
    return _digest(parts)


def run_key(what: str, model: str, options: dict) -> str:
    """The key of a run: what it measures (`what`), the model's `fingerprint`, its options (JSON-ready)."""
    return _digest({"what": what, "model": model, "options": options})


def prompt_key(row: PromptRow, run: str) -> str:
    """The key of one prompt's result: its row's fields and the run's key (not its line: moving rows is no change)."""
    return _digest({"row": row.fields(), "run": run})


def check_apart(dataset: str | os.PathLike, **outputs: str | os.PathLike | None) -> None:
    """Refuse outputs ({flag: path}) that are the dataset itself or one another: a run never writes over its input."""
    seen = {Path(dataset).resolve(): "the dataset"}
    for flag, path in outputs.items():
        if path is None:
            continue
        where = Path(path).resolve()
        if where in seen:
            raise ValueError(f"--{flag} {path} is {seen[where]}: give another file")
        seen[where] = f"--{flag}"


class ResultsFile:
    """The results file of one run (the module doc): `load` the prompts already done, `append` one finished.

    path    the file;  header  {"what", "model", "run", "options"} of this run;  force  start an existing file over"""

    def __init__(self, path: str | os.PathLike, header: dict, *, force: bool = False):
        self.path = Path(path)
        self.header = {"kind": KIND, "version": VERSION} | header
        self.force = force
        self.lines: list[str] = []

    def load(self, rows: list[PromptRow], keys: list[str]) -> dict[int, dict]:
        """{index: result dict} of the prompts this file already holds for this run; [] for a new file (or with
        `force`). Refuses (ValueError, naming the file) a file that is not a results file, one of another run, and a
        prompt whose row changed since its result was written."""
        check_target(self.path)  # never a folder, a FIFO or a device, even with force
        if not self.path.exists() or self.force:
            check_writable(self.path, force=self.force, flag="--force")
            return {}
        records = self._read()
        done: dict[int, dict] = {}
        for number, record in records:
            index = record.get("index")
            if not isinstance(index, int) or isinstance(index, bool) or not isinstance(record.get("result"), dict):
                raise ValueError(f"{self.path}, line {number}: not a prompt's result (index, key, result)")
            if not 0 <= index < len(rows) or record.get("key") != keys[index]:
                at = f"prompt {index}" + (
                    f" (line {rows[index].line} of the dataset)" if 0 <= index < len(rows) else ""
                )
                raise ValueError(
                    f"{self.path}: {at} is not the prompt its result was written for (the dataset changed): give "
                    "another --out, or --force to start it over"
                )
            done[index] = record["result"]
            self.lines.append(json.dumps(record, ensure_ascii=False, allow_nan=False))
        return done

    def _read(self) -> list[tuple[int, dict]]:
        """(line, record) of each prompt line, after the header is checked against this run's."""
        with open_regular(self.path, what="results file") as f:
            size = os.fstat(f.fileno()).st_size
            if size > DATASET_RESULTS_BYTES:
                raise ValueError(f"{self.path}: {size:,} bytes, over the {DATASET_RESULTS_BYTES:,}-byte limit")
            raw = f.read(DATASET_RESULTS_BYTES + 1)
        not_ours = f"{self.path} exists and is not a dataset run's results file: give another --out, or --force"
        try:
            lines = raw.decode("utf-8").splitlines()
            parsed = [json.loads(line) for line in lines if line.strip()]
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise ValueError(not_ours) from None
        if not parsed or not isinstance(parsed[0], dict) or parsed[0].get("kind") != KIND:
            raise ValueError(not_ours)
        head = parsed[0]
        if head.get("version") != VERSION:
            raise ValueError(
                f"{self.path}: a results file of version {head.get('version')!r}, this selfattn writes "
                f"{VERSION}: give another --out, or --force to start it over"
            )
        if head.get("run") != self.header["run"]:
            differ = [k for k in ("what", "model", "options") if head.get(k) != self.header.get(k)]
            raise ValueError(
                f"{self.path} holds the results of another run ({', '.join(differ) or 'its key'} differ): give another "
                "--out, or --force to start it over"
            )
        if not all(isinstance(p, dict) for p in parsed[1:]):
            raise ValueError(not_ours)
        return list(enumerate(parsed[1:], start=2))

    def append(self, record: dict) -> None:
        """Add one finished prompt's record and rewrite the file atomically (the module doc)."""
        self.lines.append(json.dumps(record, ensure_ascii=False, allow_nan=False))
        header = json.dumps(self.header, ensure_ascii=False, allow_nan=False)
        write_atomic(self.path, "\n".join([header, *self.lines]) + "\n", force=True)
