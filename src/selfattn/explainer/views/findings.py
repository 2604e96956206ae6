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

from ..analysis.head_types import REGISTRY
from .head_words import percent, type_words
from .tables import number
from .texts import LANGS, text

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
ON_KEYS = {"probe": "findings.on_probe", "text": "findings.on_text", "words": "findings.on_words"}
"""Where a verdict was measured (`verdicts`' "on"), in words."""
MODE_KEYS = {"zero": "common.zero", "mean": "findings.mode_mean"}
"""What an ablated head's output was set to, in words."""


def name(layer: int, head: int) -> str:
    return f"L{layer}H{head}"


def quote(token: str) -> str:
    return f"“{token}”"


def _join(lang: str, items: list[str]) -> str:
    return text("common.list", lang).join(items)


def _sentence(lang: str, parts: list[str]) -> str:
    """Parts joined as one sentence: "a；b。" / "a; b."."""
    return text("common.join", lang).join(parts) + text("findings.end", lang)


def taxonomy_words(t: dict) -> dict[str, list[str]]:
    """One line per type that some head has as its clearest (in the registry's order, `head_types.REGISTRY`),
    its clearest heads named with share and chance; in the tutorial link's place, every relation credited to any
    head (`_relations`)."""
    cells = [c for row in t["heads"] for c in row]
    out: dict[str, list[str]] = {lang: [] for lang in LANGS}
    counts = {k: sum(c["type"] == k for c in cells) for k in REGISTRY}
    untyped = sum(c["type"] is None for c in cells)
    for lang in out:
        parts = [f"{type_words(k, 'short', lang)} {n}" for k, n in counts.items() if n]
        parts.append(text("findings.untyped", lang, n=untyped))
        out[lang].append(text("findings.count", lang, n=len(cells), parts=_join(lang, parts)))
    relations = _relations(cells)
    for k in REGISTRY:
        if k == "relation":  # every credited relation, whatever the head's label (`_relations`)
            for lang in out:
                if relations[lang]:
                    out[lang].append(text("findings.relations", lang, named=_join(lang, relations[lang])))
            continue
        mine = [(c, _entry(c, k)) for c in cells if c["type"] == k]
        if not mine:
            continue
        mine.sort(key=lambda ce: (-ce[1]["score"], ce[0]["layer"], ce[0]["head"]))
        more = len(mine) - NAMED_PER_TYPE
        for lang in out:
            named = [f"{name(c['layer'], c['head'])} {_score(lang, e)}" for c, e in mine[:NAMED_PER_TYPE]]
            tail = "" if more <= 0 else text("findings.more", lang, n=len(mine) if lang == "zh" else more)
            heads = type_words(k, "heads", lang)
            out[lang].append(text("findings.line", lang, heads=heads, named=_join(lang, named), more=tail))
    return out


def _relations(cells: list[dict]) -> dict[str, list[str]]:
    """Every relation credited to any head (`verdicts.verdict`'s relations: a head labelled by a type may hold one
    too), largest share first: "L0H3 走进→怪兽 86%（均匀 20%，其他词 26%）", the pair as the text's words (its
    evidence's text row) and what the other words give the same keys (`held`'s baseline)."""
    found = [(c, r) for c in cells for r in c.get("relations", ())]
    found.sort(key=lambda cr: (-cr[1]["score"], cr[0]["layer"], cr[0]["head"]))
    out: dict[str, list[str]] = {lang: [] for lang in LANGS}
    for c, r in found:
        on_text = [e for e in r.get("evidence", ()) if e["kind"] == "text"]
        pair = f"{on_text[0]['query']}→{on_text[0]['key']}" if on_text else r["relation"].replace(">", "→")
        base = (r.get("baseline") or {}).get("weight")
        for lang in out:
            out[lang].append(
                text(
                    "findings.relation",
                    lang,
                    head=name(c["layer"], c["head"]),
                    pair=pair,
                    p=percent(r["score"]),
                    c=percent(r["chance"]),
                    base="–" if base is None else percent(base),
                )
            )
    return out


