"""Heads that teach: what each head does, in one line of words, and the head to show first.

    describe(trace, table)        -> [layer][head] {kind, text {zh, en}, …}: each head's behaviour, measured
    pick(trace, table)            -> (layer, head): the head that best shows one of the tutorial's links
    search(trace, query, key)     -> {query, key, heads [{layer, head, weight}]}: heads ranked by one weight
    first_token_note(trace, table)-> {token, selected?, mean}: how much weight parks on the first token

A head's behaviour, in this order of precedence:

    relation  its largest mean weight over one of the text's links (`relations.links`) is at least
              RELATION_SHOWN: "the verb looks back at the noun that moves: 走进→怪兽 86%"
    first     mean weight on the first token >= summary.SINK_LIMIT (attention parked there)
    self      mean weight on the token itself >= SELF_LIMIT
    previous  mean weight on the token before >= PREVIOUS_LIMIT
    spread    none of these: the mean entropy says how spread out it is

Every number is a weight of `LayerTrace.stages` (float64, exact) or of the per-head summaries.
"""

from __future__ import annotations

from ..capture.trace import ModelTrace
from .relations import RELATIONS, WORDS, links
from .summary import SINK_LIMIT
from .texts import TEXTS

__all__ = [
    "RELATION_SHOWN",
    "SELF_LIMIT",
    "PREVIOUS_LIMIT",
    "PICK_RULE",
    "describe",
    "pick",
    "search",
    "first_token_note",
    "relation_weights",
    "percent",
]

RELATION_SHOWN = 0.3
"""A head is described by a link when its mean weight over that link's keys reaches this."""
SELF_LIMIT = 0.5
"""A head whose mean weight on the token itself reaches this "mostly looks at itself": not picked."""
PREVIOUS_LIMIT = 0.5

PICK_RULE = TEXTS["pick_rule"]
"""How the shown head is picked, {zh, en} (`pick`): the text table's entry."""


def percent(x: float) -> str:
    """A weight as a whole percentage, never "-0%"."""
    return f"{abs(round(100 * x)):.0f}%"


def relation_weights(trace: ModelTrace) -> list[list[dict[str, dict]]]:
    """[layer][head] {relation: {weight, n, query, key, pair_weight}}: mean over the relation's links of the
    weight the query gives its keys together, and the single (query, key) with the largest weight."""
    found = links(trace.tokens)
    rows = sorted({link.query for link in found})
    at = {r: i for i, r in enumerate(rows)}  # query position -> its row in the weights
    by_relation = {name: [link for link in found if link.relation == name] for name in RELATIONS}
    out = []
    for layer in trace.layers:
        per_layer = []
        for h in range(layer.n_heads):
            per_head: dict[str, dict] = {}
            if rows:
                w = layer.stages(h, rows, weighted=False)["weights"]  # (R, L)
                for name, mine in by_relation.items():
                    if not mine:
                        continue
                    total = [float(w[at[link.query], list(link.keys)].sum()) for link in mine]
                    pairs = [(float(w[at[link.query], k]), link.query, k) for link in mine for k in link.keys]
                    best = max(pairs)
                    per_head[name] = {
                        "weight": sum(total) / len(total),
                        "n": len(mine),
                        "query": best[1],
                        "key": best[2],
                        "pair_weight": best[0],
                    }
            per_layer.append(per_head)
        out.append(per_layer)
    return out


def describe(trace: ModelTrace, table: list[list[dict]]) -> list[list[dict]]:
    """One description per head: {kind, text {zh, en}} and the numbers it names (see the module doc)."""
    rel = relation_weights(trace)
    tokens = trace.tokens
    out = []
    for l, heads in enumerate(table):
        row = []
        for h, s in enumerate(heads):
            row.append(_describe_one(tokens, s, rel[l][h]))
        out.append(row)
    return out


