"""The test against chance (`analysis.chance`) against an independent Monte Carlo permutation of the targets."""

from __future__ import annotations

import numpy as np
import pytest

from selfattn.explainer.analysis.chance import MIN_ROWS, against_chance
from tests.tolerances import TOL, monte_carlo_mean


def _causal_weights(rng, L, sharp=3.0):
    logits = rng.normal(size=(L, L)) * sharp
    vis = np.tril(np.ones((L, L), dtype=bool))
    logits[~vis] = -np.inf
    w = np.exp(logits - logits.max(1, keepdims=True))
    return w / w.sum(1, keepdims=True), vis


def _monte_carlo(w, t, v, n=20000, seed=1):
    """The permutation null drawn for real: each row's targets moved to as many random visible keys."""
    rng = np.random.default_rng(seed)
    t = t & v
    k = t.sum(1)
    m = v.sum(1)
    keep = (k > 0) & (k < m) & (m >= 2)
    observed = (w * t).sum(1)[keep].mean()
    draws = np.empty(n)
    rows = np.flatnonzero(keep)
    for d in range(n):
        total = 0.0
        for r in rows:
            keys = np.flatnonzero(v[r])
            total += w[r, rng.choice(keys, size=k[r], replace=False)].sum()
        draws[d] = total / len(rows)
    return observed, draws


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_p_value_matches_a_real_permutation_of_the_targets(seed):
    rng = np.random.default_rng(seed)
    L = 14
    w, vis = _causal_weights(rng, L)
    prev = np.zeros((L, L), dtype=bool)
    prev[np.arange(1, L), np.arange(L - 1)] = True
    # lean the head towards the previous token a little: p somewhere in the middle of (0, 1)
    w = np.where(prev, w + 0.15, w) * vis
    w /= w.sum(1, keepdims=True)
    ev = against_chance(w, prev, vis)
    observed, draws = _monte_carlo(w, prev, vis, n=4000, seed=seed)
    assert ev.score == pytest.approx(observed)
    assert ev.chance == pytest.approx(draws.mean(), abs=monte_carlo_mean(draws))
    analytic_sd = (ev.score - ev.chance) / ev.z
    assert analytic_sd == pytest.approx(draws.std(), rel=TOL["monte_carlo_sd_rel"])  # the without-replacement variance
    mc_p = (1 + (draws >= observed).sum()) / (len(draws) + 1)
    assert abs(ev.p - mc_p) < TOL["monte_carlo_p"] + TOL["monte_carlo_p_rel"] * mc_p, (ev.p, mc_p)


def test_a_uniform_head_is_never_credited_and_a_pure_previous_token_head_is():
    L = 12
    vis = np.tril(np.ones((L, L), dtype=bool))
    uniform = vis / vis.sum(1, keepdims=True)
    prev = np.zeros((L, L), dtype=bool)
    prev[np.arange(1, L), np.arange(L - 1)] = True
    ev = against_chance(uniform, prev, vis)
    assert ev.p == 1.0 and not ev.credited and ev.score == pytest.approx(ev.chance)
    pure = prev.astype(float)
    pure[0, 0] = 1.0
    ev = against_chance(pure, prev, vis)
    assert ev.credited and ev.score == pytest.approx(1.0) and ev.p < 1e-6 and ev.rows == L - 1


def test_too_few_rows_are_not_measurable():
    L = MIN_ROWS  # rows 1 … L-1 are informative for the previous token: L - 1 < MIN_ROWS
    vis = np.tril(np.ones((L, L), dtype=bool))
    prev = np.zeros((L, L), dtype=bool)
    prev[np.arange(1, L), np.arange(L - 1)] = True
    pure = prev.astype(float)
    pure[0, 0] = 1.0
    ev = against_chance(pure, prev, vis)
    assert ev.rows == L - 1 and not ev.measurable and not ev.credited


def test_bad_shapes_and_values_are_named():
    with pytest.raises(ValueError, match="one shape"):
        against_chance(np.ones((2, 3)), np.ones((2, 2), bool), np.ones((2, 3), bool))
    with pytest.raises(ValueError, match="finite"):
        against_chance(np.full((2, 2), np.nan), np.eye(2, dtype=bool), np.ones((2, 2), bool))


def test_a_layers_heads_measured_at_once_get_each_heads_own_p_value():
    """`head_types.measure` tests a layer's heads and types together (the rows' statistics computed once, the
    shares summed over the targets): each head's p-value is the one `against_chance` gives that head alone
    (checked above against a real permutation), for every type measured."""
    from selfattn.explainer.analysis import head_types

    rng = np.random.default_rng(7)
    L, H = 30, 4
    ids = list(rng.integers(0, 9, size=L))  # repeats: duplicate and induction targets exist
    w = np.stack([_causal_weights(rng, L, sharp)[0] for sharp in (0.0, 1.0, 3.0, 6.0)])
    vis = np.tril(np.ones((L, L), dtype=bool))
    got = head_types.measure(w, ids, causal=True)
    masks = head_types.targets(ids, causal=True)
    assert len(got) == H and masks
    for name, m in masks.items():
        measured = m.any(1)
        for h in range(H):
            if not measured.any():
                assert got[h][name]["p"] is None
                continue
            ev = against_chance(w[h], m, vis)
            assert got[h][name]["p"] == pytest.approx(ev.p, rel=TOL["same_op_rel"], abs=TOL["p_value_underflow"])
            assert got[h][name]["score"] == pytest.approx((w[h] * m).sum(1)[measured].mean(), rel=TOL["same_op_rel"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_uniform_attention_is_never_significant_whatever_its_rounding(dtype):
    """Uniform rows have no variance: 1/m in float32 or float64 differs from the row's mean by rounding only,
    and noise over noise must not become a z-score. Every pattern of a uniform head gets p = 1."""
    from selfattn.explainer.analysis import head_types

    rng = np.random.default_rng(3)
    L = 97  # 1/m is not exact in binary for most m
    ids = list(rng.integers(0, 7, size=L))
    vis = np.tril(np.ones((L, L), dtype=bool))
    w = (vis / vis.sum(1, keepdims=True)).astype(dtype)
    for types in head_types.measure(np.stack([w, w]), ids, causal=True):
        for name, m in types.items():
            if name != "broad" and m["p"] is not None:
                assert m["p"] == 1.0 and not m["credited"], (name, m)
