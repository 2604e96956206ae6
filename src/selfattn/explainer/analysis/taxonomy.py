"""A whole model's head types, from the induction probe and a text (the legend the views colour by is
`views.type_legend`).

    merge(on_probe, described) -> {rule, types, heads [layer][head] {layer, head, type, types, relations,
                                   measurable, probe, text}}

Each head's answer is `verdicts.verdict` of its measures on the probe (random tokens repeated: what the head
does whatever the content) and on the text: with a text, the explain sentences' own verdict (`heads.describe`
given this probe's measures: the text's types, its words' and its held relations), so `selfattn heads`, the
API's `heads()`, the explain sentences and the model view give a head one label.
"""

from __future__ import annotations

from ..catalogue import both
from . import chance, head_types
from .verdicts import verdict

__all__ = ["merge", "RULE"]

RULE = both(
    "heads.rule",
    rows=head_types.MIN_ROWS,
    alpha=f"{chance.ALPHA:g}",
    least=f"{head_types.CREDIT_MIN:.0%}",
    factor=f"{head_types.CHANCE_FACTOR:g}",
)
"""The credit rule in words (`head_types.measure`)."""


def merge(on_probe: list[list[dict]], described: list[list[dict]] | None = None) -> dict:
    """[layer][head] types of the probe (`heads.measures` of its trace) and, optionally, of a text
    (`heads.describe` called with these same probe measures: its `verdict` is taken as it is), by
    `verdicts.verdict`."""
    out = []
    for l, layer in enumerate(on_probe):
        row = []
        for h, m in enumerate(layer):
            d = described[l][h] if described is not None else None
            v = verdict(None, m) if d is None else d["verdict"]
            row.append({"layer": l, "head": h} | v | {"probe": m, "text": d})
        out.append(row)
    return {"rule": RULE, "types": list(head_types.names()), "heads": out}