def _describe_one(tokens: list[str], s: dict, rel: dict[str, dict]) -> dict:
    best = max(rel.items(), key=lambda kv: kv[1]["weight"], default=None)
    if best is not None and best[1]["weight"] >= RELATION_SHOWN:
        name, r = best
        pair = f"{tokens[r['query']]}→{tokens[r['key']]} {percent(r['pair_weight'])}"
        mean = percent(r["weight"])
        extra = {"zh": "", "en": ""}
        if r["n"] > 1:
            extra = {"zh": f"（{r['n']} 处平均 {mean}）", "en": f" (mean over {r['n']} links: {mean})"}
        return {
            "kind": "relation",
            "relation": name,
            "query": r["query"],
            "key": r["key"],
            "weight": r["pair_weight"],
            "mean": r["weight"],
            "text": {
                "zh": f"{WORDS[name]['zh']}：{pair}{extra['zh']}",
                "en": f"{WORDS[name]['en']}: {pair}{extra['en']}",
            },
        }
    first = tokens[0] if tokens else ""
    if s["rows"] and s["first_token"] >= SINK_LIMIT:
        p = percent(s["first_token"])
        return {
            "kind": "first",
            "weight": s["first_token"],
            "text": {
                "zh": f"把注意力停在第一个 token {first} 上：平均 {p}",
                "en": f"parks its attention on the first token {first}: {p} on average",
            },
        }
    if s["rows"] and s.get("self", 0.0) >= SELF_LIMIT:
        p = percent(s["self"])
        return {
            "kind": "self",
            "weight": s["self"],
            "text": {"zh": f"主要看自己：平均 {p}", "en": f"mostly looks at itself: {p} on average"},
        }
    if s["rows"] and s["previous"] >= PREVIOUS_LIMIT:
        p = percent(s["previous"])
        return {
            "kind": "previous",
            "weight": s["previous"],
            "text": {"zh": f"看前一个 token：平均 {p}", "en": f"looks at the token just before: {p} on average"},
        }
    bits = f"{s['entropy']:.2f}"
    return {
        "kind": "spread",
        "weight": s["max_weight"],
        "text": {"zh": f"注意力较分散：平均熵 {bits} bit", "en": f"spread out: mean entropy {bits} bits"},
    }


def pick(table: list[list[dict]], descriptions: list[list[dict]]) -> tuple[int, int]:
    """(layer, head) by PICK_RULE. Falls back to every head when all are parked on the first token or
    on themselves."""
    allowed = [
        (l, h)
        for l, heads in enumerate(table)
        for h, s in enumerate(heads)
        if s["rows"] and s["first_token"] < SINK_LIMIT and s.get("self", 0.0) < SELF_LIMIT
    ]
    if not allowed:
        allowed = [(l, h) for l, heads in enumerate(table) for h in range(len(heads))]
    teaching = [
        (descriptions[l][h]["mean"], -table[l][h]["entropy"], -l, -h)
        for l, h in allowed
        if descriptions[l][h]["kind"] == "relation"
    ]
    if teaching:
        _, _, l, h = max(teaching)
        return -l, -h
    _, l, h = min((table[l][h]["entropy"], l, h) for l, h in allowed)
    return l, h


def search(trace: ModelTrace, query, key) -> dict:
    """Every head ranked by the weight from `query` to `key` (token strings or positions).

    A string names the first token equal to it (surrounding spaces ignored) for the query, and for
    the key the nearest such token the query may look at. Returns {query, key, heads [{layer, head,
    weight}]}, the largest weight first (ties: lower layer, then lower head)."""
    tokens = [t.strip() for t in trace.tokens]
    i = _position(tokens, query, "query", range(len(tokens)))
    visible = trace.layers[0].visible[i]
    j = _position(tokens, key, "key", [k for k in range(len(tokens) - 1, -1, -1) if bool(visible[k])])
    ranked = []
    for l, layer in enumerate(trace.layers):
        for h in range(layer.n_heads):
            weight = float(layer.stages(h, [i], weighted=False)["weights"][0, j])
            ranked.append({"layer": l, "head": h, "weight": weight})
    ranked.sort(key=lambda r: (-r["weight"], r["layer"], r["head"]))
    return {"query": i, "key": j, "heads": ranked}


def _position(tokens: list[str], value, what: str, order) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a token string or a position, got {value!r}")
    if isinstance(value, int):
        if value not in set(order):
            raise ValueError(f"{what} position {value} is not one the query may look at (0 … {len(tokens) - 1})")
        return value
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a token string or a position, got {type(value).__name__}")
    word = value.strip()
    for k in order:
        if tokens[k] == word:
            return k
    where = "among the tokens" if what == "query" else "among the tokens the query may look at"
    raise ValueError(f"{what} {value!r} is not {where}: {' / '.join(tokens)}")


def first_token_note(trace: ModelTrace, table: list[list[dict]], selected: tuple[int, int]) -> dict:
    """{token, selected, mean}: the mean weight the selected head and all heads put on the first token."""
    shares = [s["first_token"] for heads in table for s in heads if s["rows"]]
    l, h = selected
    return {
        "token": trace.tokens[0],
        "selected": table[l][h]["first_token"],
        "mean": sum(shares) / len(shares) if shares else 0.0,
    }
