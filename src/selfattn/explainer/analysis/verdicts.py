"""One answer per head: the types it holds, strongest first, and the relations credited to it. Every view reads
this (the API's `heads()`, `selfattn heads`, the explain sentences, the page's model view), so a head has the
same label everywhere.

    verdict(text=None, probe=None, relations=()) -> {type, types, relations, measurable}
    verdicts(text, probe=None, relations=None)   -> [layer][head] verdict
    every_relation(grid)                         -> every credited relation of [layer][head] verdicts, with its head

text, probe  one head's `head_types.measure` on the text and on the induction probe (either may be None)
words        types measured on the words of the text and its control sentences (`held`'s previous_word, as
             {"previous": …}), since a short sentence has too few pieces for MIN_ROWS but text + controls may not
relations    the relations credited to the head on the text (`held.held`'s credited entries), each
             {relation, score, chance, rows, tested {weight, chance, rows, p, sentences}, …}

    types       [{type, score, chance, rows, p, on}]: every type credited on the text, its words or the probe
                (`on`: "text" | "words" | "probe"; where several credit it, the one with the larger share ÷
                chance), strongest (largest share ÷ chance) first; "broad" only when no other type is credited
                and no relation held
    relations   the credited relations, largest share first
    type        the head's label: its strongest type, else "relation" (a credited relation), else None
    measurable  whether any type was measured on at least `head_types.MIN_ROWS` rows: when False the views say
                "not measurable on this text" instead of a type

A type comes only from MIN_ROWS rows or more (`head_types.measure` credits nothing below); so does a relation
(`held`: MIN_ROWS rows where its key is not the previous word, over the text and its control and contrast
sentences, by the same test against uniform attention), listed apart from the types because it names the text's
own words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import head_types

__all__ = ["verdict", "verdicts", "lift", "every_relation"]


def lift(e: dict) -> float:
    """share ÷ chance of one measured entry (inf where chance is 0)."""
    return e["score"] / e["chance"] if e["chance"] else float("inf")


def _entry(t: str, m: dict, on: str) -> dict:
    return {"type": t, "score": m["score"], "chance": m["chance"], "rows": m["rows"], "p": m.get("p"), "on": on}


def verdict(
    text: dict | None = None, probe: dict | None = None, relations: Sequence[dict] = (), words: dict | None = None
) -> dict:
    """One head's answer (the module's doc). words: types measured on the text's words and its control
    sentence ({"previous": `held`'s previous_word}), credited like the others (on: "words")."""
    found: dict[str, dict] = {}
    for on, measured in (("probe", probe), ("text", text), ("words", words)):
        if measured is None:
            continue
        for t in head_types.credited(measured):
            mine = _entry(t, measured[t], on)
            if t != "broad" and (t not in found or lift(mine) > lift(found[t])):
                found[t] = mine
    if not found:
        pairs = (("probe", probe), ("text", text))
        broad = [_entry("broad", m["broad"], on) for on, m in pairs if m and m.get("broad", {}).get("credited")]
        found = {"broad": broad[0]} if broad else {}
    held = sorted((dict(r) for r in relations), key=lambda r: -r["score"])
    if held:
        found.pop("broad", None)  # a held relation is something the head does: not broad
    types = sorted(found.values(), key=lambda e: -lift(e))
    measurable = any(
        m.get("rows", 0) >= head_types.MIN_ROWS
        for measured in (text, probe, words)
        if measured
        for m in measured.values()
    )
    label = types[0]["type"] if types else ("relation" if held else None)
    return {"type": label, "types": types, "relations": held, "measurable": measurable}


def verdicts(
    text: list[list[dict]] | None,
    probe: list[list[dict]] | None = None,
    relations: list[list[list[dict]]] | None = None,
    words: list[list[dict]] | None = None,
) -> list[list[dict]]:
    """`verdict` for every [layer][head] (text, probe: `heads.measures` of each; relations: the credited ones;
    words: the types measured on the words, `verdict`'s `words`)."""
    shape = text if text is not None else probe
    if shape is None:
        raise ValueError("give the heads' measures on the text, on the probe, or both")
    return [
        [
            verdict(
                text[l][h] if text is not None else None,
                probe[l][h] if probe is not None else None,
                relations[l][h] if relations is not None else (),
                words[l][h] if words is not None else None,
            )
            for h in range(len(row))
        ]
        for l, row in enumerate(shape)
    ]


def every_relation(grid: Sequence[Sequence[Mapping[str, Any]]]) -> list[dict]:
    """Every relation credited to any head of [layer][head] `verdict`s (or descriptions holding one as "verdict"),
    whatever the head's label: [{layer, head, relation, score, chance, rows, tested, baseline, evidence, …}] (`held.
    credited`'s entries with their head), the largest share first (ties: layer, head)."""
    out = []
    for l, row in enumerate(grid):
        for h, d in enumerate(row):
            v = d.get("verdict", d) if d else {}
            out += [{"layer": l, "head": h} | dict(r) for r in v.get("relations", ())]
    return sorted(out, key=lambda r: (-r["score"], r["layer"], r["head"]))
