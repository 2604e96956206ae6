"""Wall-clock timing: one warm-up call, then the best of several (the least disturbed by other work).

The backends of one case are timed in rounds (one call of each per round), so that a burst
of other work on a shared machine hits all of them alike and the ratios stay fair.

Not `torch.utils.benchmark.Timer`: it times one statement at a time (its blocks of one backend would meet a busy
moment that the next backend's do not: the interleaved rounds are the point here), reports a median where the
bench wants the least disturbed call, and runs the statement at its own `num_threads` (1 by default) where the bench
measures on the caller's threads (`--threads`)."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable

__all__ = [
    "cpu_name",
    "best_row",
    "best_seconds",
    "best_seconds_interleaved",
    "MIN_SECONDS",
    "QUICK_MIN_SECONDS",
    "MIN_REPEATS",
    "MAX_REPEATS",
]

MIN_SECONDS = 1.0
"""Keep repeating a call until this much time was spent on it (full bench)."""

QUICK_MIN_SECONDS = 0.05
"""The same for `--quick`."""

MIN_REPEATS = 5
"""At least this many timed calls."""

MAX_REPEATS = 200
"""At most this many timed calls (decoding steps are short)."""


def best_seconds(fn: Callable[[], object], min_seconds: float = MIN_SECONDS) -> tuple[float, int]:
    """(best seconds of one call, number of timed calls), after one untimed warm-up call."""
    start = time.perf_counter()
    fn()
    warm = time.perf_counter() - start
    repeats = min(MAX_REPEATS, max(MIN_REPEATS, int(min_seconds / max(warm, 1e-9))))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best, repeats


def best_seconds_interleaved(
    fns: dict[str, Callable[[], object]], min_seconds: float = MIN_SECONDS, rounds: int | None = None
) -> dict[str, tuple[float, int]]:
    """name → (best seconds of one call, timed calls): one warm-up call each, then rounds of one
    call of every function until min_seconds were spent (at least MIN_REPEATS rounds). With
    `rounds` given: no warm-up, exactly that many rounds (for calls of many seconds)."""
    if rounds is None:
        warm = {}
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            warm[name] = time.perf_counter() - start
        one_round = sum(warm.values())
        rounds = min(MAX_REPEATS, max(MIN_REPEATS, int(min_seconds / max(one_round, 1e-9))))
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: (best[name], rounds) for name in fns}


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows: which machine the rows were measured on."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def best_row(measured: list[dict], smallest: tuple[str, ...]) -> dict:
    """Of the rounds of one row, the fastest's (its "seconds"), with each field of `smallest` the least of all rounds
    (memory and CPU time vary less than wall time) and "all_seconds"; the first round when every one failed
    ("error")."""
    good = [m for m in measured if not m.get("error")]
    if not good:
        return measured[0]
    best = dict(min(good, key=lambda m: m["seconds"]))
    for name in smallest:
        best[name] = min(m[name] for m in good)
    best["all_seconds"] = [m["seconds"] for m in good]
    return best
