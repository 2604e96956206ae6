"""Head types measured the way interpretability research measures them, each against chance.

The types are a registry (`REGISTRY`, one `HeadType` entry each: name, targets, words, colour, style): the
terminal's tables, the sentences, the export's legend and the page's model view are generated from it, so a
new type is one `register(HeadType(...))`.

For one head's weights W (L × L, rows = queries, every row sums to 1 over the keys it may see) and the
text's token ids, each type has a **score** — the mean, over the rows where the type can be measured,
of the weight the row puts on the type's target keys — and a **chance** level: what uniform attention
over the same visible keys would put there (|targets| / |visible|, averaged over the same rows).

| type | target keys of query i | measured on rows |
|---|---|---|
| previous | i − 1 | i with at least two visible keys and i − 1 visible |
| next | i + 1 (encoders; a causal head cannot see it) | i with i + 1 visible |
| self | i | i with at least two visible keys |
| first | 0, the first token (an attention sink) | i ≥ 1 with key 0 visible |
| duplicate | earlier positions j < i holding the same token | i whose token occurred before |
| induction | j + 1 for each earlier occurrence j of token i (the token that followed it) | i with such a j + 1 < i |
| local | i − LOCAL_SPAN … i + LOCAL_SPAN (visible ones) | i with more visible keys than the span |

A type is **credited** when it passes two tests. Significance (`chance.against_chance`): measured on at
least MIN_ROWS (8) informative rows, its one-sided p-value against the permutation null (the same number of
targets drawn at random among each row's visible keys) below `chance.ALPHA`; below MIN_ROWS rows a type is
"not measurable on this text", never credited. And size (`above_chance`): at least CREDIT_MIN, and at least
CHANCE_FACTOR × its chance — or, where uniform attention already gives the targets a third or more, missing
at most 1/CHANCE_FACTOR of what uniform attention misses (1 − score ≤ (1 − chance) / CHANCE_FACTOR: with two
of four keys as targets, chance 50 %, a score of 75 %) — so that many rows cannot make a tilt a habit
(TransformerLens's detectors report the score alone; the chance level is what keeps a nearly uniform head
from being credited with anything). A head none of whose types is credited, measured on at least MIN_ROWS
rows whose mean normalised entropy (1 = uniform; a number from 0 to 1, not a share) is ≥ BROAD_MIN, is
**broad**.
Induction is measured best on a repeated random-token sequence (`induction_probe`), where the only
way to attend to "the token after the earlier occurrence" is to have learnt to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..capture.digest import row_nats
from ..catalogue import both, sentences
from . import chance

__all__ = [
    "HeadType",
    "Keys",
    "REGISTRY",
    "register",
    "unregister",
    "names",
    "measured",
    "teaching",
    "CREDIT_MIN",
    "CHANCE_FACTOR",
    "MIN_ROWS",
    "BROAD_MIN",
    "LOCAL_SPAN",
    "targets",
    "measure",
    "credited",
    "above_chance",
    "induction_probe",
]

CREDIT_MIN = 0.3
"""Least score (mean weight on the targets) a type is credited with."""
CHANCE_FACTOR = 2.0
"""A credited score is at least this many times what uniform attention gives the same targets."""
MIN_ROWS = chance.MIN_ROWS
"""Fewest informative rows a type is measured on before it can be credited (`chance.MIN_ROWS`)."""
BROAD_MIN = 0.85
"""Mean normalised entropy (1 = uniform over the visible keys) from which an uncredited head is broad."""
LOCAL_SPAN = 2
"""Keys within this distance of the query (either side) count as local."""


@dataclass(frozen=True)
class Keys:
    """What every type's targets are cut from, for L tokens (each (L, L) bool or int, row i = query i).

    ids      (L,) the token ids
    i, j     the query's and the key's position (broadcast as (L, 1) and (1, L))
    visible  the keys query i may see
    rows     the visible keys of rows with at least two of them (a row with one key measures nothing)
    earlier  keys j < i holding query i's token, within `rows`"""

    ids: np.ndarray
    i: np.ndarray
    j: np.ndarray
    visible: np.ndarray
    rows: np.ndarray
    earlier: np.ndarray


WORD_KINDS = ("short", "label", "does", "heads")
"""The words each type has, each {zh, en}: short (a cell of `selfattn heads`), label (the page's model view
and its legend), does (a head's sentence, before its share; "{first}" is the first token), heads (a taxonomy
line naming the type's heads)."""


