"""What an experiment found, in a sentence in each language (`selfattn.explainer.experiments`).

    taxonomy_words(t)    {zh: [lines], en: [lines]}: how many heads of each type, and the clearest ones named
    ablation_words(a)    {zh, en}: the next-token prediction and the loss, before → after
    top_heads(recovered) the heads that recover the most of the logit difference (TOP_NAMED, each >= NAMED_MIN)
    patching_words(p)    {zh, en}: those heads named, and where the residual stream carries the difference
    settled(layers)      the first layer from which the logit lens's top token is the final one
    lens_words(lens)     {zh, en}: the final prediction, from which layer it leads, what layer 0 reads

Heads are written L{layer}H{head}, counted from 0. A token is quoted “ Mary” so that its spaces show.
"""

from __future__ import annotations

from .head_words import TYPE_SHORT, percent
from .tables import number

__all__ = [
    "TOP_NAMED",
    "NAMED_MIN",
    "NAMED_PER_TYPE",
    "name",
    "quote",
    "taxonomy_words",
    "ablation_words",
    "top_heads",
    "patching_words",
    "settled",
    "lens_words",
]

TOP_NAMED = 3
"""Heads a patching sentence names at most."""
NAMED_MIN = 0.1
"""Least share of the logit difference a head recovers to be named."""
SMALL_GAP = 0.5
"""A clean − corrupted logit difference below this (in logits) makes every share unsteady: the sentence says so."""
NAMED_PER_TYPE = 5
"""Heads of one type a taxonomy line names at most (the clearest)."""

TYPE_NAMES = {
    "induction": {"zh": "归纳头", "en": "induction heads"},
    "previous": {"zh": "前一个 token 的 head", "en": "previous-token heads"},
    "duplicate": {"zh": "重复 token 的 head", "en": "duplicate-token heads"},
    "next": {"zh": "后一个 token 的 head", "en": "next-token heads"},
    "relation": {"zh": "教程链接的 head", "en": "tutorial-link heads"},
    "local": {"zh": "局部的 head", "en": "local heads"},
    "self": {"zh": "看自己的 head", "en": "self heads"},
    "first": {"zh": "停在第一个 token 上的 head", "en": "first-token (sink) heads"},
    "broad": {"zh": "接近均匀的 head", "en": "broad heads"},
}
"""Each type's heads, named in a taxonomy line, in the order the lines come."""
ON = {"probe": {"zh": "探针", "en": "probe"}, "text": {"zh": "这句话", "en": "text"}}


def name(layer: int, head: int) -> str:
    return f"L{layer}H{head}"


def quote(token: str) -> str:
    return f"“{token}”"


def _join(lang: str, items: list[str]) -> str:
    return "、".join(items) if lang == "zh" else ", ".join(items)


def taxonomy_words(t: dict) -> dict[str, list[str]]:
    """One line per type that some head has as its clearest, its clearest heads named with share and chance."""
    cells = [c for row in t["heads"] for c in row]
    out: dict[str, list[str]] = {"zh": [], "en": []}
    counts = {k: sum(c["type"] == k for c in cells) for k in TYPE_NAMES}
    untyped = sum(c["type"] is None for c in cells)
    for lang in out:
        parts = [f"{TYPE_SHORT[k][lang]} {n}" for k, n in counts.items() if n]
        parts.append(("没有明确类型 " if lang == "zh" else "no clear type ") + str(untyped))
        head = f"{len(cells)} 个 head：" if lang == "zh" else f"{len(cells)} heads: "
        out[lang].append(head + _join(lang, parts))
    for k, words in TYPE_NAMES.items():
        mine = [(c, next(e for e in c["types"] if e["type"] == k)) for c in cells if c["type"] == k]
        if not mine:
            continue
        mine.sort(key=lambda ce: (-ce[1]["score"], ce[0]["layer"], ce[0]["head"]))
        for lang in out:
            named = [f"{name(c['layer'], c['head'])} {_score(lang, e)}" for c, e in mine[:NAMED_PER_TYPE]]
            more = len(mine) - NAMED_PER_TYPE
            tail = "" if more <= 0 else (f" 等 {len(mine)} 个" if lang == "zh" else f" and {more} more")
            out[lang].append(f"{words[lang]}{'：' if lang == 'zh' else ': '}{_join(lang, named)}{tail}")
    return out


