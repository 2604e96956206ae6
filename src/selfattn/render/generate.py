"""What `selfattn generate` prints: the text, then its words and why it stopped.

The new words come from the checkpoint's vocabulary, data from a file: a token holding an escape
sequence (a hyperlink, a clear screen, a right-to-left override) is shown as its escape, never
sent to the terminal raw. The prompt keeps the newlines and tabs its user typed.
"""

from __future__ import annotations

from ..terminal import printable

__all__ = ["format_generation"]


def format_generation(gen) -> str:
    """Two lines: the whole text, then prompt words ‖ new words and the reason generation stopped."""
    return "\n".join(
        [
            printable(gen.text, keep="\n\t"),
            " / ".join(map(printable, gen.prompt_tokens))
            + " ‖ "
            + " / ".join(map(printable, gen.new_tokens))
            + f"   (stopped: {gen.stopped})",
        ]
    )
