"""What `selfattn generate` prints: the text, then its words and why it stopped."""

from __future__ import annotations

__all__ = ["format_generation"]


def format_generation(gen) -> str:
    """Two lines: the whole text, then prompt words ‖ new words and the reason generation stopped."""
    return "\n".join(
        [
            gen.text,
            " / ".join(gen.prompt_tokens) + " ‖ " + " / ".join(gen.new_tokens) + f"   (stopped: {gen.stopped})",
        ]
    )