def _score(lang: str, e: dict) -> str:
    """ "82%（均匀 3%，探针）" / "82% (uniform 3%, probe)"; a broad head's normalised entropy "0.95"."""
    on = ON[e["on"]][lang]
    if e["type"] == "broad":
        return f"{e['score']:.2f}" + (f"（{on}）" if lang == "zh" else f" ({on})")
    if lang == "zh":
        return f"{percent(e['score'])}（均匀 {percent(e['chance'])}，{on}）"
    return f"{percent(e['score'])} (uniform {percent(e['chance'])}, {on})"


def _prob(p: float) -> str:
    return f"{p:.1%}"


def ablation_words(a: dict) -> dict[str, str]:
    heads = [name(l, h) for l, h in a["heads"]]
    t = a["target"]
    top1 = a["after"]["top"][0]
    mode = {"zero": ("0", "zero"), "mean": ("平均输出", "its mean output")}[a["mode"]]
    zh = [
        f"消融 {_join('zh', heads)}（输出换成{mode[0]}）："
        f"下一个 token {quote(t['shown'])} {_prob(t['before'])} → {_prob(t['after'])}"
    ]
    en = [
        f"ablating {_join('en', heads)} (output set to {mode[1]}): the next token {quote(t['shown'])} "
        f"{_prob(t['before'])} → {_prob(t['after'])}"
    ]
    if top1["id"] != t["id"]:
        zh.append(f"第一名变成 {quote(top1['shown'])} {_prob(top1['prob'])}")
        en.append(f"the top prediction becomes {quote(top1['shown'])} {_prob(top1['prob'])}")
    kl = f"{a['kl_bits']:.3f}"
    zh.append(f"下一个 token 的分布变化 KL = {kl} bit")
    en.append(f"the next-token distribution moves by KL = {kl} bits")
    if a["before"]["loss"] is not None:
        l0, l1 = f"{a['before']['loss']:.3f}", f"{a['after']['loss']:.3f}"
        zh.append(f"整句的平均交叉熵 {l0} → {l1} nat")
        en.append(f"the text's mean next-token loss {l0} → {l1} nats")
    return {"zh": "；".join(zh) + "。", "en": "; ".join(en) + "."}


def top_heads(recovered: list[list[float]]) -> list[dict]:
    """Up to TOP_NAMED heads with the largest share recovered, each at least NAMED_MIN (ties: lower layer, head)."""
    cells = sorted(
        ((r, l, h) for l, row in enumerate(recovered) for h, r in enumerate(row)), key=lambda x: (-x[0], x[1], x[2])
    )
    return [{"layer": l, "head": h, "recovered": r} for r, l, h in cells[:TOP_NAMED] if r >= NAMED_MIN]


def _handover(p: dict) -> tuple[int | None, int | None]:
    """(last layer where a changed position recovers the most, first layer where the last position does) of the
    residual patching, or None where there is no such layer."""
    last = len(p["clean"]["tokens"]) - 1
    best = [max(range(len(row)), key=lambda q: row[q]) for row in p["residual"]]
    moved = next((l for l, q in enumerate(best) if q == last), None)
    before = [l for l, q in enumerate(best) if q in p["differ"] and (moved is None or l < moved)]
    return (before[-1] if before else None), moved


