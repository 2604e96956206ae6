"""Heads that teach, in words: what each head does, in one line (`describe`), and how the head shown first is
picked (PICK_RULE; the numbers are `analysis.heads`).

A head's words (`head_words.sentence`): a first-token sink says so first; then a tutorial relation of the
text, only when `analysis.held` holds it (clearly above chance, and still there on the control sentence where
the key is no longer the previous word: "走进→怪兽 86%，…，中间隔着 慢慢地 时仍有 50%"), or, where the previous
word explains it, "看前一个词（在这句里恰好也是 …）"; then the head's strongest type (`analysis.verdicts`, the
answer every view reads); every share is given with its chance level.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..analysis.answers import Answers
from ..pieces import Pieces, names
from .head_words import percent, sentence
from .texts import TEXTS

__all__ = ["PICK_RULE", "describe", "percent"]

PICK_RULE = TEXTS["heads.pick_rule"]
"""How the shown head is picked, {zh, en} (`analysis.heads.pick`): the text table's entry."""


def describe(
    tokens: Sequence[str],
    pieces: Pieces | None,
    table: list[list[dict]],
    answers: Answers,
    control_tokens: Sequence[str] = (),
) -> list[list[dict]]:
    """One description per head (`head_words.sentence`): {kind, text {zh, en}, weight, chance, types, scores, verdict,
    …}; `tokens`, `pieces` the text's; `table` is `summary.summaries` of its trace; `answers` every head's numbers
    (`analysis.answers.head_answers`); `control_tokens` the control sentence's tokens (the first of
    `held.contrasts_of`'s; the sentences quote its pair). Tokens are named as in every view (`pieces.names`)."""
    shown = names(list(tokens))  # 金鱼@5 where a token repeats, as every view writes it
    c_shown = names(list(control_tokens)) if control_tokens else []
    groups = _groups(pieces)
    h, types, verdict = answers.held, answers.types, answers.verdicts
    return [
        [sentence(shown, s, h[l][k], types[l][k], verdict[l][k], c_shown, groups) for k, s in enumerate(heads)]
        for l, heads in enumerate(table)
    ]


def _groups(pieces: Pieces | None) -> list[dict[int, tuple[tuple[int, ...], str]]]:
    """The text's words, then its characters, each a map from a piece's position to its group (the group's pieces'
    positions, its name): what names a link's keys (`head_words.keys_named`); none for a tokenizer without pieces
    (the default model's tokens are words)."""
    if pieces is None:
        return []
    levels = ("words", "characters")
    return [
        {m: (g.members, name) for g, name in zip(pieces.group_of(lv), pieces.names(lv), strict=True) for m in g.members}
        for lv in levels
    ]
