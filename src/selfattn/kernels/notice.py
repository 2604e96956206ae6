"""What a backend has to say while it works (a compile that takes seconds), without printing.

The library never writes to the terminal. A backend that makes a caller wait — flex compiling a
kernel, the native kernel's first build — `emit`s a `Notice` when it starts and when it ends; the
notice goes to the callback of `notices(...)` in force in this thread or task, and always to the
"selfattn" logger at INFO level. The CLI subscribes once and turns each notice into its line, one line per task:

    def show(n):  # "selfattn: compiling FlexAttention for q (1, 8, 512, 64) float32, causal ... done in 12.8 s"
        print(str(n) + " " if n.stage == "start" else n.tail, end="" if n.stage == "start" else "\n",
              file=sys.stderr, flush=True)

    with selfattn.kernels.notices(show):
        ...

A wait nobody hears (no callback, no handler of the "selfattn" logger: a plain Python user) is said once
per process as a `SlowStartWarning` (`warn_unheard`), with the expected time and how to do it ahead.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Notice", "notices", "emit", "warn_unheard", "SlowStartWarning", "LOGGER"]

LOGGER = logging.getLogger("selfattn")
"""Where every notice is logged (INFO), subscribed or not."""

STAGES = ("start", "done", "failed")


@dataclass(frozen=True)
class Notice:
    """One step of a long task a backend runs for the caller.

    source   the backend ("flex", "native")
    what     the task ("compiling FlexAttention for q (1, 8, 512, 64) float32, causal")
    stage    "start", "done" or "failed"
    seconds  how long it took (done / failed), None at the start
    note     a few words after the time ("cached for this signature"), or ""
    """

    source: str
    what: str
    stage: str
    seconds: float | None = None
    note: str = ""

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"notice stage must be one of {STAGES}, got {self.stage!r}")

    @property
    def tail(self) -> str:
        """How it ended, for the end of the start's line: "done in 12.8 s (cached …)", "failed after 3.0 s"
        ("" at the start)."""
        if self.stage == "start":
            return ""
        text = f"{'done in' if self.stage == 'done' else 'failed after'} {self.seconds:.1f} s"
        return f"{text} ({self.note})" if self.note else text

    def __str__(self) -> str:
        if self.stage == "start":
            return f"selfattn: {self.what} ..."
        return f"selfattn: {self.what}: {self.tail}"


_SUBSCRIBER: contextvars.ContextVar[Callable[[Notice], None] | None] = contextvars.ContextVar(
    "selfattn_notices", default=None
)


@contextlib.contextmanager
def notices(callback: Callable[[Notice], None]):
    """Hand every `Notice` emitted in this context (this thread or task only) to `callback(notice)`."""
    if not callable(callback):
        raise TypeError(f"notices needs a callable, got {type(callback).__name__}")
    token = _SUBSCRIBER.set(callback)
    try:
        yield callback
    finally:
        _SUBSCRIBER.reset(token)


def emit(notice: Notice) -> None:
    """Log `notice` and hand it to the subscriber of this context, if any."""
    LOGGER.info("%s", notice)
    callback = _SUBSCRIBER.get()
    if callback is not None:
        callback(notice)


class SlowStartWarning(UserWarning):
    """A first use is making the caller wait (a compile of tens of seconds), said once per process."""


_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def _heard() -> bool:
    """True when a callback of `notices(...)` or a handler of the "selfattn" logger hears notices here."""
    if _SUBSCRIBER.get() is not None:
        return True
    return LOGGER.isEnabledFor(logging.INFO) and any(h.level <= logging.INFO for h in LOGGER.handlers)


def warn_unheard(notice: Notice, advice: str, *, stacklevel: int = 3) -> bool:
    """Warn once per `notice.source` in this process, when nobody hears notices, that `notice` makes the
    caller wait: "selfattn: compiling ... (about 25 s; `python -m selfattn.kernels build` does it ahead)".
    Returns True if it warned."""
    if _heard():
        return False
    with _WARNED_LOCK:
        if notice.source in _WARNED:
            return False
        _WARNED.add(notice.source)
    warnings.warn(f"{notice} ({advice})", SlowStartWarning, stacklevel=stacklevel)
    return True