@dataclass(frozen=True)
class HeadType:
    """One head type: everything any view says or draws of it comes from here.

    name      its key in the export, the tables and the page
    targets   Keys -> (L, L) bool: the keys whose weight is its score, only on the rows where it is measured
              (see the module's table); None for a type found another way (relation: a tutorial link on the
              text, `analysis.held`; broad: the entropy, in `measure`)
    words     {kind: {zh, en}} for each of WORD_KINDS (the built-in types': the catalogue's, "heads.type.…")
    colour    its border in the page's model view and its key in the legend (CSS), None: not drawn there
    style     its look in the terminal's taxonomy table (rich style), "" for none
    teaching  whether it shows attention at work, so that `heads.pick` opens such a head first"""

    name: str
    targets: Callable[[Keys], np.ndarray] | None
    words: dict[str, dict[str, str]]
    colour: str | None = None
    style: str = ""
    teaching: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"a head type's name must be an identifier, got {self.name!r}")
        for kind in WORD_KINDS:
            said = self.words.get(kind) if isinstance(self.words, dict) else None
            if not isinstance(said, dict) or not all(isinstance(said.get(lang), str) for lang in ("zh", "en")):
                raise ValueError(f"head type {self.name!r} needs words[{kind!r}] = {{zh, en}}, got {said!r}")


def _local(k: Keys) -> np.ndarray:
    local = (abs(k.i - k.j) <= LOCAL_SPAN) & k.rows
    return local & (local.sum(1) < k.visible.sum(1))[:, None]  # a row that sees only its neighbourhood: nothing


def _induction(k: Keys) -> np.ndarray:
    after = np.zeros_like(k.earlier)
    after[:, 1:] = k.earlier[:, :-1]  # key j + 1 for each earlier occurrence j
    return after & (k.j < k.i) & k.rows


REGISTRY: dict[str, HeadType] = {}
"""Every head type, in the order the views list them (`register` adds one)."""


