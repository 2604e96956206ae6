"""Text from users, files or models made safe to print on a terminal, written once.

    printable("gone\\x1b]8;;https://evil.example\\x07x")  ->  'gone\\\\x1b]8;;https://evil.example\\\\x07x'

A control character (ESC, BEL, a carriage return, ...) or an undecodable byte (a lone surrogate from
surrogateescape) in a path, a model name or a token would otherwise reach the terminal raw: an escape
sequence can rewrite the screen, set the window title or plant a hyperlink. Such characters are
shown as their Python escapes; newlines and tabs are kept only where `keep` says so.
"""

from __future__ import annotations

__all__ = ["printable"]


def printable(text: str, keep: str = "") -> str:
    """`text` with every non-printable character (except those in `keep`) written as its escape."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(
        ch if ch.isprintable() or ch in keep else ch.encode("unicode_escape", "backslashreplace").decode()
        for ch in text
    )
