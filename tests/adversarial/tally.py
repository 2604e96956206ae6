"""Counting outcomes of hostile inputs, one `Tally` per surface.

An input ends in exactly one of:
    ok         accepted, and the answer checked right (equal to the float64 reference, valid JSON, ...)
    error      refused with a clear one-line error (TypeError/ValueError/OSError naming the problem,
               `selfattn CMD: error: ...` with exit 1/2, an HTTP 4xx with a `detail` message)
    wrong      accepted with a wrong answer (NaN, a number off the reference, a 200 for what must be
               refused), refused although it is valid, or refused with an unclear or misleading message
    traceback  a crash: any other exception, "Traceback" on stderr, an HTTP 5xx or a dropped connection
    hang       still running past its time limit (killed), or a process group that never answered
    lost       a file the user had is gone, changed or no longer loads (overwritten without --force, or
               an old checkpoint destroyed by a save that failed)
`outside` counts the errors (already in `error`) raised from code outside selfattn (torch, transformers).
"""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass, field

OUTCOMES = ("ok", "error", "wrong", "traceback", "hang", "lost")
BAD = ("wrong", "traceback", "hang", "lost")
"""The outcomes a clean run has none of."""
MAX_NOTES = 40
"""Most failure notes kept per surface (the counts stay exact)."""


@dataclass
class Tally:
    surface: str
    counts: dict = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    outside: int = 0
    notes: list = field(default_factory=list)
    outside_notes: list = field(default_factory=list)

    @property
    def tried(self) -> int:
        return sum(self.counts.values())

    def record(self, outcome: str, label: str, detail: str = "") -> str:
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        self.counts[outcome] += 1
        if outcome in BAD and len(self.notes) < MAX_NOTES:
            self.notes.append(f"{outcome}: {label}: {detail}"[:400])
        return outcome

    def note_outside(self, label: str, exc: BaseException) -> None:
        """Count a clear error that was raised from outside selfattn, and keep what it said."""
        self.outside += 1
        if len(self.outside_notes) < MAX_NOTES:
            self.outside_notes.append(f"{label}: {type(exc).__name__}: {exc}"[:300])

    def row(self) -> dict:
        return {
            "surface": self.surface,
            "tried": self.tried,
            "ok": self.counts["ok"],
            "clear errors": self.counts["error"],
            "wrong results": self.counts["wrong"],
            "tracebacks": self.counts["traceback"],
            "hangs": self.counts["hang"],
            "files lost": self.counts["lost"],
            "errors from outside selfattn": self.outside,
        }


def raised_outside(exc: BaseException) -> bool:
    """Whether the innermost frame of `exc` is outside the selfattn package (torch, transformers, Python)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and "/selfattn/" not in frames[-1].filename


def _refuse_constant(name: str):
    raise ValueError(f"bare {name} in JSON")


def strict_json(text: str | bytes):
    """`json.loads`, but a bare NaN / Infinity / -Infinity (which JSON has not) is a ValueError like any
    other invalid JSON."""
    return json.loads(text, parse_constant=_refuse_constant)


def format_table(rows: list[dict]) -> str:
    """The rows as a fixed-width text table."""
    keys = list(rows[0])
    widths = [max(len(k), *(len(str(r[k])) for r in rows)) for k in keys]

    def line(values) -> str:
        return "  ".join(
            str(v).rjust(w) if i else str(v).ljust(w) for i, (v, w) in enumerate(zip(values, widths, strict=False))
        )

    return "\n".join([line(keys), line("-" * w for w in widths), *(line(r[k] for k in keys) for r in rows)])


def assert_clean(tallies: list[Tally]) -> None:
    """Fail (AssertionError with the table and every note) when any tally has a wrong result, a traceback, a
    hang or a lost file; print the table either way (pytest -s shows it)."""
    rows = [t.row() for t in tallies]
    table = format_table(rows)
    print(table)
    bad = [n for t in tallies for n in t.notes]
    if any(t.counts[o] for t in tallies for o in BAD):
        raise AssertionError(table + "\n" + "\n".join(bad))
