"""Text from users, files or models made safe to print on a terminal, written once.

    printable("gone\\x1b]8;;https://evil.example\\x07x")  ->  'gone\\\\x1b]8;;https://evil.example\\\\x07x'

A control character (ESC, BEL, a carriage return, ...) or an undecodable byte (a lone surrogate from
surrogateescape) in a path, a model name or a token would otherwise reach the terminal raw: an escape
sequence can rewrite the screen, set the window title or plant a hyperlink. Such characters are
shown as their Python escapes; newlines and tabs are kept only where `keep` says so.

`progress_bar` is the one progress bar of a long command (training, a dataset of prompts), on stderr.
"""

from __future__ import annotations

__all__ = ["printable", "printable_json", "progress_bar"]


def printable(text: str, keep: str = "") -> str:
    """`text` with every non-printable character (except those in `keep`) written as its escape."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(
        ch if ch.isprintable() or ch in keep else ch.encode("unicode_escape", "backslashreplace").decode()
        for ch in text
    )


def printable_json(text: str) -> str:
    """JSON text (`json.dumps(..., ensure_ascii=False)`: CJK stays readable) with every non-printable character
    but its line breaks — a bidi override, a C1 control, a zero-width mark — written as a JSON \\uXXXX escape
    (a surrogate pair beyond the BMP). Such a character can stand only inside a string, so the JSON means the
    same text; a terminal no longer reorders or hides what follows."""
    if text.isprintable():
        return text

    def escape(ch: str) -> str:
        units = ch.encode("utf-16-be")
        return "".join(f"\\u{int.from_bytes(units[i : i + 2], 'big'):04x}" for i in range(0, len(units), 2))

    return "".join(ch if ch.isprintable() or ch == "\n" else escape(ch) for ch in text)


def progress_bar(enabled: bool, label: str, *fields: str):
    """A rich Progress on stderr (a no-op when not `enabled`): `label`, the bar, done / total, `fields`, the elapsed
    time and the ETA; `label` and `fields` are rich text templates that may read the task's fields ("loss
    {task.fields[loss]:.3f}"). `bar.console.print` writes lines above it."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        *(TextColumn(f) for f in fields),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not enabled,
    )
