"""What `selfattn generate` prints: the text, then its words and why it stopped.

The new words come from the checkpoint's vocabulary, data from a file: a token holding an escape
sequence (a hyperlink, a clear screen, a right-to-left override) is shown as its escape, never
sent to the terminal raw. The prompt keeps the newlines and tabs its user typed.
"""

from __future__ import annotations

from ..terminal import printable

__all__ = ["format_generation"]


def format_generation(gen) -> str:
    """Two lines: the whole text, then prompt words ‖ new words and the reason generation stopped; a third
    where the vocabulary reads some of the prompt as <unk> (the model continues from what it never saw)."""
    lines = [
        printable(gen.text, keep="\n\t"),
        " / ".join(map(printable, gen.prompt_tokens))
        + " ‖ "
        + " / ".join(map(printable, gen.new_tokens))
        + f"   (stopped: {gen.stopped})",
    ]
    if gen.unknown:
        n, total = len(gen.unknown), len(gen.prompt_tokens)
        lines.append(
            f"note: {n} of the prompt's {total} tokens {'is' if n == 1 else 'are'} <unk> to this model "
            f"({' '.join(map(printable, gen.unknown))}):"
            " it continues from words it does not know; `selfattn vocab` lists those it knows"
        )
    return "\n".join(lines)