def patching_words(p: dict) -> dict[str, str]:
    t, f = quote(p["target"]["shown"]), quote(p["foil"]["shown"])
    ld = number(p["clean_ld"]), number(p["corrupted_ld"])
    tops = p["top_heads"]
    if tops:
        named = {
            lang: _join(lang, [f"{name(x['layer'], x['head'])} {percent(x['recovered'])}" for x in tops])
            for lang in ("zh", "en")
        }
        zh = [f"把干净文本里每个 head 的输出换进被改动的文本：恢复 logit 差（{t} − {f}）最多的是 {named['zh']}"]
        en = [
            f"each head's output patched from the clean text into the corrupted one: the heads that recover the most "
            f"of the logit difference ({t} − {f}) are {named['en']}"
        ]
    else:
        best = max(((r, l, h) for l, row in enumerate(p["heads"]) for h, r in enumerate(row)), default=(0.0, 0, 0))
        zh = [
            f"没有哪个 head 单独恢复 logit 差（{t} − {f}）的 {percent(NAMED_MIN)} 以上；最多的是 "
            f"{name(best[1], best[2])} {percent(best[0])}"
        ]
        en = [
            f"no head alone recovers {percent(NAMED_MIN)} of the logit difference ({t} − {f}); the most is "
            f"{name(best[1], best[2])} {percent(best[0])}"
        ]
    zh[0] += f"（干净文本上这个差是 {ld[0]}，被改动的文本上 {ld[1]}）"
    en[0] += f" (the difference is {ld[0]} on the clean text, {ld[1]} on the corrupted one)"
    gap = abs(p["clean_ld"] - p["corrupted_ld"])
    if gap < SMALL_GAP:
        zh.append(f"两者只差 {number(gap)}，这些比例很不稳定")
        en.append(f"they differ by only {number(gap)}, so these shares are unsteady")
    kept, moved = _handover(p)
    tokens = p["clean"]["tokens"]
    if kept is not None and moved is not None:
        q = max(p["differ"], key=lambda x: p["residual"][kept][x])
        zh.append(
            f"残差流：到层 {kept} 为止，换进被改动的位置 {q}（{quote(tokens[q])}）恢复最多；"
            f"从层 {moved} 起，换进最后一个位置恢复最多"
        )
        en.append(
            f"the residual stream: up to layer {kept}, patching the changed position {q} ({quote(tokens[q])}) "
            f"recovers the most; from layer {moved} on, patching the last position does"
        )
    return {"zh": "；".join(zh) + "。", "en": "; ".join(en) + "."}


def settled(layers: list[dict]) -> int:
    """The first layer from which every layer's top token is the last layer's."""
    final = layers[-1]["top"][0]["id"]
    at = len(layers) - 1
    while at > 0 and layers[at - 1]["top"][0]["id"] == final:
        at -= 1
    return at


def lens_words(lens: dict) -> dict[str, str]:
    first, last = lens["layers"][0]["top"][0], lens["layers"][-1]["top"][0]
    at, p, tok = lens["settled"], lens["position"], quote(lens["token"])
    n = len(lens["layers"]) - 1
    zh = [
        f"在位置 {p}（{tok}）逐层读出下一个 token：最后一层（层 {n}）预测 {quote(last['shown'])} {_prob(last['prob'])}"
    ]
    en = [
        f"the next token read out after every layer at position {p} ({tok}): the last layer (layer {n}) predicts "
        f"{quote(last['shown'])} {_prob(last['prob'])}"
    ]
    if at < n:
        zh.append(f"从层 {at} 起第一名一直是它")
        en.append(f"it leads from layer {at} on")
    else:
        zh.append("之前的层都没有把它排第一")
        en.append("no earlier layer ranks it first")
    zh.append(f"层 0 读出的第一名是 {quote(first['shown'])} {_prob(first['prob'])}")
    en.append(f"layer 0 reads {quote(first['shown'])} {_prob(first['prob'])} first")
    return {"zh": "；".join(zh) + "。", "en": "; ".join(en) + "."}
