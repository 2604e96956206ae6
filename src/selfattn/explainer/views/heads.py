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

from ..analysis import held
from ..analysis.heads import measures
from ..analysis.verdicts import verdicts
from ..capture.trace import ModelTrace
from ..pieces import Pieces, names
from .head_words import percent, sentence
from .texts import TEXTS

__all__ = ["PICK_RULE", "describe", "percent"]

PICK_RULE = TEXTS["heads.pick_rule"]
"""How the shown head is picked, {zh, en} (`analysis.heads.pick`): the text table's entry."""


def describe(
    trace: ModelTrace,
    table: list[list[dict]],
    controls: Sequence[ModelTrace] = (),
    probe: list[list[dict]] | None = None,
    user_words=(),
) -> list[list[dict]]:
    """One description per head (`head_words.sentence`): {kind, text {zh, en}, weight, chance, types, scores, verdict,
    …}; `table` is `summary.summaries(trace)`; `controls` the traces of the control and contrast sentences
    (`held.contrasts_of`, in its order), run on the same model; `probe` every head's measures on the induction probe
    (`probe.probe_measures`: what `selfattn heads` reads too, so the verdict is the same in every view; None: the text's
    types only); `user_words` the explainer's (`held.words_of`). Tokens are named as in every view (`pieces.names`)."""
    h = held.held(trace, controls, user_words)
    types = measures(trace)
    relations = [[held.credited(x) for x in row] for row in h]
    words = [[held.word_types(x) for x in row] for row in h]
    answers = verdicts(types, probe, relations, words)
    shown = names(trace.tokens)  # 金鱼@5 where a token repeats, as every view writes it
    c_shown = names(controls[0].tokens) if controls else []  # the control's: the sentences quote its pair
    groups = _groups(trace.pieces)
    return [
        [sentence(shown, s, h[l][k], types[l][k], answers[l][k], c_shown, groups) for k, s in enumerate(heads)]
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
