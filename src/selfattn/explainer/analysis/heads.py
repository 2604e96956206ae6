"""A head's numbers on a text: its head types measured, its weight on the tutorial's links, the head to show
first, and every head ranked by one weight. The words for them are `views.heads` (`describe`).

    measures(trace)               -> [layer][head] `head_types.measure` of each head on this text
    measurer(ids)                 -> the `capture` callback that measures each call's own weights at the capture point
    relation_weights(trace, found) -> [layer][head] {relation: {weight, chance, …}}: the tutorial links' weights
    pick(table, descriptions)     -> (layer, head): the head to show first (`views.heads.PICK_RULE` in words)
    search(trace, query, key)     -> {query, key, heads [{layer, head, weight}]}: heads ranked by one weight
    first_token_note(trace, table)-> {token, selected?, mean}: how much weight parks on the first token

Every number is a weight of `LayerTrace.stages` (float64, exact; the head-type measures in MEASURE_DTYPE) or of
the per-head summaries.
"""

from __future__ import annotations

from typing import cast

import torch

from ... import checks
from ..trace_types import LayerTrace, Measure, ModelTrace
from . import head_types
from .relations import RELATIONS, Link
from .summary import SINK_LIMIT

__all__ = [
    "SELF_LIMIT",
    "MEASURE_BLOCK",
    "MEASURE_DTYPE",
    "measures",
    "measurer",
    "pick",
    "search",
    "first_token_note",
    "relation_weights",
    "link_credited",
    "shown_head",
]

SELF_LIMIT = 0.5
"""A head whose mean weight on the token itself reaches this "mostly looks at itself": not picked."""
MEASURE_BLOCK = 1 << 24
"""Weights measured at once (heads × L × L elements, 64 MiB in MEASURE_DTYPE), so a long text never holds a layer's
all."""
MEASURE_DTYPE = torch.float32
"""What the head types are measured in: they are means of weights and shares of rows, stated to 0.01 % and tested
against float64 to 1e-6; float32 holds them to about 1e-7 and takes a quarter of float64's time (4 bytes, and SIMD
exp), the largest part of an explanation at 512 tokens."""


def relation_weights(trace: ModelTrace, found: list[Link]) -> list[list[dict[str, dict]]]:
    """[layer][head] {relation: {weight, chance, n, keys, query, key, pair_weight, pair_chance}}: the mean over
    the relation's links of the weight the query gives its keys together (`weight`) and what uniform attention
    over the keys the query may see gives them (`chance`: |keys| / |visible|); the single (query, key) with
    the largest weight, its weight and chance (1 / |visible|), and the keys of its link. `found`: the links to
    measure (`held.text_links`, `relations.links`)."""
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
                seen = layer.head_rule(h)[2].sum(-1)  # (L,) keys each query may see
                for name, mine in by_relation.items():
                    if mine:
                        per_head[name] = _relation(w, at, seen, mine)
            per_layer.append(per_head)
        out.append(per_layer)
    return out


def _relation(w, at: dict, seen, mine) -> dict:
    total = [float(w[at[link.query], list(link.keys)].sum()) for link in mine]
    chance = [len(link.keys) / max(int(seen[link.query]), 1) for link in mine]
    pairs = [(float(w[at[link.query], k]), link.query, k, link.keys) for link in mine for k in link.keys]
    best = max(pairs, key=lambda p: p[:3])
    return {
        "weight": sum(total) / len(total),
        "chance": sum(chance) / len(chance),
        "n": len(mine),
        "keys": list(best[3]),
        "query": best[1],
        "key": best[2],
        "pair_weight": best[0],
        "pair_chance": 1 / max(int(seen[best[1]]), 1),
    }


def link_credited(r: dict) -> bool:
    """Whether a relation's measured share (summed over its keys, mean over its links) is clearly above
    chance (`head_types.above_chance`)."""
    return head_types.above_chance(r["weight"], r["chance"])


def measures(trace: ModelTrace) -> list[list[dict[str, dict]]]:
    """[layer][head] `head_types.measure` of each head's weights on this text, against the head's own
    visibility (a head an intervention changed apart is measured with its own)."""
    ids = trace.token_ids.tolist()
    return [_layer_measures(layer, ids) for layer in trace.layers]


