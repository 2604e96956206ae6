"""One head in words, every share beside what uniform attention gives the same keys (`heads.describe`).

    sentence(tokens, summary, links, types) -> {kind, text {zh, en}, weight, chance, …}

What a head is said to do, in this order (a later part is added after a "；" only where it says more):

    first     its mean weight on the first token reaches summary.SINK_LIMIT — the "*" of the heads grid —
              so a sink head says so first, whatever else it does
    relation  one of the text's tutorial relations is held (`analysis.held`: clearly above chance by
              `head_types.above_chance`, and, where its key is the previous word, still above chance and above
              the previous word on the control sentence: "走进→怪兽 86%，均匀注意力 20%，中间隔着 慢慢地 时仍有
              50%，均匀注意力 11%")
              and what the other words give the same key ("；其他词看「怪兽」平均 26%（8 行，p < 0.001）")
    key       a relation above chance that only the other words' weight on its key refuses: "「怪兽」谁都看：…"
    previous  a relation above chance on the text that the control shows to be the previous word's, the
              head's previous-word share credited on the words of text and control ("看前一个词：…（在这句里
              恰好也是 森林→走进）")
    a type    its clearest credited head type on this text (`head_types.measure`): previous, next, self,
              first, duplicate, induction, local, broad (a first-token type credited on the probe says it is
              the probe's first token, not the text's: "偏向探针的第一个 token（不是这句话的 一只）")
    spread    nothing credited: its mean entropy, and its strongest link with the chance level it failed

A relation is one named claim (this query → those keys), so its links are enough to credit it once it holds
on the control; the head types are statistics over positions and need head_types.MIN_ROWS rows (else "not
measurable on this text"). Chance is always uniform attention over the
keys the query may see (the head's own visibility: causal rule, window, an intervention's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..analysis.head_types import MIN_ROWS, REGISTRY
from ..analysis.relations import WORDS
from ..analysis.summary import SINK_LIMIT
from .texts import TEXTS, text

__all__ = ["percent", "type_words", "sentence"]


def type_words(t: str, kind: str, lang: str) -> str:
    """One of a head type's words (`head_types.WORD_KINDS`: short, label, does, heads) from its registry entry."""
    return REGISTRY[t].words[kind][lang]


UNIFORM = TEXTS["heads.uniform"]


def percent(x: float) -> str:
    """A weight as a whole percentage, never "-0%"."""
    return f"{abs(round(100 * x)):.0f}%"


def _share(lang: str, p: float, c: float, *, average: bool = False) -> str:
    """ "86%，均匀注意力 20%" / "86%, uniform attention 20%" (average: "平均 61%…" / "61% on average, …")."""
    uniform = UNIFORM[lang].format(c=percent(c))
    return text("heads.words.share_mean" if average else "heads.words.share", lang, p=percent(p), uniform=uniform)


def _colon(lang: str) -> str:
    return text("heads.words.colon", lang)


Groups = Sequence[Mapping[int, tuple[Sequence[int], str]]]
"""The text's words, then its characters (`pieces.Pieces.group_of`): each level maps a piece's position to its
group, (the group's pieces' positions, its name)."""


def keys_named(tokens: list[str], keys: Sequence[int], groups: Groups = ()) -> str:
    """A link's keys as the text reads them: "一只+蓝色" where the keys hold every piece of those words (of a
    byte-level BPE's 一 / 只(1/2) / 只(2/2) / 蓝(1/3) …), a character where they hold all of its pieces, else
    the piece's own name; "+" between."""
    keyset, done, out = set(keys), set[int](), []
    for k in keys:
        if k in done:
            continue
        name, members = tokens[k], [k]
        for level in groups:
            group = level.get(k)
            if group is not None and len(group[0]) > 1 and keyset.issuperset(group[0]):
                members, name = list(group[0]), group[1]
                break
        out.append(name)
        done.update(members)
    return "+".join(out)


def _link(tokens: list[str], name: str, r: dict, lang: str, groups: Groups = ()) -> str:
    """ "动词回看做动作的名词：走进→怪兽 86%，均匀注意力 20%" (+ the keys together, or the mean over links)."""
    pair = f"{tokens[r['query']]}→{tokens[r['key']]} {_share(lang, r['pair_weight'], r['pair_chance'])}"
    extra = ""
    share = _share(lang, r["weight"], r["chance"])
    if r["n"] > 1:
        extra = text("heads.words.links_mean", lang, n=r["n"], share=share)
    elif len(r["keys"]) > 1:
        extra = text("heads.words.keys_together", lang, keys=keys_named(tokens, r["keys"], groups), share=share)
    return f"{text(WORDS[name], lang)}{_colon(lang)}{pair}{extra}"