def register(entry: HeadType) -> HeadType:
    """Add a head type: from here on it is measured, credited, named in the tables and sentences and drawn in
    the page's model view. Its name must be new."""
    if not isinstance(entry, HeadType):
        raise TypeError(f"register takes a HeadType, got {type(entry).__name__}")
    if entry.name in REGISTRY:
        raise ValueError(f"head type {entry.name!r} is already registered")
    REGISTRY[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove a head type `register` added."""
    if name not in REGISTRY:
        raise ValueError(f"no head type {name!r}: the registered ones are {', '.join(REGISTRY)}")
    del REGISTRY[name]


def names() -> tuple[str, ...]:
    """Every type's name, in the registry's order."""
    return tuple(REGISTRY)


def measured() -> tuple[str, ...]:
    """The types measured by their targets (all but relation and broad)."""
    return tuple(t.name for t in REGISTRY.values() if t.targets is not None)


def teaching() -> tuple[str, ...]:
    """The types that show attention at work (`HeadType.teaching`)."""
    return tuple(t.name for t in REGISTRY.values() if t.teaching)


for _entry in (
    HeadType(
        "previous",
        lambda k: (k.j == k.i - 1) & k.rows,
        {
            "short": sentences("heads.type.previous.short"),
            "label": sentences("heads.type.previous.label"),
            "does": sentences("heads.type.previous.does"),
            "heads": sentences("heads.type.previous.heads"),
        },
        colour="#2563eb",
        style="bold cyan",
        teaching=True,
    ),
    HeadType(
        "next",
        lambda k: (k.j == k.i + 1) & k.rows,
        {
            "short": sentences("heads.type.next.short"),
            "label": sentences("heads.type.next.label"),
            "does": sentences("heads.type.next.does"),
            "heads": sentences("heads.type.next.heads"),
        },
        colour="#0891b2",
        teaching=True,
    ),
    HeadType(
        "self",
        lambda k: (k.j == k.i) & k.rows,
        {
            "short": sentences("heads.type.self.short"),
            "label": sentences("heads.type.self.label"),
            "does": sentences("heads.type.self.does"),
            "heads": sentences("heads.type.self.heads"),
        },
        colour="#7c3aed",
    ),
    HeadType(
        "first",
        lambda k: (k.j == 0) & (k.i >= 1) & k.rows,
        {
            "short": sentences("heads.type.first.short"),
            "label": sentences("heads.type.first.label"),
            "does": sentences("heads.type.first.does"),
            "heads": sentences("heads.type.first.heads"),
        },
        colour="#6b7280",
        style="dim",
    ),
    HeadType(
        "duplicate",
        lambda k: k.earlier,
        {
            "short": sentences("heads.type.duplicate.short"),
            "label": sentences("heads.type.duplicate.label"),
            "does": sentences("heads.type.duplicate.does"),
            "heads": sentences("heads.type.duplicate.heads"),
        },
        colour="#db2777",
        style="bold yellow",
        teaching=True,
    ),
    HeadType(
        "induction",
        _induction,
        {
            "short": sentences("heads.type.induction.short"),
            "label": sentences("heads.type.induction.label"),
            "does": sentences("heads.type.induction.does"),
            "heads": sentences("heads.type.induction.heads"),
        },
        colour="#dc2626",
        style="bold magenta",
        teaching=True,
    ),
    HeadType(
        "local",
        _local,
        {
            "short": sentences("heads.type.local.short"),
            "label": sentences("heads.type.local.label"),
            "does": both("heads.type.local.does", span=LOCAL_SPAN),
            "heads": sentences("heads.type.local.heads"),
        },
        colour="#16a34a",
        teaching=True,
    ),
    HeadType(
        "relation",
        None,
        {
            "short": sentences("heads.type.relation.short"),
            "label": sentences("heads.type.relation.label"),
            "does": sentences("heads.type.relation.does"),
            "heads": sentences("heads.type.relation.heads"),
        },
        style="bold green",
    ),
    HeadType(
        "broad",
        None,
        {
            "short": sentences("heads.type.broad.short"),
            "label": sentences("heads.type.broad.label"),
            "does": sentences("heads.type.broad.does"),
            "heads": sentences("heads.type.broad.heads"),
        },
        colour="#d97706",
        style="dim",
    ),
):
    register(_entry)


def above_chance(score: float | None, chance: float | None) -> bool:
    """Whether a measured share `score` is clearly above the `chance` share uniform attention gives the
    same keys (the module's rule: CREDIT_MIN, then CHANCE_FACTOR × chance or the misses' arm)."""
    if score is None or chance is None or score < CREDIT_MIN:
        return False
    return score >= CHANCE_FACTOR * chance or 1.0 - score <= (1.0 - chance) / CHANCE_FACTOR


def _visible(L: int, causal: bool, visible) -> np.ndarray:
    if visible is not None:
        vis = np.asarray(visible.detach().cpu() if hasattr(visible, "detach") else visible, dtype=bool)
        if vis.shape != (L, L):
            raise ValueError(f"visible must be (L, L) with L = {L} token ids, got shape {vis.shape}")
        return vis
    return np.tril(np.ones((L, L), dtype=bool)) if causal else np.ones((L, L), dtype=bool)


def targets(ids: Sequence[int], *, causal: bool, visible=None) -> dict[str, np.ndarray]:
    """Each type's target keys as a bool (L, L) matrix (row i = query i), within the visible keys and
    only on the rows where the type is measured (see the module's table). `visible` (L, L) bool, True =
    may look: the layer's own visibility (a window, padding); default the causal rule or every key."""
    arr = np.asarray(ids)
    L = len(arr)
    vis = _visible(L, causal, visible)
    i = np.arange(L)[:, None]
    j = np.arange(L)[None, :]
    rows = (vis.sum(1) >= 2)[:, None] & vis
    keys = Keys(arr, i, j, vis, rows, (arr[:, None] == arr[None, :]) & (j < i) & rows)
    return {t.name: t.targets(keys) for t in REGISTRY.values() if t.targets is not None}


@dataclass(frozen=True)
class Pattern:
    """One type's targets on a text, as `measure` reads them: the (L, L) mask, the rows it is measured on, their
    count, uniform attention's share, each row's count of visible targets, and the mask's nonzero (row, key)
    pairs grouped by row (what `_row_shares` sums)."""

    mask: np.ndarray
    measured: np.ndarray
    rows: int
    uniform: float
    k: np.ndarray
    r: np.ndarray
    c: np.ndarray
    starts: np.ndarray


@dataclass(frozen=True)
class Layout:
    """What `measure` needs of a text apart from the weights (`layout`): the visibility, each row's count of
    visible keys and every type's `Pattern` — the same for every layer that shares the visibility."""

    length: int
    visible: np.ndarray
    n_vis: np.ndarray
    patterns: dict[str, Pattern]


def layout(ids: Sequence[int], *, causal: bool, visible=None) -> Layout:
    """The `Layout` of L token ids under `causal`'s rule or `visible` (L, L) (see `measure`): computed once and
    passed to `measure` for each layer that shares it."""
    L = len(ids)
    vis = _visible(L, causal, visible)
    n_vis = vis.sum(1)
    patterns = {}
    for t, m in targets(ids, causal=causal, visible=visible).items():
        measured = np.asarray(m.any(1))  # (L,)
        rows = int(measured.sum())
        uniform = float((m.sum(1) / np.maximum(n_vis, 1))[measured].mean()) if rows else 0.0
        r, c = np.nonzero(m)
        starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]]) if r.size else r
        patterns[t] = Pattern(m, measured, rows, uniform, (m & vis).sum(1), r, c, starts)
    return Layout(L, vis, n_vis, patterns)


