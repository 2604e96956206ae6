"""Head types measured the way interpretability research measures them, each against chance.

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

A type is **credited** when its score is clearly above chance (`above_chance`): at least CREDIT_MIN, and
at least CHANCE_FACTOR × its chance — or, where uniform attention already gives the targets a third or
more, missing at most 1/CHANCE_FACTOR of what uniform attention misses (1 − score ≤ (1 − chance) /
CHANCE_FACTOR: with two of four keys as targets, chance 50 %, a score of 75 %) — over at least MIN_ROWS
rows (TransformerLens's detectors report the score alone; the chance level is what keeps a nearly uniform
head from being credited with anything). The second arm matters only for chance > 1/3, where "twice the
chance" would ask for more than the whole row. A head none of whose types is
credited and whose rows are close to uniform (mean normalised entropy ≥ BROAD_MIN) is **broad**.
Induction is measured best on a repeated random-token sequence (`induction_probe`), where the only
way to attend to "the token after the earlier occurrence" is to have learnt to.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "TYPES",
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

TYPES = ("previous", "next", "self", "first", "duplicate", "induction", "local")
CREDIT_MIN = 0.3
"""Least score (mean weight on the targets) a type is credited with."""
CHANCE_FACTOR = 2.0
"""A credited score is at least this many times what uniform attention gives the same targets."""
MIN_ROWS = 2
"""Fewest rows a type is measured on before it can be credited."""
BROAD_MIN = 0.85
"""Mean normalised entropy (1 = uniform over the visible keys) from which an uncredited head is broad."""
LOCAL_SPAN = 2
"""Keys within this distance of the query (either side) count as local."""


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
    ids = np.asarray(ids)
    L = len(ids)
    vis = _visible(L, causal, visible)
    n_vis = vis.sum(1)
    i = np.arange(L)[:, None]
    j = np.arange(L)[None, :]
    rows = (n_vis >= 2)[:, None] & vis
    earlier = (ids[:, None] == ids[None, :]) & (j < i) & rows
    after = np.zeros_like(earlier)
    after[:, 1:] = earlier[:, :-1]  # key j + 1 for each earlier occurrence j
    local = (abs(i - j) <= LOCAL_SPAN) & rows
    local &= (local.sum(1) < n_vis)[:, None]  # a row that sees only its neighbourhood measures nothing
    return {
        "previous": (j == i - 1) & rows,
        "next": (j == i + 1) & rows,
        "self": (j == i) & rows,
        "first": (j == 0) & (i >= 1) & rows,
        "duplicate": earlier,
        "induction": after & (j < i) & rows,
        "local": local,
    }


def measure(weights, ids: Sequence[int], *, causal: bool, visible=None) -> list[dict[str, dict]]:
    """Every type's score and chance for each head of a layer.

    weights  (H, L, L) or (L, L), NumPy or torch: row i = query i's weights over keys 0…L−1
    ids      (L,) the token ids (duplicate and induction compare them)
    causal   query i sees keys 0…i (a decoder); else every key (an encoder)
    visible  (L, L) bool, True = may look, instead of `causal`'s rule (a sliding window, padding)
    Returns one dict per head: {type: {"score", "chance", "rows", "credited"}} plus "broad" (score =
    mean normalised entropy, chance 1 = uniform); a type measured on no row has score and chance None.
    """
    w = np.asarray(weights.detach().cpu().double() if hasattr(weights, "detach") else weights, dtype=np.float64)
    L = len(ids)
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3 or w.shape[1:] != (L, L):
        raise ValueError(f"weights must be (H, L, L) with L = {L} token ids, got shape {w.shape}")
    masks = targets(ids, causal=causal, visible=visible)
    vis = _visible(L, causal, visible)
    n_vis = vis.sum(1)
    heads: list[dict[str, dict]] = [{} for _ in range(w.shape[0])]
    for t, m in masks.items():
        measured = m.any(1)  # (L,)
        rows = int(measured.sum())
        chance = float((m.sum(1) / np.maximum(n_vis, 1))[measured].mean()) if rows else None
        scores = (w * m).sum(-1)[:, measured].mean(-1) if rows else [None] * len(heads)  # (H,)
        for h, score in enumerate(scores):
            score = None if score is None else float(score)
            heads[h][t] = {
                "score": score,
                "chance": chance,
                "rows": rows,
                "credited": bool(rows >= MIN_ROWS and above_chance(score, chance)),
            }
    ok = n_vis >= 2
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0)  # (H, L, L)
    entropy = (-plogp.sum(-1)[:, ok] / np.log(n_vis[ok])).mean(-1) if ok.any() else [None] * len(heads)
    for h, e in enumerate(entropy):
        e = None if e is None else float(e)
        heads[h]["broad"] = {
            "score": e,
            "chance": 1.0,
            "rows": int(ok.sum()),
            "credited": bool(e is not None and e >= BROAD_MIN and not any(heads[h][t]["credited"] for t in TYPES)),
        }
    return heads


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
