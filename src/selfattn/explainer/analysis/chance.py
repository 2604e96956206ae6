"""Is a head's share on some keys more than chance? A test a researcher can cite, written once.

    against_chance(weights, targets, visible) -> Evidence(rows, score, chance, z, p, measurable)
    row_stats(weights (H, R, L), visible) -> RowStats; evidence(share (H, R), k, stats) -> [Evidence] per head
    (the same test for a layer's heads and many patterns: the rows' statistics computed once)

The question: a head puts, on average over the rows where a pattern can be measured, a share `score` of
its weight on the pattern's target keys (the previous token, the noun of the verb …). Would a head that
ignores *which* keys are targets do as well? The null hypothesis: in each row the same number of target
keys is drawn at random among the row's visible keys (a permutation of the targets), the row's weights
unchanged. Under it the row's share S_r is the sum of k_r of its m_r visible weights drawn without
replacement, with

    E[S_r]   = k_r / m_r                                   (the chance share: uniform attention's)
    Var[S_r] = k_r (m_r − k_r) / (m_r − 1) · σ_r²           σ_r² = (1/m_r) Σ_j (w_rj − 1/m_r)²

(the sampling-without-replacement variance), and the mean over R independent rows has mean
`chance` = (1/R) Σ k_r/m_r and variance (1/R²) Σ Var[S_r]. The one-sided p-value is that of the
normal approximation, P(Z ≥ z), z = (score − chance) / sd; `tests/explainer/analysis/test_chance.py` checks it
against a Monte Carlo permutation of the targets. A row whose targets are all or none of its visible keys
carries no information and is not counted; rows of uniform weights count (their share is the chance share,
with no variance), and a head whose every row is uniform has p = 1.

A pattern is **measurable** only on at least MIN_ROWS such rows: below that a view says "not measurable on
this text", never a type. It is **credited** when measurable, p < ALPHA and the score is at least
CREDIT_MIN (a share a reader would call a habit, not a tilt).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

__all__ = ["MIN_ROWS", "ALPHA", "CREDIT_MIN", "Evidence", "against_chance", "RowStats", "row_stats", "evidence"]

ROUNDING_ULPS = 16
"""A row whose weights spread around their mean by no more than this many units of their dtype's precision is
uniform but for rounding: its variance counts as 0, so rounding alone never makes a uniform head significant
(its z would be noise over noise)."""
MIN_ROWS = 8
"""Fewest informative rows a pattern is measured on before anything is said of it."""
ALPHA = 0.01
"""The one-sided significance level a credited pattern clears."""
CREDIT_MIN = 0.3
"""Least mean share on the targets a credited pattern has."""


@dataclass(frozen=True)
class Evidence:
    """A pattern on one head: `rows` informative rows, mean share `score` on the targets, `chance` the
    share expected under the null, z and the one-sided p-value; `measurable` (rows ≥ MIN_ROWS) and
    `credited` (measurable, p < ALPHA, score ≥ CREDIT_MIN)."""

    rows: int
    score: float | None
    chance: float | None
    z: float | None
    p: float | None
    measurable: bool
    credited: bool

    def as_dict(self) -> dict:
        return asdict(self)


def against_chance(weights, targets, visible, *, min_rows: int = MIN_ROWS) -> Evidence:
    """The evidence that a head's weights favour `targets`.

    weights  (R, L) float: each row's attention weights (rows sum to 1 over the visible keys)
    targets  (R, L) bool: the pattern's target keys in each row (only visible ones count)
    visible  (R, L) bool: the keys each row may see
    Rows with no target, or every visible key a target, or fewer than two visible keys, are left out."""
    w = np.asarray(weights, dtype=np.float64)
    t = np.asarray(targets, dtype=bool)
    v = np.asarray(visible, dtype=bool)
    if w.ndim != 2 or t.shape != w.shape or v.shape != w.shape:
        raise ValueError(
            f"weights, targets and visible must be (R, L) of one shape, got {w.shape}, {t.shape}, {v.shape}"
        )
    t = t & v
    stats = row_stats(w[None], v)
    share = np.where(t, w, 0.0).sum(1)[None]
    return evidence(share, t.sum(1), stats, min_rows=min_rows)[0]


@dataclass(frozen=True)
class RowStats:
    """What the null needs of each row of H heads, whatever the pattern: `total` (H, R) the weight on the row's
    visible keys, `sigma2` (H, R) the variance of those weights, `m` (R,) how many keys the row sees."""

    total: np.ndarray
    sigma2: np.ndarray
    m: np.ndarray


def row_stats(weights, visible) -> RowStats:
    """`RowStats` of weights (H, R, L) (float32 or float64) over visible (R, L) bool: computed once for a layer's
    heads and shared by every pattern measured on them (`evidence`). In torch, in the weights' own float dtype, on
    every core (NumPy's took one)."""
    w = torch.as_tensor(weights)
    w = w if w.dtype in (torch.float32, torch.float64) else w.to(torch.float64)  # float32 kept (`heads.MEASURE_DTYPE`)
    v = torch.as_tensor(np.asarray(visible, dtype=bool))
    if w.dim() != 3 or tuple(w.shape[1:]) != tuple(v.shape):
        raise ValueError(f"weights must be (H, R, L) over visible (R, L), got {tuple(w.shape)} and {tuple(v.shape)}")
    m = v.sum(1)
    wv = w * v  # a NaN or ±inf anywhere (even on a hidden key: 0 · inf) makes its row's total non-finite
    total = wv.sum(-1)
    if not bool(torch.isfinite(total).all()):
        raise ValueError("weights must be finite")
    count = m.clamp(min=1).to(w.dtype)
    mean = total / count
    d = wv.sub_(mean[..., None]).mul_(v)  # in place: each visible weight's distance from the row's mean
    sigma2 = torch.linalg.vector_norm(d, dim=-1).square_() / count
    rounding = (ROUNDING_ULPS * torch.finfo(w.dtype).eps * mean).square_()
    sigma2 = sigma2.masked_fill_(sigma2 <= rounding, 0.0)  # a row uniform but for rounding is uniform
    return RowStats(total.double().numpy(), sigma2.double().numpy(), m.numpy())


def evidence(share, k, stats: RowStats, *, min_rows: int = MIN_ROWS) -> list[Evidence]:
    """`Evidence` for each of H heads: share (H, R) each row's weight on its targets (visible ones), k (R,) how
    many visible targets each row has, `stats` the heads' `row_stats` (the module's test)."""
    share = np.asarray(share, dtype=np.float64)
    k, m = np.asarray(k), stats.m
    keep = (k > 0) & (k < m) & (m >= 2)
    rows = int(keep.sum())
    if rows == 0:
        return [Evidence(0, None, None, None, None, False, False) for _ in range(share.shape[0])]
    kk, mm = k[keep], m[keep]
    # each row's weights are renormalised over its visible keys: the null's share is of the same total
    expected = stats.total[:, keep] * kk / mm
    var = kk * (mm - kk) / (mm - 1) * stats.sigma2[:, keep]
    measurable = rows >= min_rows
    out = []
    for score, chance, v in zip(share[:, keep].mean(-1), expected.mean(-1), var.sum(-1), strict=True):
        sd = math.sqrt(float(v)) / rows
        z = (float(score) - float(chance)) / sd if sd > 0 else 0.0
        p = 0.5 * math.erfc(z / math.sqrt(2.0)) if sd > 0 else 1.0
        credited = measurable and p < ALPHA and float(score) >= CREDIT_MIN
        out.append(Evidence(rows, float(score), float(chance), float(z), float(p), measurable, credited))
    return out