def _link_short(tokens: list[str], r: dict, lang: str, groups: Groups = ()) -> str:
    """ "森林→走进+怪兽 43%，均匀注意力 33%": the link with all its keys, the share it is credited on."""
    keys = keys_named(tokens, r["keys"], groups)
    many = text("heads.words.links_many", lang, n=r["n"]) if r["n"] > 1 else ""
    return f"{tokens[r['query']]}→{keys}{many} {_share(lang, r['weight'], r['chance'])}"


def _type(t: str, m: dict, first: str, lang: str) -> str:
    if t == "broad":
        return text("heads.words.broad", lang, e=f"{m['score']:.2f}")
    where = text("heads.words.on_probe", lang) if m.get("on") == "probe" else ""  # not this text's rows
    if t == "first" and m.get("on") == "probe":  # measured on the probe's first token, not the text's
        does = text("heads.words.first_on_probe", lang, first=first)
    else:
        does = type_words(t, "does", lang).format(first=first)
    return does + _colon(lang) + _share(lang, m["score"], m["chance"], average=True) + where


def sentence(
    tokens: list[str],
    s: dict,
    held: dict,
    types: dict[str, dict],
    v: dict,
    control: list[str] | None = None,
    groups: Groups = (),
) -> dict:
    """One head's description: {kind, text {zh, en}, weight, chance (of the share named first), types
    (the verdict's types, strongest first), scores (`head_types.measure` on this text), verdict (`v`, the one
    answer every view reads: `analysis.verdicts`)} and, where a link is named, relation, query, key, mean,
    mean_chance, link_credited. `held`: the head's `analysis.held` entry; `control`: the control sentence's
    token names; `groups`: the text's words and characters, which name a link's keys (`keys_named`). See the module
    doc for the order."""
    first = tokens[0] if tokens else ""
    links = held["relations"]
    entries = {e["type"]: e for e in v["types"]}
    kinds = list(entries)
    best = max(links.items(), key=lambda kv: kv[1]["weight"], default=None)
    good = [(n, r) for n, r in links.items() if r["held"]]
    link = max(good, key=lambda kv: kv[1]["weight"]) if good else None
    parts: dict[str, list[str]] = {"zh": [], "en": []}
    out: dict = {"types": kinds, "scores": types, "verdict": v}
    sink = bool(s["rows"]) and s["first_token"] >= SINK_LIMIT
    if sink:
        c = types["first"]["chance"] if types.get("first", {}).get("chance") is not None else 0.0
        out |= {"kind": "first", "weight": s["first_token"], "chance": c}
        for lang in parts:
            words = text("heads.words.first", lang, first=first)
            parts[lang].append(words + _colon(lang) + _share(lang, s["first_token"], c, average=True))
    if link is not None:
        name, r = link
        if not sink:
            out |= {"kind": "relation", "weight": r["pair_weight"], "chance": r["pair_chance"]}
        out |= _link_fields(name, r, True)
        for lang in parts:
            said = _link(tokens, name, r, lang, groups) + _kept(r, control or [], lang) + _tested(r, lang)
            parts[lang].append(said + _baseline(tokens, r, lang, groups))
    explained = [(n, r) for n, r in links.items() if r["explained"] == "previous"]
    said_previous = False
    if link is None and explained and "previous" in entries:
        mine = held.get("previous_word", {})  # the words' own measure: what "恰好也是 森林→走进" is about
        e = mine if mine.get("credited") else entries["previous"]
        name, r = max(explained, key=lambda kv: kv[1]["weight"])
        if "kind" not in out:
            out |= {"kind": "previous", "weight": e["score"], "chance": e["chance"]}
        out |= _link_fields(name, r, False)
        pair = f"{tokens[r['query']]}→{tokens[r['key']]}"
        for lang in parts:
            share = _share(lang, e["score"], e["chance"], average=True)
            share += text("heads.words.on_probe", lang) if e.get("on") == "probe" else ""
            parts[lang].append(text("heads.words.previous_word", lang, share=share, pair=pair))
        said_previous = True
    others = [t for t in kinds if (t != "first" or not sink) and (t != "previous" or not said_previous)]
    if others:
        t = others[0]
        if "kind" not in out:
            out |= {"kind": t, "weight": entries[t]["score"], "chance": entries[t]["chance"]}
        if len(parts["zh"]) < 2:
            for lang in parts:
                lead = text("heads.words.overall", lang) if parts[lang] else ""
                parts[lang].append(lead + _type(t, entries[t], first, lang))
    if "kind" not in out:
        out |= {"kind": "spread", "weight": s["max_weight"], "chance": None}
        said = "heads.words.spread" if v["measurable"] else "heads.words.unmeasurable"
        for lang in parts:
            parts[lang].append(text(said, lang, bits=f"{s['entropy']:.2f}", n=MIN_ROWS))
    salient = [(n, r) for n, r in links.items() if r["explained"] == "key"]
    if link is None and not said_previous and salient and len(parts["zh"]) < 2:
        name, r = max(salient, key=lambda kv: kv[1]["weight"])
        out |= {} if "relation" in out else _link_fields(name, r, False)
        b = r["test"]["baseline"]
        for lang in parts:
            key = keys_named(tokens, r["keys"], groups)
            pair = f"{tokens[r['query']]}→{key} {percent(r['weight'])}"
            parts[lang].append(text("heads.words.key_salient", lang, word=key, pair=pair, share=percent(b["weight"])))
        said_previous = True  # the strongest link is said: not again below
    if link is None and not said_previous and best is not None and out["kind"] in ("spread", "broad"):
        name, r = best
        out |= _link_fields(name, r, False)
        rows = r.get("test", {}).get("rows", 0)
        said = "heads.words.strongest" if r.get("measurable", True) else "heads.words.strongest_unmeasured"
        for lang in parts:
            parts[lang].append(text(said, lang, link=_link_short(tokens, r, lang, groups), rows=rows, n=MIN_ROWS))
    out["text"] = {lang: text("common.join", lang).join(parts[lang]) for lang in parts}
    return out