def _entry(c: dict, k: str) -> dict:
    """The measured entry behind a head's label `k`: its type's, or its strongest held relation's (on the text)."""
    if k == "relation" and not any(e["type"] == k for e in c["types"]):
        return c["relations"][0] | {"type": "relation", "on": "text"}
    return next(e for e in c["types"] if e["type"] == k)


def _score(lang: str, e: dict) -> str:
    """ "82%（均匀 3%，探针）" / "82% (uniform 3%, probe)"; a broad head's normalised entropy "0.95"."""
    on = text(ON_KEYS[e["on"]], lang)
    if e["type"] == "broad":
        return text("findings.entropy", lang, e=f"{e['score']:.2f}", on=on)
    return text("findings.score", lang, p=percent(e["score"]), c=percent(e["chance"]), on=on)


def _prob(p: float) -> str:
    return f"{p:.1%}"


def ablation_words(a: dict) -> dict[str, str]:
    t = a["target"]
    top1 = a["after"]["top"][0]
    out = {}
    for lang in LANGS:
        heads = _join(lang, [name(l, h) for l, h in a["heads"]])
        ref = a.get("reference")
        mode = text(MODE_KEYS[a["mode"]], lang) if ref is None else text("findings.mode_reference", lang, **ref)
        before, after = _prob(t["before"]), _prob(t["after"])
        parts = [
            text("findings.ablated", lang, heads=heads, mode=mode, token=quote(t["shown"]), before=before, after=after)
        ]
        if top1["id"] != t["id"]:
            parts.append(text("findings.new_top", lang, token=quote(top1["shown"]), p=_prob(top1["prob"])))
        ld = a.get("logit_diff")
        if ld is not None:
            sides = {"target": quote(ld["target"]["shown"]), "foil": quote(ld["foil"]["shown"])}
            parts.append(
                text("findings.logit_diff", lang, **sides, before=f"{ld['before']:.3f}", after=f"{ld['after']:.3f}")
            )
        parts.append(text("findings.kl", lang, kl=f"{a['kl_bits']:.3f}"))
        if a["before"]["loss"] is not None:
            loss = {"before": f"{a['before']['loss']:.3f}", "after": f"{a['after']['loss']:.3f}"}
            parts.append(text("findings.loss", lang, **loss))
        out[lang] = _sentence(lang, parts)
    return out


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
    clean, corrupted = number(p["clean_ld"]), number(p["corrupted_ld"])
    tops = p["top_heads"]
    best = max(((r, l, h) for l, row in enumerate(p["heads"]) for h, r in enumerate(row)), default=(0.0, 0, 0))
    gap = abs(p["clean_ld"] - p["corrupted_ld"])
    kept, moved = _handover(p)
    tokens = p["clean"]["tokens"]
    out = {}
    for lang in LANGS:
        if tops:
            named = _join(lang, [f"{name(x['layer'], x['head'])} {percent(x['recovered'])}" for x in tops])
            first = text("findings.patched", lang, t=t, f=f, named=named)
        else:
            most = f"{name(best[1], best[2])} {percent(best[0])}"
            first = text("findings.none_recovers", lang, t=t, f=f, least=percent(NAMED_MIN), best=most)
        parts = [first + text("findings.differences", lang, clean=clean, corrupted=corrupted)]
        if gap < SMALL_GAP:
            parts.append(text("findings.unsteady", lang, gap=number(gap)))
        if kept is not None and moved is not None:
            q = max(p["differ"], key=lambda x: p["residual"][kept][x])
            parts.append(text("findings.handover", lang, kept=kept, q=q, token=quote(tokens[q]), moved=moved))
        out[lang] = _sentence(lang, parts)
    return out


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
    out = {}
    for lang in LANGS:
        parts = [text("findings.lens", lang, p=p, tok=tok, n=n, token=quote(last["shown"]), prob=_prob(last["prob"]))]
        parts.append(text("findings.leads", lang, at=at) if at < n else text("findings.never_first", lang))
        parts.append(text("findings.layer0", lang, token=quote(first["shown"]), prob=_prob(first["prob"])))
        out[lang] = _sentence(lang, parts)
    return out
