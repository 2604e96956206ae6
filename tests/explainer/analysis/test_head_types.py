"""Head types against chance: every score and chance level recomputed here with plain loops."""

import numpy as np
import pytest
import torch

from selfattn.explainer.analysis import head_types as T
from tests.tolerances import TOL


def _loop_reference(w: np.ndarray, ids: list[int], causal: bool) -> dict[str, tuple[float, float, int]]:
    """The module's table, row by row in plain Python: (score, chance, rows) per type."""
    L = len(ids)
    out = {}
    for t in T.measured():
        score = chance = 0.0
        rows = 0
        for i in range(L):
            seen = [j for j in range(L) if (j <= i or not causal)]
            if len(seen) < 2:
                continue
            if t == "previous":
                keys = [i - 1] if i - 1 in seen else []
            elif t == "next":
                keys = [i + 1] if i + 1 in seen else []
            elif t == "self":
                keys = [i]
            elif t == "first":
                keys = [0] if i >= 1 else []
            elif t == "duplicate":
                keys = [j for j in seen if j < i and ids[j] == ids[i]]
            elif t == "induction":
                keys = [j + 1 for j in seen if j < i and ids[j] == ids[i] and j + 1 < i]
            else:
                keys = [j for j in seen if abs(j - i) <= T.LOCAL_SPAN]
                keys = keys if len(keys) < len(seen) else []
            if keys:
                score += sum(w[i, j] for j in keys)
                chance += len(keys) / len(seen)
                rows += 1
        out[t] = (score / rows, chance / rows, rows) if rows else (None, None, 0)
    return out


def _random_rows(L: int, causal: bool, seed: int) -> np.ndarray:
    w = np.random.default_rng(seed).random((L, L))
    if causal:
        w = np.tril(w)
    return w / w.sum(1, keepdims=True)


@pytest.mark.parametrize("causal", [True, False])
def test_scores_and_chance_equal_the_loop_reference(causal):
    ids = [5, 7, 9, 5, 7, 3, 5, 9, 9, 1]
    w = np.stack([_random_rows(len(ids), causal, s) for s in range(3)])
    got = T.measure(torch.from_numpy(w), ids, causal=causal)
    for h in range(3):
        want = _loop_reference(w[h], ids, causal)
        for t in T.measured():
            s, c, n = want[t]
            assert got[h][t]["rows"] == n, t
            if n:
                assert got[h][t]["score"] == pytest.approx(s, abs=TOL["float64"]), t
                assert got[h][t]["chance"] == pytest.approx(c, abs=TOL["float64"]), t
            else:
                assert got[h][t]["score"] is None
    if causal:
        assert all(got[h]["next"]["rows"] == 0 for h in range(3))  # a decoder cannot look ahead


def test_a_previous_token_head_is_credited_and_uniform_attention_is_not():
    L = 12
    ids = list(range(100, 100 + L))
    prev = np.zeros((L, L))
    prev[0, 0] = 1
    prev[np.arange(1, L), np.arange(L - 1)] = 1
    uniform = np.tril(np.ones((L, L)))
    uniform /= uniform.sum(1, keepdims=True)
    heads = T.measure(np.stack([prev, uniform]), ids, causal=True)
    assert heads[0]["previous"]["score"] == 1.0 and T.credited(heads[0])[0] == "previous"
    # uniform attention's score IS its chance level on every type: nothing credited, the head is broad
    for t in T.measured():
        m = heads[1][t]
        if m["rows"]:
            assert m["score"] == pytest.approx(m["chance"], abs=TOL["float64"])
            assert not m["credited"]
    assert T.credited(heads[1]) == ["broad"] and heads[1]["broad"]["score"] == pytest.approx(1.0)


def test_an_induction_head_on_the_probe():
    n = 8
    ids = T.induction_probe(range(1000, 1100), n, seed=3, prefix=[1])
    assert len(ids) == 1 + 2 * n and ids[1 : 1 + n] == ids[1 + n :] and len(set(ids[1 : 1 + n])) == n
    L = len(ids)
    w = np.tril(np.full((L, L), 1e-3))
    for t in range(n):  # the second copy of r_t looks at what followed its first occurrence
        w[1 + n + t, 2 + t] = 1.0
    w /= w.sum(1, keepdims=True)
    heads = T.measure(w, ids, causal=True)
    assert heads[0]["induction"]["rows"] == n
    assert heads[0]["induction"]["score"] > 0.9 and "induction" in T.credited(heads[0])
    assert heads[0]["induction"]["chance"] < 0.15


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match=r"\(H, L, L\)"):
        T.measure(np.ones((3, 4)), [1, 2, 3], causal=True)
    with pytest.raises(ValueError, match="length"):
        T.induction_probe(range(3), 5)
