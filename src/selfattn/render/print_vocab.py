"""What `selfattn vocab` prints: how many tokens the model knows, then each of them.

A checkpoint's tokens are data from a file: one holding an escape sequence (a hyperlink, a clear
screen, a right-to-left override) is shown as its escape, never sent to the terminal raw.
"""

from __future__ import annotations

from ..terminal import printable

__all__ = ["format_vocabulary"]


def format_vocabulary(words: list[str]) -> str:
    """One line: "N tokens: " and the tokens, separated by spaces, each made safe to print."""
    return f"{len(words)} tokens: " + " ".join(printable(w) for w in words)
