"""Every head's answer on a text, as numbers: what `analysis.held` holds of its relations, its head types measured on
the text (`heads.measures`), and the one verdict every view reads (`verdicts.verdicts`, with the induction probe's).

    head_answers(trace, controls, probe, user_words, grammar) -> Answers(held, types, verdicts)   each [layer][head]

The words for them are `views.heads.describe`'s; this module formats nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..trace_types import ModelTrace
from . import held
from .heads import measures
from .relations import Grammar
from .verdicts import verdicts

__all__ = ["Answers", "head_answers"]


@dataclass(frozen=True)
class Answers:
    """Each [layer][head]: `held` (`held.held`: previous_word, relations), `types` (`heads.measures`: each head type's
    score, chance, rows, p) and `verdicts` (`verdicts.verdicts`: its types, strongest first, each against chance)."""

    held: list[list[dict]]
    types: list[list[dict]]
    verdicts: list[list[dict]]


def head_answers(
    trace: ModelTrace,
    controls: Sequence[ModelTrace] = (),
    probe: list[list[dict]] | None = None,
    user_words: held.UserWords = (),
    grammar: Grammar | None = None,
) -> Answers:
    """The answers of every head of `trace`. controls: the traces of `held.contrasts_of`'s sentences on the same model,
    in its order; probe: every head's measures on the induction probe (`tracing.probe`: what `selfattn heads`
    reads too, so the verdict is the same in every view; None: the text's types only); user_words, grammar: the
    explainer's (`held.held`)."""
    h = held.held(trace, controls, user_words, grammar)
    types = measures(trace)
    relations = [[held.credited(x) for x in row] for row in h]
    words = [[held.word_types(x) for x in row] for row in h]
    return Answers(held=h, types=types, verdicts=verdicts(types, probe, relations, words))