def _kept(r: dict, control: list[str], lang: str) -> str:
    """ "，中间隔着 慢慢地 时仍有 71%": the relation's pair on the control sentence, where it was not adjacent."""
    c = r.get("control")
    if not r.get("adjacent") or c is None or not control:
        return ""
    share = _share(lang, c["pair_weight"], c["pair_chance"])
    if c.get("between_unknown"):  # the model reads those words as <unk>: say so, not only their text
        unread = text("common.list", lang).join(c["between_unknown"])
        return text("heads.words.control_unknown", lang, between=c["between"], unknown=unread, share=share)
    return text("heads.words.control", lang, between=c["between"], share=share)


P_FLOOR = 1e-3
"""Below this a p-value is written "p < 0.001"."""


def p_words(p: float | None, lang: str) -> str:
    """ "p = 0.004" / "p < 0.001" (P_FLOOR); "" without a p-value."""
    if p is None:
        return ""
    if p < P_FLOOR:
        return text("heads.words.p_below", lang, p=f"{P_FLOOR:g}")
    return text("heads.words.p", lang, p=f"{p:.3f}")


def _tested(r: dict, lang: str) -> str:
    """ "；在 9 句话里键不紧挨着的 8 行上，平均 72%，均匀注意力 14%，p < 0.001": the test that credits the relation
    (`analysis.held`'s `test`: every row where its key is not the previous word)."""
    t = r.get("test")
    if not t or not t.get("rows"):
        return ""
    share = _share(lang, t["weight"], t["chance"], average=True)
    p = p_words(t["p"], lang)
    return text("heads.words.tested", lang, sentences=t["sentences"], rows=t["rows"], share=share, p=p)


def _baseline(tokens: list[str], r: dict, lang: str, groups: Groups = ()) -> str:
    """ "；其他词看「怪兽」平均 26%（8 行，p < 0.001）": what the other words of the text and its control and contrast
    sentences give the relation's keys on the test's rows (`analysis.held`'s test baseline: a key every word looks at
    would give it as much); "" where it was not measured."""
    b = (r.get("test") or {}).get("baseline") or {}
    if b.get("weight") is None or not b.get("rows"):
        return ""
    key = keys_named(tokens, r["keys"], groups)
    share = percent(b["weight"])
    return text("heads.words.baseline", lang, word=key, share=share, rows=b["rows"], p=p_words(b["p"], lang))


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
