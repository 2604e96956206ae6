"""Heads that teach, in words: what each head does, in one line (`describe`), and how the head shown first is
picked (PICK_RULE; the numbers are `analysis.heads`).

A head's words (`head_words.sentence`): a first-token sink says so first; then a tutorial link of the
text, only when its share is clearly above what uniform attention over the visible keys gives the same
keys (`head_types.above_chance`); then its clearest head type on this text; every share is given with
that chance level ("走进→怪兽 86%，均匀注意力 20%").
"""

from __future__ import annotations

from ..analysis.heads import measures, relation_weights
from ..capture.trace import ModelTrace
from ..pieces import names
from .head_words import percent, sentence
from .texts import TEXTS

__all__ = ["PICK_RULE", "describe", "percent"]

PICK_RULE = TEXTS["pick_rule"]
"""How the shown head is picked, {zh, en} (`analysis.heads.pick`): the text table's entry."""


def describe(trace: ModelTrace, table: list[list[dict]]) -> list[list[dict]]:
    """One description per head (`head_words.sentence`): {kind, text {zh, en}, weight, chance, types,
    scores, …}; `table` is `summary.summaries(trace)`. Tokens are named as in every view (`pieces.names`)."""
    rel = relation_weights(trace)
    types = measures(trace)
    shown = names(trace.tokens)  # 金鱼@5 where a token repeats, as every view writes it
    return [[sentence(shown, s, rel[l][h], types[l][h]) for h, s in enumerate(heads)] for l, heads in enumerate(table)]
