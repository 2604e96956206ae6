"""A whole model's head types, merged from the induction probe and a text (the legend the views colour by is
`views.type_legend`).

    merge(on_probe, described) -> {rule, types, heads [layer][head] {layer, head, type, types, probe, text}}

The merge rule: a head has a type when that type is credited (`head_types.above_chance`) on the induction
probe (random tokens repeated: what the head does whatever the content) or on the text (`heads.describe`'s
`types`; a tutorial link credited on the text is the type "relation"). Where both credit a type, the
measurement with the larger share ÷ chance is kept. "broad" is a type only when no other is credited.
The head's `type` is its clearest (largest share ÷ chance); None when nothing is credited.
"""

from __future__ import annotations

from . import head_types

__all__ = ["merge", "RULE"]

RULE = {
    "zh": f"一个类型算数的条件：比例至少 {head_types.CREDIT_MIN:.0%}，"
    f"并且至少是均匀注意力的 {head_types.CHANCE_FACTOR:g} 倍"
    f"（均匀注意力已给到 1/3 以上时：漏掉的至多是均匀注意力漏掉的 1/{head_types.CHANCE_FACTOR:g}），"
    f"至少在 {head_types.MIN_ROWS} 行上测到；归纳看随机 token 重复两遍的探针，其余看探针或这句话",
    "en": f"a type counts when its share is at least {head_types.CREDIT_MIN:.0%} and at least "
    f"{head_types.CHANCE_FACTOR:g} × what uniform attention gives the same keys (where uniform attention gives a "
    f"third or more: missing at most 1/{head_types.CHANCE_FACTOR:g} of what it misses), measured on at least "
    f"{head_types.MIN_ROWS} rows; induction on a probe of random tokens repeated twice, the others on the probe "
    "or the text",
}
"""The credit rule in words (`head_types.above_chance`)."""


def _lift(m: dict) -> float:
    return m["score"] / m["chance"] if m["chance"] else float("inf")


def _entry(t: str, m: dict, on: str) -> dict:
    return {"type": t, "score": m["score"], "chance": m["chance"], "rows": m["rows"], "on": on}


def merge(on_probe: list[list[dict]], described: list[list[dict]] | None = None) -> dict:
    """[layer][head] types of the probe (`heads.measures` of its trace) and, optionally, of a text
    (`heads.describe`), by the module's rule."""
    out = []
    for l, layer in enumerate(on_probe):
        row = []
        for h, m in enumerate(layer):
            d = described[l][h] if described is not None else None
            found = {t: _entry(t, m[t], "probe") for t in head_types.credited(m) if t != "broad"}
            if d is not None:
                for t in d["types"]:
                    mine = _entry(t, d["scores"][t], "text")
                    if t != "broad" and (t not in found or _lift(mine) > _lift(found[t])):
                        found[t] = mine
                if d.get("link_credited"):
                    link = {"score": d["mean"], "chance": d["mean_chance"], "rows": 1}
                    found["relation"] = _entry("relation", link, "text") | {"relation": d["relation"]}
            if not found:
                broad = [_entry("broad", x["broad"], on) for x, on in ((m, "probe"), (d and d["scores"], "text")) if x]
                broad = [b for b in broad if b["score"] is not None and b["score"] >= head_types.BROAD_MIN]
                found = {"broad": broad[0]} if broad else {}
            ordered = sorted(found.values(), key=lambda e: -_lift(e))
            row.append(
                {
                    "layer": l,
                    "head": h,
                    "type": ordered[0]["type"] if ordered else None,
                    "types": ordered,
                    "probe": m,
                    "text": d,
                }
            )
        out.append(row)
    return {"rule": RULE, "types": list(head_types.names()), "heads": out}
