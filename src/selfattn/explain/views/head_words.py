"""One head in words, every share beside what uniform attention gives the same keys (`heads.describe`).

    sentence(tokens, summary, links, types) -> {kind, text {zh, en}, weight, chance, …}

What a head is said to do, in this order (a later part is added after a "；" only where it says more):

    first     its mean weight on the first token reaches summary.SINK_LIMIT — the "*" of the heads grid —
              so a sink head says so first, whatever else it does
    relation  one of the text's tutorial links (`relations.links`) is credited: its share clearly above
              chance by `head_types.above_chance` ("走进→怪兽 86%，均匀注意力 20%")
    a type    its clearest credited head type on this text (`head_types.measure`): previous, next, self,
              first, duplicate, induction, local, broad
    spread    nothing credited: its mean entropy, and its strongest link with the chance level it failed

A link is one named claim (this query → those keys), so one link is enough to credit it; the head types are
statistics over positions and need head_types.MIN_ROWS rows. Chance is always uniform attention over the
keys the query may see (the head's own visibility: causal rule, window, an intervention's).
"""

from __future__ import annotations

from .head_types import above_chance, credited
from .relations import WORDS
from .summary import SINK_LIMIT
from .texts import TEXTS

__all__ = ["percent", "TYPE_WORDS", "TYPE_SHORT", "sentence", "link_credited"]

TYPE_WORDS = {key.removeprefix("heads.type."): words for key, words in TEXTS.items() if key.startswith("heads.type.")}
"""What each head type (`head_types.TYPES`) does, said before its share."""

TYPE_SHORT = {key.removeprefix("heads.short."): words for key, words in TEXTS.items() if key.startswith("heads.short.")}
"""A type in a table cell (`selfattn heads`)."""

UNIFORM = TEXTS["heads.uniform"]


def percent(x: float) -> str:
    """A weight as a whole percentage, never "-0%"."""
    return f"{abs(round(100 * x)):.0f}%"


def _share(lang: str, p: float, c: float, *, average: bool = False) -> str:
    """ "86%，均匀注意力 20%" / "86%, uniform attention 20%" (average: "平均 61%…" / "61% on average, …")."""
    uniform = UNIFORM[lang].format(c=percent(c))
    if lang == "zh":
        return f"{'平均 ' if average else ''}{percent(p)}，{uniform}"
    return f"{percent(p)}{' on average' if average else ''}, {uniform}"


def _colon(lang: str) -> str:
    return "：" if lang == "zh" else ": "


def link_credited(r: dict) -> bool:
    """Whether a relation's measured share (summed over its keys, mean over its links) is clearly above
    chance (`head_types.above_chance`)."""
    return above_chance(r["weight"], r["chance"])


def _link(tokens: list[str], name: str, r: dict, lang: str) -> str:
    """ "动词回看做动作的名词：走进→怪兽 86%，均匀注意力 20%" (+ the keys together, or the mean over links)."""
    pair = f"{tokens[r['query']]}→{tokens[r['key']]} {_share(lang, r['pair_weight'], r['pair_chance'])}"
    extra = ""
    if r["n"] > 1:
        extra = {
            "zh": f"（{r['n']} 处平均 {_share('zh', r['weight'], r['chance'])}）",
            "en": f" (mean over {r['n']} links: {_share('en', r['weight'], r['chance'])})",
        }[lang]
    elif len(r["keys"]) > 1:
        keys = "+".join(tokens[k] for k in r["keys"])
        extra = {
            "zh": f"（{keys} 合计 {_share('zh', r['weight'], r['chance'])}）",
            "en": f" ({keys} together {_share('en', r['weight'], r['chance'])})",
        }[lang]
    return f"{WORDS[name][lang]}{_colon(lang)}{pair}{extra}"


