"""Checking a word sequence against the corpus grammar (see `selfattn.model.corpus`).

    grammar_errors(["一条", "蓝色", "怪兽", …])  ->  ["一条 … 怪兽: 怪兽 takes 只, not 条", …]

Used to judge what a model generates: a sentence is grammatical when this returns [].
"""

from __future__ import annotations

from collections.abc import Sequence

from .corpus import ACTIVITIES, COLOURS, CREATURES, FEELINGS, MEASURES, MOVES, PLACES, QUANTITIES, places_for

__all__ = ["grammar_errors", "is_grammatical"]

_BY_NOUN = {c.noun: c for c in CREATURES}
_KIND_OF_VERB = {verb: kind for kind, verbs in MOVES.items() for verb in verbs}
_ALL_PLACES = {place for places in PLACES.values() for place in places}


class _Stop(Exception):
    """Parsing cannot go on (a word is missing or unknown)."""


def grammar_errors(words: Sequence[str]) -> list[str]:
    """Every way `words` breaks the grammar; [] for a grammatical sentence."""
    errors: list[str] = []
    words = list(words)
    pos = 0

    def word(what: str, allowed) -> str:
        nonlocal pos
        if pos >= len(words):
            errors.append(f"ends after {len(words)} words; expected {what}")
            raise _Stop
        w = words[pos]
        if w not in allowed:
            errors.append(f"word {pos} {w!r} is not {what}")
            raise _Stop
        pos += 1
        return w

    try:
        qm = word("a quantity + measure word (一只 …)", {q + m for q in QUANTITIES for m in MEASURES})
        quantity, measure = qm[0], qm[1:]
        plural = QUANTITIES[quantity]
        word("a colour", COLOURS)
        noun = word("a creature", _BY_NOUN)
        creature = _BY_NOUN[noun]
        if measure != creature.measure:
            errors.append(f"{qm} … {noun}: {noun} takes {creature.measure}, not {measure}")
        verb = word("a verb", _KIND_OF_VERB)
        kind = _KIND_OF_VERB[verb]
        if kind not in creature.moves:
            errors.append(f"{noun} {verb}: {noun} moves by {'/'.join(creature.moves)}, {verb} is {kind}")
        place = word("a place", _ALL_PLACES)
        if place not in PLACES[kind]:
            errors.append(f"{verb} {place}: {verb} goes with {'/'.join(PLACES[kind])}")
        elif place not in places_for(creature, kind):
            errors.append(f"{noun} … {place}: {noun} goes to {'/'.join(places_for(creature, kind))}")
        word("。", {"。"})
        pronoun = creature.pronoun + ("们" if plural else "")
        this = "这些" if plural else "这" + creature.measure
        ref = word(
            "a reference (它 / 这只 …)",
            {c.pronoun + s for c in CREATURES for s in ("", "们")} | {"这" + m for m in MEASURES} | {"这些"},
        )
        if ref.startswith("这"):
            if ref != this:
                errors.append(f"{qm} … {noun} … {ref}: expected {this}")
            again = word("the creature again", _BY_NOUN)
            if again != noun:
                errors.append(f"{ref}{again}: clause 2 is about {noun}, not {again}")
        elif ref != pronoun:
            errors.append(f"{qm} … {noun} … {ref}: expected {pronoun}")
        link = word("在 or 很", {"在", "很"})
        if link == "在":
            place2 = word("a place", _ALL_PLACES)
            if place2 != place:
                errors.append(f"在{place2}: clause 2 happens in {place}, not {place2}")
            post = PLACES[kind].get(place, ("", ""))[0]
            got = word("里 / 上 / 中", {"里", "上", "中"})
            if post and got != post:
                errors.append(f"{place}{got}: expected {place}{post}")
            word("an activity", ACTIVITIES)
        else:
            word("a feeling", FEELINGS)
        word("。", {"。"})
        if pos < len(words):
            errors.append(f"{len(words) - pos} extra words after the sentence: {words[pos:]}")
    except _Stop:
        pass
    return errors


def is_grammatical(words: Sequence[str]) -> bool:
    return not grammar_errors(words)