def measurer(ids: list[int]) -> Measure:
    """The `capture.trace.Measure` of a text of these token ids: `head_types.measure` of the call's own weights,
    MEASURE_BLOCK elements at a time, the text's `head_types.layout` made once for the layers that share a
    visibility (what `measures` then reads back instead of recomputing the weights)."""

    last: list = []  # [(visible, causal, layout)]: the layers of one capture share their visibility

    def measure(weights: torch.Tensor, visible: torch.Tensor, causal: bool, nats: torch.Tensor) -> list[dict]:
        if not last or last[0][1] != causal or not torch.equal(last[0][0], visible):
            last[:] = [(visible, causal, head_types.layout(ids, causal=causal, visible=visible))]
        laid = last[0][2]
        H, L = weights.shape[0], weights.shape[-1]
        step = max(1, MEASURE_BLOCK // max(L * L, 1))
        out: list[dict] = []
        for h in range(0, H, step):
            block = weights[h : h + step].to(MEASURE_DTYPE)
            out += head_types.measure(block, ids, causal=causal, nats=nats[h : h + step], laid=laid)
        return out

    return measure


def _layer_measures(layer: LayerTrace, ids: list[int]) -> list[dict]:
    if layer.measured is not None:  # measured at the capture point, on the call's own weights
        return list(layer.measured)
    L, H = layer.length, layer.n_heads
    out: list[dict | None] = [None] * H
    plain = [h for h in range(H) if h not in layer.changed]
    step = max(1, MEASURE_BLOCK // max(L * L, 1))
    groups = [(plain[i : i + step], layer.visible) for i in range(0, len(plain), step)]
    groups += [([h], layer.head_rule(h)[2]) for h in layer.changed]
    for heads, visible in groups:
        if heads and heads[0] in layer.changed:  # a head changed apart: its own rule
            w = layer.stages(heads[0], dtype=MEASURE_DTYPE, weighted=False)["weights"][None].numpy()
        else:
            w = layer.weights(heads, dtype=MEASURE_DTYPE).numpy()  # (h, L, L), the plain heads together
        for h, m in zip(heads, head_types.measure(w, ids, causal=layer.causal, visible=visible), strict=True):
            out[h] = m
    return cast(list[dict], out)  # every head filled: the plain heads and the changed ones


def pick(table: list[list[dict]], descriptions: list[list[dict]]) -> tuple[int, int]:
    """(layer, head) by the pick rule (`views.heads.PICK_RULE`), among the heads not parked on the first token nor
    on themselves (every head when all are): (1) a credited tutorial link, the largest mean weight on it; (2) a credited
    teaching type (`head_types.teaching`), the largest share; (3) the lowest mean entropy. Ties: lower entropy,
    layer, head."""
    allowed = [
        (l, h)
        for l, heads in enumerate(table)
        for h, s in enumerate(heads)
        if s["rows"] and s["first_token"] < SINK_LIMIT and s.get("self", 0.0) < SELF_LIMIT
    ]
    if not allowed:
        allowed = [(l, h) for l, heads in enumerate(table) for h in range(len(heads))]

    def key(l, h, share):
        return (-share, table[l][h]["entropy"], l, h)

    linked = [key(l, h, descriptions[l][h]["mean"]) for l, h in allowed if descriptions[l][h].get("link_credited")]
    typed, teaching = [], head_types.teaching()
    for l, h in allowed:
        d = descriptions[l][h]
        credited = {e["type"]: e["score"] for e in d.get("verdict", {}).get("types", [])}
        # the type's share on the text; where the text has no rows for it (a type credited on the probe, say, of
        # a one-word text) the share that credited it
        shares = [_share(d["scores"][t]["score"], credited.get(t)) for t in d.get("types", []) if t in teaching]
        if shares:
            typed.append(key(l, h, max(shares)))
    plain = [key(l, h, 0.0) for l, h in allowed]
    _, _, l, h = min(linked or typed or plain)
    return l, h


def _share(on_text: float | None, credited: float | None) -> float:
    """A teaching type's share for `pick`: on the text, else where it was credited, else 0."""
    return on_text if on_text is not None else credited if credited is not None else 0.0


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


def shown_head(trace: ModelTrace, table, described, layer, head, among=None) -> dict:
    """{layer, head, rule} of the head shown first: as asked, else the best of the layer or of the head asked,
    else `heads.pick`'s; a head picked (layer not asked) is picked among the layers `among` (the layers a page
    holds: --layers) where given, so a page never opens on a layer it does not hold."""
    for name, value, n in (("layer", layer, trace.n_layers), ("head", head, trace.n_heads)):
        if value is not None and not 0 <= checks.integer(name, value) < n:
            raise ValueError(f"{name} must be in [0, {n - 1}], got {value!r}")
    if layer is None and among:
        order = sorted(set(among))
        if not all(0 <= checks.integer("a layer index", l) < trace.n_layers for l in order):
            raise ValueError(f"layers must hold indices in [0, {trace.n_layers - 1}], got {list(among)!r}")
        if head is not None:
            at = pick([[table[l][head]] for l in order], [[described[l][head]] for l in order])[0]
            return {"layer": order[at], "head": head, "rule": "within head"}
        at, best_head = pick([table[l] for l in order], [described[l] for l in order])
        return {"layer": order[at], "head": best_head, "rule": "auto"}
    if layer is not None and head is not None:
        return {"layer": layer, "head": head, "rule": None}
    if layer is not None:  # best head of that layer
        best = pick([table[layer]], [described[layer]])
        return {"layer": layer, "head": best[1], "rule": "within layer"}
    if head is not None:
        best_layer = pick([[row[head]] for row in table], [[row[head]] for row in described])[0]
        return {"layer": best_layer, "head": head, "rule": "within head"}
    picked_layer, picked_head = pick(table, described)
    return {"layer": picked_layer, "head": picked_head, "rule": "auto"}