def measure(weights, ids: Sequence[int], *, causal: bool, visible=None, nats=None, laid=None) -> list[dict[str, dict]]:
    """Every type's score and chance for each head of a layer.

    weights  (H, L, L) or (L, L), NumPy or torch, float32 (measured in it) or float64: row i = query i's weights
             over keys 0…L−1
    ids      (L,) the token ids (duplicate and induction compare them)
    causal   query i sees keys 0…i (a decoder); else every key (an encoder)
    visible  (L, L) bool, True = may look, instead of `causal`'s rule (a sliding window, padding)
    nats     (H, L) each row's entropy (`digest.row_nats`) when the caller has it; default computed here
    laid     the `layout` of these ids and this visibility when the caller has it (layers share it)
    Returns one dict per head: {type: {"score", "chance", "rows", "p", "credited"}} plus "broad" (score =
    mean normalised entropy, chance 1 = uniform, p None); a type measured on no row has score, chance and p
    None. p is the one-sided p-value of `chance.against_chance`."""
    w = _floats(weights)
    L = len(ids)
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3 or w.shape[1:] != (L, L):
        raise ValueError(f"weights must be (H, L, L) with L = {L} token ids, got shape {w.shape}")
    laid = layout(ids, causal=causal, visible=visible) if laid is None else laid
    if laid.length != L:
        raise ValueError(f"the layout is of {laid.length} tokens, the weights of {L}")
    n_vis = laid.n_vis
    heads: list[dict[str, dict]] = [{} for _ in range(w.shape[0])]
    stats = chance.row_stats(w, laid.visible)  # shared by every type: the null's per-row statistics
    for t, pat in laid.patterns.items():
        if not pat.rows:
            for h in range(len(heads)):
                heads[h][t] = {"score": None, "chance": None, "rows": 0, "p": None, "credited": False}
            continue
        share = _row_shares(w, pat)  # (H, L): each row's weight on its targets
        evidence = chance.evidence(share, pat.k, stats)
        for h, score in enumerate(share[:, pat.measured].mean(-1)):
            heads[h][t] = {
                "score": float(score),
                "chance": pat.uniform,
                "rows": pat.rows,
                "p": evidence[h].p,
                "credited": bool(evidence[h].credited and above_chance(float(score), pat.uniform)),
            }
    ok = n_vis >= 2
    nats = np.asarray(row_nats(torch.from_numpy(w)) if nats is None else nats.reshape(w.shape[:2]))  # (H, L) −Σ w ln w
    entropy = (nats[:, ok] / np.log(n_vis[ok])).mean(-1) if ok.any() else [None] * len(heads)
    for h, e in enumerate(entropy):
        e = None if e is None else float(e)
        rows = int(ok.sum())
        plain = not any(heads[h][t]["credited"] for t in laid.patterns)
        heads[h]["broad"] = {
            "score": e,
            "chance": 1.0,
            "rows": rows,
            "p": None,
            "credited": bool(e is not None and e >= BROAD_MIN and rows >= MIN_ROWS and plain),
        }
    return heads


def _floats(weights) -> np.ndarray:
    """Weights as a NumPy array of float32 (kept: `heads.MEASURE_DTYPE`) or float64 (anything else)."""
    w = np.asarray(weights.detach().cpu() if hasattr(weights, "detach") else weights)
    return w if w.dtype == np.float32 else w.astype(np.float64)


def _row_shares(w: np.ndarray, pat: Pattern) -> np.ndarray:
    """(H, L): each row's weight on its target keys, summed over the few targets each row has (O(H · targets),
    not a pass over the whole (H, L, L) weights per type)."""
    share = np.zeros(w.shape[:2])
    if pat.r.size:
        share[:, pat.r[pat.starts]] = np.add.reduceat(w[:, pat.r, pat.c], pat.starts, axis=1)
    return share


def credited(types: dict[str, dict]) -> list[str]:
    """The credited types of one head, clearest first (largest score ÷ chance)."""
    names = [t for t, m in types.items() if m["credited"]]
    return sorted(names, key=lambda t: -(types[t]["score"] / types[t]["chance"]))


def induction_probe(vocab: Sequence[int], length: int, *, seed: int = 0, prefix: Sequence[int] = ()) -> list[int]:
    """A repeated random-token sequence: `prefix` + r + r, r = `length` ids drawn without repeats from
    `vocab` (ordinary tokens: leave special ids out). In the second copy the token after the earlier
    occurrence is the next token, so only an induction head attends there."""
    vocab = list(vocab)
    if not 2 <= length <= len(vocab):
        raise ValueError(f"length must be between 2 and the {len(vocab)} ids given, got {length}")
    r = np.random.default_rng(seed).choice(len(vocab), size=length, replace=False)
    seq = [vocab[int(x)] for x in r]
    return [*prefix, *seq, *seq]