def _link_short(tokens: list[str], r: dict, lang: str) -> str:
    """ "森林→走进+怪兽 43%，均匀注意力 33%": the link with all its keys, the share it is credited on."""
    keys = "+".join(tokens[k] for k in r["keys"])
    many = {"zh": f"（{r['n']} 处平均）", "en": f" (mean over {r['n']} links)"}[lang] if r["n"] > 1 else ""
    return f"{tokens[r['query']]}→{keys}{many} {_share(lang, r['weight'], r['chance'])}"


def _type(t: str, m: dict, first: str, lang: str) -> str:
    if t == "broad":
        e = f"{m['score']:.2f}"
        return {
            "zh": f"注意力接近均匀：平均归一化熵 {e}（1 = 均匀）",
            "en": f"close to uniform: mean normalised entropy {e} (1 = uniform)",
        }[lang]
    return TYPE_WORDS[t][lang].format(first=first) + _colon(lang) + _share(lang, m["score"], m["chance"], average=True)


def sentence(tokens: list[str], s: dict, links: dict[str, dict], types: dict[str, dict]) -> dict:
    """One head's description: {kind, text {zh, en}, weight, chance (of the share named first), types
    (credited, clearest first), scores (`head_types.measure` on this text)} and, where a link is named,
    relation, query, key, mean, mean_chance, link_credited. See the module doc for the order."""
    first = tokens[0] if tokens else ""
    kinds = credited(types) if types else []
    best = max(links.items(), key=lambda kv: kv[1]["weight"], default=None)
    good = [(n, r) for n, r in links.items() if link_credited(r)]
    link = max(good, key=lambda kv: kv[1]["weight"]) if good else None
    parts: dict[str, list[str]] = {"zh": [], "en": []}
    out: dict = {"types": kinds, "scores": types}
    sink = bool(s["rows"]) and s["first_token"] >= SINK_LIMIT
    if sink:
        c = types["first"]["chance"] if types.get("first", {}).get("chance") is not None else 0.0
        out |= {"kind": "first", "weight": s["first_token"], "chance": c}
        words = {"zh": f"把注意力停在第一个 token {first} 上", "en": f"parks its attention on the first token {first}"}
        for lang in parts:
            parts[lang].append(words[lang] + _colon(lang) + _share(lang, s["first_token"], c, average=True))
    if link is not None:
        name, r = link
        if not sink:
            out |= {"kind": "relation", "weight": r["pair_weight"], "chance": r["pair_chance"]}
        out |= _link_fields(name, r, True)
        for lang in parts:
            parts[lang].append(_link(tokens, name, r, lang))
    others = [t for t in kinds if t != "first" or not sink]
    if others:
        t = others[0]
        if "kind" not in out:
            out |= {"kind": t, "weight": types[t]["score"], "chance": types[t]["chance"]}
        if len(parts["zh"]) < 2:
            for lang in parts:
                lead = {"zh": "整体上，", "en": "overall, "}[lang] if parts[lang] else ""
                parts[lang].append(lead + _type(t, types[t], first, lang))
    if "kind" not in out:
        out |= {"kind": "spread", "weight": s["max_weight"], "chance": None}
        bits = f"{s['entropy']:.2f}"
        parts["zh"].append(f"注意力较分散：平均熵 {bits} bit，没有明显高于均匀注意力的模式")
        parts["en"].append(f"spread out: mean entropy {bits} bits, no pattern clearly above uniform attention")
    if link is None and best is not None and out["kind"] in ("spread", "broad"):
        name, r = best
        out |= _link_fields(name, r, False)
        for lang, words in (
            ("zh", "最强的教程链接 {}：不算明显高于均匀"),
            ("en", "its strongest tutorial link {}: not clearly above"),
        ):
            parts[lang].append(words.format(_link_short(tokens, r, lang)))
    out["text"] = {"zh": "；".join(parts["zh"]), "en": "; ".join(parts["en"])}
    return out


def _link_fields(name: str, r: dict, good: bool) -> dict:
    return {
        "relation": name,
        "query": r["query"],
        "key": r["key"],
        "pair_weight": r["pair_weight"],
        "pair_chance": r["pair_chance"],
        "mean": r["weight"],
        "mean_chance": r["chance"],
        "link_credited": good,
    }
