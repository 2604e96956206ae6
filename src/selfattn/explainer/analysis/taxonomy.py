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

from . import chance, head_types
from .verdicts import verdict

__all__ = ["merge", "RULE"]

RULE = {
    "zh": f"一个类型算数的条件：至少在 {head_types.MIN_ROWS} 行上测到，对随机抽取同样数量目标的置换零假设"
    f"单侧 p < {chance.ALPHA:g}，比例至少 {head_types.CREDIT_MIN:.0%}，"
    f"并且至少是均匀注意力的 {head_types.CHANCE_FACTOR:g} 倍"
    f"（均匀注意力已给到 1/3 以上时：漏掉的至多是均匀注意力漏掉的 1/{head_types.CHANCE_FACTOR:g}）；"
    f"不到 {head_types.MIN_ROWS} 行：这句话上测不出。归纳看随机 token 重复两遍的探针，其余看探针或这句话。"
    f"教程关系也一样：在这句话和它的对照句（插进一个词，或换成同样角色的别的词）里键不紧挨着的至少 "
    f"{head_types.MIN_ROWS} 行上测，还要高于看前一个词、看自己和看第一个 token 的权重",
    "en": f"a type counts when it is measured on at least {head_types.MIN_ROWS} rows, its one-sided p-value "
    f"against a permutation null (as many targets drawn at random) is below {chance.ALPHA:g}, its share is at "
    f"least {head_types.CREDIT_MIN:.0%} and at least {head_types.CHANCE_FACTOR:g} × what uniform attention gives "
    f"the same keys (where uniform attention gives a third or more: missing at most 1/{head_types.CHANCE_FACTOR:g} "
    f"of what it misses); on fewer than {head_types.MIN_ROWS} rows it is not measurable on this text. Induction "
    "on a probe of random tokens repeated twice, the others on the probe or the text. A tutorial relation alike: on "
    f"at least {head_types.MIN_ROWS} rows where its key is not the previous word, over the text and its control "
    "sentences (a word put in between, or other words of the same roles), and above the weight on the previous "
    "word, on itself and on the first token",
}
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
