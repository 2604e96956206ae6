"""Relations held against the simpler explanation: a head is credited with a tutorial relation only where the
relation survives what a previous-word, self or first-token head would give.

    words_of(trace, user_words=())   -> [Word] of the trace's text with roles (`roles.word_roles`; [] without
                                        Chinese); user-given words (a list or {word: role}) win over the tagger
    control_of(pieces, user_words=(), known=None) -> `word_relations.Control` | None: the control sentence to run
                                        beside the text, from the text's pieces alone (or a trace holding them):
                                        known before any forward pass
    contrasts_of(pieces, user_words=(), known=None) -> [Control]: the control first (where one is needed), then
                                        contrast sentences of the same shape with other words of each role, as
                                        many as give each relation MIN_ROWS rows apart from the previous word
    held(trace, controls, user_words=()) -> [layer][head] {previous_word, relations {name: {…}}}

In 一只蓝色怪兽走进森林 every link the tutorial draws is also "the previous word" (走进→怪兽: 怪兽 is the word
before 走进), so the text alone cannot tell a grammar head from a previous-word head. The control sentence
(`word_relations.control`: 一只蓝色的怪兽慢慢地走进了森林) keeps the words and relations but puts a word between
each adjacent pair. A relation is a statistic like any head type: it is credited only on MIN_ROWS rows or more, by
the same test against uniform attention (`chance.against_chance`), and one sentence holds one or two links of it;
so the contrast sentences (`word_relations.contrasts`: 一只蓝色的猫慢慢地走进了城堡, 两只红色的兔子…) keep the
text's shape and relations with other words of each role, until every relation has MIN_ROWS rows where its key
is not the previous word. The caller runs them on the same model with the same intervention
(`tracing.trace_with_controls`: one batch beside the text's own pass) and passes their traces.

Per head, measured on the words (a word's query is its last piece, which has read all of it; its keys are every
piece of the key words, `word_relations.piece_links`):

    previous_word  the weight each word's query puts on the pieces of the word just before it, over every word
                   of the text and of its controls that has one: {score, chance, rows, p, credited} by
                   `chance.against_chance` (≥ MIN_ROWS rows) and `head_types.above_chance`
    relations      for each relation the text holds: `heads.relation_weights`' numbers on the text, plus
                   adjacent   whether a key word is the word just before the query word on the text
                   previous   the same query's weight on the previous word, on the text
                   control    the relation on the control sentence (what the sentences quote): {weight, chance,
                              previous, self, first (where a key is the first token itself: the head's mean
                              weight on it from the other rows, what a first-token head would give the key
                              anyway), between (the text between the pair's words), between_unknown (its words
                              the model reads as <unk>), query, key, pair_weight, pair_chance} or None
                   test       the relation pooled over every row where its key is not the previous word (the
                              text's links apart from it, every link of every control): {weight, chance, previous,
                              self, first, first_is_key, rows, p, credited, sentences} (`chance.against_chance`)
                   measurable whether the test has MIN_ROWS rows (else the views say "not measurable")
                   held       credited: above chance on the text (`heads.link_credited`), and on the test's rows
                              measurable, p < ALPHA, above chance by the share rule and above the weight on the
                              previous word, on the query itself and on the first token; where a key is the first
                              token itself, never for a head that gives the first token CREDIT_MIN or more from the
                              other rows (a first-token head: SmolLM2's L18H6 gives 一, token 0, 94 % from every
                              row, 98 % from 兽)
                              and above what the OTHER words give the same keys (the test's `baseline`: on the
                              same rows, each row's query against every later word's query of its sentence, the
                              permutation test of `chance` on its side, MIN_ROWS rows, p < ALPHA): a head where
                              every later token looks at the noun (the key-salience explanation) holds no verb→noun
                   explained  "previous" when it was above chance on the text but the control shows the weight
                              follows the previous word instead (the head's previous_word credited), "first" when
                              the key is the first token and the head parks there anyway, "key" when only the
                              baseline refuses it (every word looks at the key), else None
                   evidence   every sentence's row of the relation (`_evidence`: the query and key words, the
                              weight, the other words' mean weight on the same keys, whether the test counts it)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from ..trace_types import ModelTrace
from . import chance, head_types
from .heads import link_credited, relation_weights
from .relations import Grammar, Link
from .relations import links as grammar_links
from .roles import Word, word_roles
from .word_relations import Control, Scenes, WordLink, contrasts, control, piece_links, word_links, word_pieces

if TYPE_CHECKING:
    from ..pieces import Pieces

__all__ = ["words_of", "control_of", "contrasts_of", "text_links", "held", "credited", "word_types"]

CLAUSE2 = "clause2>clause1"
"""The one relation read from a grammar's tokens (`relations.links`: the explainer's `grammar`), not from the tagger's
roles."""


UserWords = Sequence[str] | Mapping[str, str | None]
"""User-given words: a list (kept whole, tagged by jieba) or {word: role} (`roles.given_roles`)."""


def words_of(trace: ModelTrace, user_words: UserWords = ()) -> list[Word]:
    """The trace's text as tagged words (its pieces' text); [] when the trace has no pieces or no Chinese.
    user_words (an `Explainer`'s: its tokenizer's words, a reader's {word: role}) are never split, and a role
    given with one is used instead of the tagger's."""
    if trace.pieces is None:
        return []
    return word_roles(trace.pieces.text, user_words)


def control_of(source: ModelTrace | Pieces | None, user_words: UserWords = (), known=None) -> Control | None:
    """The control sentence of a text (None: no relation is adjacent, or no roles). source: the text's
    `pieces.Pieces` (what the tokenizer gives: the control depends on the words, not on a forward pass) or a
    ModelTrace holding them (None: no pieces, no control); known(word) -> bool: whether the model's tokenizer knows
    a filler (`word_relations.control`: the first known one is used)."""
    pieces = source.pieces if isinstance(source, ModelTrace) else source
    if pieces is None:
        return None
    words = word_roles(pieces.text, user_words)
    return control(words, pieces.text, user_words, known) if words else None


def contrasts_of(
    source: ModelTrace | Pieces | None, user_words: UserWords = (), known=None, scenes: Scenes = ()
) -> list[Control]:
    """The sentences a text's relations are measured on beside it (`word_relations.contrasts`: the control first,
    where the text has one, then sentences of its shape with other words of each role, until every relation has
    MIN_ROWS rows whose key is not the previous word); [] without pieces, roles or relations. source, known:
    `control_of`'s; scenes: the words put in the contrasts (`word_relations.Scenes`, an `Explainer`'s)."""
    pieces = source.pieces if isinstance(source, ModelTrace) else source
    if pieces is None:
        return []
    words = word_roles(pieces.text, user_words)
    known = None if known is None else functools.cache(known)  # each candidate word is asked about many times
    return contrasts(words, pieces.text, user_words, known, scenes=scenes) if words else []


def text_links(trace: ModelTrace, words: Sequence[Word] | None = None) -> list[Link]:
    """The relations on the trace's pieces from its words' roles (`word_relations.piece_links`)."""
    words = words_of(trace) if words is None else words
    if not words or trace.pieces is None:
        return []
    return piece_links(words, trace.pieces.spans)


def _word_rows(trace: ModelTrace, words: Sequence[Word]) -> tuple[list[int], list[list[int]], list[list[int]]]:
    """(query piece, previous word's pieces, own pieces) of every word that has a previous word with pieces."""
    pieces = word_pieces(words, trace.pieces.spans) if trace.pieces is not None else []
    queries, before, own = [], [], []
    for i in range(1, len(pieces)):
        if pieces[i] and pieces[i - 1]:
            queries.append(pieces[i][-1])
            before.append(pieces[i - 1])
            own.append(pieces[i])
    return queries, before, own


def _stacked(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """(ΣR, max L) the (R, L) arrays of sentences of several lengths one under another, each padded on the right
    with 0 / False (a key no row sees)."""
    out = np.zeros((sum(a.shape[0] for a in arrays), max(a.shape[1] for a in arrays)), dtype=arrays[0].dtype)
    at = 0
    for a in arrays:
        out[at : at + a.shape[0], : a.shape[1]] = a
        at += a.shape[0]
    return out


def _previous_word(rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> dict:
    """{score, chance, rows, p, credited} of the previous-word pattern over (weights, targets, visible) rows."""
    if not rows:
        return {"score": None, "chance": None, "rows": 0, "p": None, "credited": False}
    w, t, v = (_stacked([r[i] for r in rows]) for i in range(3))
    share = (w * t).sum(1)
    uniform = t.sum(1) / np.maximum(v.sum(1), 1)
    score, base = float(share.mean()), float(uniform.mean())
    ev = chance.against_chance(w, t, v)
    credited = ev.credited and head_types.above_chance(score, base)
    return {"score": score, "chance": base, "rows": ev.rows, "p": ev.p, "credited": bool(credited)}


def _layer_weights(layer) -> tuple[np.ndarray, list[np.ndarray]]:
    """(every head's weights (H, L, L) float64, each head's visibility (L, L) bool) of one layer: the heads an
    intervention left alone computed together (`LayerTrace.weights`), the others each by its own rule. `held` reads
    every row it measures from these, one layer at a time."""
    plain = [h for h in range(layer.n_heads) if h not in layer.changed]
    w = np.zeros((layer.n_heads, layer.length, layer.length))
    if plain:
        w[plain] = layer.weights(plain).numpy()
    for h in layer.changed:
        w[h] = layer.stages(h, weighted=False)["weights"].numpy()
    shared = layer.visible.numpy().astype(bool)
    vis = [shared if h not in layer.changed else layer.head_rule(h)[2].numpy().astype(bool) for h in range(len(w))]
    return w, vis


def _rows_of(head: tuple[np.ndarray, np.ndarray], queries: list[int], before: list[list[int]]):
    """(weights (R, L), previous-word targets (R, L), visible (R, L)) of one head ((weights, visible), each (L, L))
    at those query pieces."""
    w, vis = head[0][queries], head[1][queries]
    t = np.zeros_like(vis)
    for r, keys in enumerate(before):
        t[r, keys] = True
    return w, t, vis


def _by_word(links: list[WordLink], pieces: list[list[int]], name: str):
    """(link, the query word's pieces, the key words' pieces) of each link of relation `name`."""
    return [
        (link, pieces[link.query], [p for k in link.keys for p in pieces[k]]) for link in links if link.relation == name
    ]


def _unknown_spans(trace: ModelTrace) -> list[tuple[int, int]]:
    """The character spans of the trace's pieces that are the tokenizer's unknown token."""
    if trace.pieces is None:
        return []
    return [span for span, u in zip(trace.pieces.spans, trace.pieces.unknown, strict=True) if u and span[0] >= 0]


@dataclass(frozen=True)
class _Sentence:
    """One sentence a relation is measured on (the text, the control, a contrast): its trace, tagged words, their
    links and pieces, its text and its unknown pieces' spans."""

    trace: ModelTrace
    words: list[Word]
    links: list[WordLink]
    pieces: list[list[int]]
    text: str
    unknown: list[tuple[int, int]]


def _sentence(trace: ModelTrace, user_words: UserWords) -> _Sentence:
    words = words_of(trace, user_words)
    pieces = word_pieces(words, trace.pieces.spans) if words and trace.pieces is not None else []
    text = trace.pieces.text if trace.pieces is not None else ""
    return _Sentence(trace, words, word_links(words), pieces, text, _unknown_spans(trace))


@dataclass(frozen=True)
class _Row:
    """One measured row of a relation: the query piece, the key pieces, and the pieces a simpler head would look
    at instead (the word before the query word, the query word itself); the query and key words' text and whether
    the key is the word just before the query word (what the evidence quotes)."""

    query: int
    keys: list[int]
    previous: list[int]
    own: list[int]
    query_word: str = ""
    key_word: str = ""
    adjacent: bool = False


def _queries(pieces: list[list[int]], length: int) -> list[int]:
    """The query pieces of a sentence's words (each word's last piece, which has read all of it); every position
    where the sentence has no words."""
    return [p[-1] for p in pieces if p] if pieces else list(range(length))


def _word_rows_of(s: _Sentence, name: str, apart: bool) -> list[_Row]:
    """The rows of relation `name` on a sentence's words (apart: only links whose keys hold not the word just
    before the query word)."""
    out = []
    for link, q, keys in _by_word(s.links, s.pieces, name):
        adjacent = link.query - 1 in link.keys
        if q and keys and not (apart and adjacent):
            before = s.pieces[link.query - 1] if link.query >= 1 else []
            key_word = "+".join(s.words[k].text for k in link.keys)
            out.append(_Row(q[-1], keys, before, q, s.words[link.query].text, key_word, adjacent))
    return out


def _on_sentence(
    head: tuple[np.ndarray, np.ndarray], found, words: Sequence[Word], pieces: list[list[int]], text: str, unknown=()
) -> dict | None:
    """A relation's numbers on one sentence: weight on the keys, chance, and the competing weights (the previous
    word, the query word itself, the first token), the largest link's pair; None when no link has pieces.
    head: the head's (weights, visible) on the sentence, each (L, L); unknown: the spans of the sentence's unknown
    pieces (`between_unknown`: the words between the pair read as <unk>)."""
    found = [(link, q, k) for link, q, k in found if q and k]
    if not found:
        return None
    rows = [_Row(q[-1], k, pieces[link.query - 1] if link.query >= 1 else [], q) for link, q, k in found]
    m = _tested([(head, rows, _queries(pieces, head[0].shape[0]))], test=False)
    w = head[0][[r.query for r in rows]]
    seen = head[1][[r.query for r in rows]].sum(-1)
    pairs = []
    for r, (link, _, _) in enumerate(found):
        for kw in link.keys:
            pairs += [(float(w[r, k]), rows[r].query, k, 1 / max(int(seen[r]), 1), link.query, kw) for k in pieces[kw]]
    best = max(pairs, key=lambda p: p[:3])
    lo, hi = words[best[5]].end, words[best[4]].start
    between = text[lo:hi]  # what stands between the pair's words
    unread = [w.text for w in words if lo <= w.start < hi and any(w.start < e and s < w.end for s, e in unknown)]
    keep = ("weight", "chance", "previous", "self", "first", "first_is_key", "offset")
    return {k: m[k] for k in keep} | {
        "baseline": m["baseline"]["weight"],
        "query": best[1],
        "key": best[2],
        "pair_weight": best[0],
        "pair_chance": best[3],
        "between": between,
        "between_unknown": unread,
    }


def _tested(parts: Sequence[tuple], *, test: bool = True) -> dict:
    """A relation's rows on several sentences [((weights, visible) of the head on it, [_Row])], pooled: the mean weight
    on the keys and its chance (`chance.against_chance`: rows, p, credited), and what the simpler heads would give on
    the same rows: the mean weight on the previous word, on the query word itself and on the first token (where a key is
    the first token itself: the head's mean weight on it from the sentence's other rows, what a first-token head gives
    the key anyway), and at the same distance back (`_offset_habit`: what a head that looks a fixed distance back
    gives the keys); and what the sentence's other words give the same keys (`_baseline`: the key-salience
    explanation, a key every query looks at). Each part: (head, rows, the sentence's query pieces (`_queries`)).
    {weight, chance, previous, self, first, first_is_key, offset, rows, p, credited, sentences, baseline}
    (test=False: rows, p and credited None, the means alone)."""
    ws, ts, vs, previous, own, first, offset = [], [], [], [], [], [], []
    first_is_key, sentences = False, 0
    baseline = _baseline(parts, test=test)
    for head, rows, _ in parts:
        if not rows:
            continue
        sentences += 1
        qs = [r.query for r in rows]
        w, vis = head[0][qs], head[1][qs]
        habit = None
        if any(0 in r.keys for r in rows):
            first_is_key = True
            others = [i for i in range(1, head[0].shape[0]) if i not in qs]
            habit = float(head[0][others, 0].mean()) if others else 1.0
        t = np.zeros_like(vis)
        for i, r in enumerate(rows):
            t[i, r.keys] = True
            previous.append(float(w[i, r.previous].sum()) if r.previous else 0.0)
            own.append(float(w[i, r.own].sum()))
            first.append(float(w[i, 0]) if 0 not in r.keys else cast(float, habit))
            offset.append(sum(_offset_habit(head[0], r.query, r.query - k) for k in r.keys))
        ws.append(w)
        ts.append(t)
        vs.append(vis)
    if not ws:
        return {"weight": None, "chance": None, "rows": 0, "p": None, "credited": False, "sentences": 0} | {
            "baseline": baseline
        }
    w, t, v = _stacked(ws), _stacked(ts), _stacked(vs)
    ev = chance.against_chance(w, t, v) if test else None  # test=False: the means alone (one sentence's numbers)
    n = len(previous)
    return {
        "weight": float((w * (t & v)).sum(1).mean()),
        "chance": float(((t & v).sum(1) / np.maximum(v.sum(1), 1)).mean()),
        "previous": sum(previous) / n,
        "self": sum(own) / n,
        "first": sum(first) / n,
        "first_is_key": first_is_key,
        "offset": sum(offset) / n,
        "rows": ev.rows if ev else None,
        "p": ev.p if ev else None,
        "credited": ev.credited if ev else None,
        "sentences": sentences,
        "baseline": baseline,
    }


def _others(head: tuple[np.ndarray, np.ndarray], row: _Row, queries: Sequence[int]) -> list[int]:
    """The sentence's other query pieces that read the row's keys from after them: every word's query after the
    last key piece but the row's own query word, each seeing a key."""
    last = max(row.keys)
    own = set(row.own) | {row.query}
    return [q for q in queries if q > last and q not in own and bool(head[1][q, row.keys].any())]


def _salience(head: tuple[np.ndarray, np.ndarray], row: _Row, queries: Sequence[int]) -> tuple[float, list[float]]:
    """(the row's query's weight on its keys, each other query's weight on the same keys (`_others`))."""
    w = head[0]
    return float(w[row.query, row.keys].sum()), [float(w[q, row.keys].sum()) for q in _others(head, row, queries)]


def _baseline(parts: Sequence[tuple], *, test: bool = True) -> dict:
    """Is it the query that looks at the key, or the key that every query looks at? Over the rows of `parts` whose
    sentence has another query after the keys (`_others`): {weight (the mean over those rows of the other queries'
    mean weight on the row's keys), query (the row's own query's, the same rows), rows, p, credited}. The test is
    `chance.against_chance` turned on its side: each row's candidates are its query and the other queries, the
    target is its query, and the null draws which of them is the relation's at random (p of the row's query getting
    as much more than the others by chance); credited on MIN_ROWS rows or more, p < ALPHA and the query's weight
    above the others' (test=False: rows, p and credited None)."""
    found = [_salience(head, r, queries) for head, rows, queries in parts for r in rows]
    found = [(mine, others) for mine, others in found if others]
    if not found:
        return {"weight": None, "query": None, "rows": 0, "p": None, "credited": False}
    weight = float(np.mean([np.mean(o) for _, o in found]))
    query = float(np.mean([m for m, _ in found]))
    if not test:
        return {"weight": weight, "query": query, "rows": None, "p": None, "credited": None}
    width = 1 + max(len(o) for _, o in found)
    values = np.zeros((len(found), width))
    seen = np.zeros((len(found), width), dtype=bool)
    for i, (mine, others) in enumerate(found):
        values[i, : 1 + len(others)] = [mine, *others]
        seen[i, : 1 + len(others)] = True
    target = np.zeros_like(seen)
    target[:, 0] = True
    ev = chance.against_chance(values, target, seen)
    credited = ev.measurable and ev.p is not None and ev.p < chance.ALPHA and query > weight
    return {"weight": weight, "query": query, "rows": ev.rows, "p": ev.p, "credited": bool(credited)}


def _evidence(every: Sequence[tuple], kinds: Sequence[str], texts: Sequence[str]) -> list[dict]:
    """The rows a relation rests on, one per link of every sentence (the text first, then its control and contrast
    sentences in order): {sentence (its index: 0 the text), kind ("text" | "control" | "contrast"), text, query,
    key (the words), weight (the query's on the keys), baseline (the mean of the other words' weight on the same
    keys, `_others`; None where no other word reads them), others (how many), previous (the query's weight on the
    word before it), tested (whether the row is one of the pooled test's: its key not the previous word)}."""
    out = []
    for i, (head, rows, queries) in enumerate(every):
        for r in rows:
            mine, others = _salience(head, r, queries)
            out.append(
                {
                    "sentence": i,
                    "kind": kinds[i],
                    "text": texts[i],
                    "query": r.query_word,
                    "key": r.key_word,
                    "weight": mine,
                    "baseline": float(np.mean(others)) if others else None,
                    "others": len(others),
                    "previous": float(head[0][r.query, r.previous].sum()) if r.previous else 0.0,
                    "tested": not r.adjacent,
                }
            )
    return out


def _offset_habit(w: np.ndarray, query: int, back: int) -> float:
    """The head's mean weight (w (L, L)) on the key `back` positions before the query, over the sentence's rows other
    than `query` that have one: what a head that looks a fixed distance back would give that key anyway (1 for a
    planted two-back head where the key is two back; the previous token is back = 1)."""
    diagonal = np.diagonal(w, offset=-back)  # w[i, i − back], i = back … L − 1
    if diagonal.size <= 1:
        return 0.0
    return float((diagonal.sum() - w[query, query - back]) / (diagonal.size - 1))


def _beats_simpler(m: dict) -> bool:
    if m["first_is_key"] and m["first"] >= head_types.CREDIT_MIN:  # a first-token head: it gives the key that anyway
        return False
    simpler = max(m["previous"], m["self"], m["first"], m.get("offset", 0.0))
    return link_credited(m) and m["weight"] > simpler


def _held(m: dict) -> bool:
    """Whether a relation's pooled rows (`_tested`) credit it: at least MIN_ROWS rows, above chance by the test
    (p < ALPHA) and by the share rule, above what the previous word, the query itself, the first token and the
    same distance back get, and above what the sentences' other words give the same keys (`_baseline`: its own
    MIN_ROWS rows and p < ALPHA)."""
    key_only = not m["baseline"]["credited"]  # the other words give the key as much: the key, not the query
    return bool(m["credited"]) and m["rows"] >= head_types.MIN_ROWS and _beats_simpler(m) and not key_only


def held(
    trace: ModelTrace, controls: Sequence[ModelTrace] = (), user_words: UserWords = (), grammar: Grammar | None = None
) -> list[list[dict]]:
    """[layer][head] {previous_word, relations}: the module's doc. `controls`: the traces of
    `contrasts_of(trace, user_words)`'s sentences on the same model, in that order (the control first where the
    text has one; none: a relation is measured on the text alone, and one adjacent there is not held);
    user_words: `words_of`'s; grammar: {word: role} whose clause-2 references are measured too (`relations.links`;
    an `Explainer`'s `grammar`; None: none)."""
    if isinstance(controls, ModelTrace):
        raise TypeError("controls must be a sequence of ModelTrace (held(trace, [control])), got one ModelTrace")
    words = words_of(trace, user_words)
    links = word_links(words)
    text = trace.pieces.text if trace.pieces is not None else ""
    pieces = word_pieces(words, trace.pieces.spans) if words and trace.pieces is not None else []
    mine_s = _Sentence(trace, words, links, pieces, text, _unknown_spans(trace))
    others = [_sentence(c, user_words) for c in controls]
    plain = others[0] if others and control_of(trace, user_words) is not None else None  # the control sentence
    clause2 = [lk for lk in grammar_links(trace.tokens, grammar or {}) if lk.relation == CLAUSE2]  # the grammar's own
    on_text = relation_weights(trace, text_links(trace, words) + clause2)
    queries, before, _ = _word_rows(trace, words)
    o_rows = [_word_rows(o.trace, o.words) for o in others]
    mine_q = _queries(pieces, trace.layers[0].length if trace.layers else 0)
    o_q = [_queries(o.pieces, o.trace.layers[0].length if o.trace.layers else 0) for o in others]
    texts = [text] + [o.text for o in others]
    kinds = ["text"] + ["control" if plain is not None and i == 0 else "contrast" for i in range(len(others))]
    out = []
    measured = bool(queries) or any(q for q, _, _ in o_rows)  # a word with a previous word, in some sentence
    for l, layer in enumerate(trace.layers):
        if not (measured or any(on_text[l])):  # no row to read (a text without Chinese): no weights computed
            out.append([{"previous_word": _previous_word([]), "relations": {}} for _ in range(layer.n_heads)])
            continue
        row = []
        mine_w = _layer_weights(layer)  # one layer of every sentence at a time: (H, L, L) each
        other_w = [_layer_weights(o.trace.layers[l]) for o in others]
        for h in range(layer.n_heads):
            here = (mine_w[0][h], mine_w[1][h])
            there = [(w[h], v[h]) for w, v in other_w]
            rows = [_rows_of(here, queries, before)] if queries else []
            rows += [_rows_of(t, q, b) for t, (q, b, _) in zip(there, o_rows, strict=True) if q]
            prev = _previous_word(rows)
            relations = {}
            for name, r in on_text[l][h].items():
                mine = [lk for lk in links if lk.relation == name]
                adjacent = any(lk.query - 1 in lk.keys for lk in mine)
                text_side = _on_sentence(here, _by_word(links, pieces, name), words, pieces, text)
                c = None
                if plain is not None:  # others[0]
                    found = _by_word(plain.links, plain.pieces, name)
                    c = _on_sentence(there[0], found, plain.words, plain.pieces, plain.text, plain.unknown)
                if mine:  # measured where its key is not the previous word: the text's links apart, every contrast's
                    every = [(here, _word_rows_of(mine_s, name, apart=False), mine_q)]
                    every += [
                        (t, _word_rows_of(o, name, apart=False), q) for t, o, q in zip(there, others, o_q, strict=True)
                    ]
                    parts = [(h_, [x for x in rows_ if not x.adjacent], q) for h_, rows_, q in every]
                else:  # clause 2 → clause 1: its keys lie a clause back, never the previous word; the text's rows
                    links2 = [lk for lk in clause2 if lk.relation == name]
                    tk = trace.tokens
                    rows2 = [
                        _Row(
                            lk.query,
                            list(lk.keys),
                            [lk.query - 1],
                            [lk.query],
                            tk[lk.query],
                            "+".join(tk[k] for k in lk.keys),
                        )
                        for lk in links2
                    ]
                    parts = every = [(here, rows2, mine_q)]
                test = _tested(parts)
                ok = link_credited(r) and _held(test)
                explained = "previous" if link_credited(r) and not ok and prev["credited"] else None
                if link_credited(r) and not ok and test["rows"] and test["first_is_key"]:
                    explained = explained or ("first" if test["first"] >= head_types.CREDIT_MIN else None)
                if link_credited(r) and not ok and _held(test | {"baseline": {"credited": True}}):
                    explained = explained or "key"  # all but the baseline: every word looks at the key
                relations[name] = r | {
                    "evidence": _evidence(every, kinds, texts),
                    "adjacent": adjacent,
                    "previous": text_side["previous"] if text_side else 0.0,
                    "control": c,
                    "test": test,
                    "measurable": test["rows"] >= head_types.MIN_ROWS,
                    "held": bool(ok),
                    "explained": explained,
                }
            row.append({"previous_word": prev, "relations": relations})
        out.append(row)
    return out


def credited(per_head: dict) -> list[dict]:
    """One head's held relations as `verdicts.verdict` lists them: {relation, score, chance, rows, control,
    adjacent, tested, baseline, evidence} (score: the mean weight on the keys, on the text; tested: the pooled test
    that credits it, {weight, chance, rows, p, sentences}; baseline: what the other words give the same keys on the
    test's rows, {weight, query, rows, p}; evidence: every sentence's row, `_evidence`)."""
    return [
        {
            "relation": name,
            "score": r["weight"],
            "chance": r["chance"],
            "rows": r["n"],
            "adjacent": r["adjacent"],
            "control": None if r["control"] is None else r["control"]["weight"],
            "tested": {k: r["test"][k] for k in ("weight", "chance", "rows", "p", "sentences")},
            "baseline": {k: r["test"]["baseline"][k] for k in ("weight", "query", "rows", "p")},
            "evidence": r["evidence"],
        }
        for name, r in per_head["relations"].items()
        if r["held"]
    ]


def word_types(per_head: dict) -> dict:
    """The types measured on the words (`verdicts.verdict`'s `words`): {"previous": previous_word}."""
    return {"previous": per_head["previous_word"]}
