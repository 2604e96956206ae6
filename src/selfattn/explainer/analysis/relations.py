"""The tutorial's links between words, found in a text: which token should look at which.

    roles(tokens, grammar)   -> one grammar role per token ("qm", "colour", "noun", …, or None)
    links(tokens, grammar)   -> [Link(relation, query, keys)]: for each word the tutorial names, the earlier
                                words it depends on, by the tutorial's claims (RELATIONS: noun → measure word
                                and colour, verb → noun, place → verb and noun) and the grammar's clause-2
                                references (clause 2 → clause 1)

`grammar` is data, {word: role} with the roles "qm", "colour", "noun", "verb", "place", "ref" (a pronoun)
and "ref_measure" (这只, 这些): the default model's is `selfattn.model.corpus.grammar()`, given by the
explainer that holds it (`Explainer.grammar`); this module reads no corpus. A text whose words the grammar
does not hold simply has fewer links (a free English text has none; an empty grammar gives none).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["RELATIONS", "Grammar", "Link", "roles", "links", "MEANING_ROLES"]

Grammar = Mapping[str, str]
"""{word: role}: the words a grammar names and their roles (the module doc)."""

RELATIONS: dict[str, dict] = {
    "noun>qm+colour": {"query": "noun", "targets": ("qm", "colour")},
    "verb>noun": {"query": "verb", "targets": ("noun",)},
    "place>verb+noun": {"query": "place", "targets": ("verb", "noun")},
    "clause2>clause1": {"query": "ref", "targets": ("noun",)},
}
"""Each relation: the query role and the roles of the earlier words it should look at. The first three
are the tutorial's claims, the ones the default model's probe measures (`selfattn.model.tutorial_probe.CLAIMS`, held
equal by a test); the last is clause 2 → clause 1 (它 / 这只 怪兽 / 在 森林 point back at the creature and
place of clause 1)."""

WORDS = {
    "noun>qm+colour": "relations.noun_qm_colour",
    "verb>noun": "relations.verb_noun",
    "place>verb+noun": "relations.place_verb_noun",
    "clause2>clause1": "relations.clause2_clause1",
}
"""How each relation is said in words: its key in the catalogue (`selfattn.explainer.catalogue`)."""

MEANING_ROLES = ("qm", "colour", "noun", "verb", "place")
"""The roles of the walkthrough's one-hot "meanings" (数量 · 颜色 · 角色 · 动作 · 地点), in its order."""


@dataclass(frozen=True)
class Link:
    """query position → the key positions it should look at, by `relation` (a key of RELATIONS)."""

    relation: str
    query: int
    keys: tuple[int, ...]


def roles(tokens: list[str], grammar: Grammar) -> list[str | None]:
    """The grammar's role of each token (None for a token the grammar does not name, <bos> included).
    A noun right after 这只 / 这些, and a place right after 在, belong to clause 2 ("ref")."""
    out: list[str | None] = []
    for i, tok in enumerate(tokens):
        role = grammar.get(tok.strip())
        before = tokens[i - 1].strip() if i else ""
        if role == "noun" and grammar.get(before) == "ref_measure":
            role = "ref"
        elif role == "place" and before == "在":
            role = "ref"
        out.append(role)
    return out


def links(tokens: list[str], grammar: Grammar) -> list[Link]:
    """Every link the text holds: for each word of a relation's query role, the nearest earlier word of
    each target role within its sentence (clause-1 relations), or the nearest earlier clause-1 word of
    the same kind (clause 2 → clause 1: a pronoun or 这只 → the noun; 在 PLACE → the place)."""
    r = roles(tokens, grammar)
    out: list[Link] = []
    start = 0  # first position of the current sentence's clause 1
    for i, role in enumerate(r):
        if role is None:
            continue
        if role == "qm":
            start = i
        for name, rel in RELATIONS.items():
            if name == "clause2>clause1" or rel["query"] != role:
                continue
            keys = tuple(k for k in (_last(r, t, start, i) for t in rel["targets"]) if k is not None)
            if keys:
                out.append(Link(name, i, keys))
        if role == "ref":
            word = tokens[i].strip()
            want = "place" if grammar.get(word) == "place" else "noun"
            key = next(
                (
                    k
                    for k in range(i - 1, -1, -1)
                    if r[k] == want and (want != "noun" or tokens[k].strip() == word or grammar.get(word) == "ref")
                ),
                None,
            )
            if key is not None:
                out.append(Link("clause2>clause1", i, (key,)))
    return out


def _last(r: list[str | None], role: str, start: int, end: int) -> int | None:
    return next((k for k in range(end - 1, start - 1, -1) if r[k] == role), None)
