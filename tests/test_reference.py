"""The spec itself, checked against the tutorial's own numbers and by hand."""

import numpy as np
import pytest

from selfattn import reference as R

from .tolerances import TOL


def test_softmax_examples_of_the_tutorial():
    # "scores = [2.0, 0.0, 0.0] → softmax ≈ [0.79, 0.10, 0.10]"
    np.testing.assert_allclose(R.softmax([2.0, 0.0, 0.0]), [0.7870, 0.1065, 0.1065], atol=TOL["tutorial_digits"])
    # "scores = [2.0, -inf, -inf] → softmax = [1.0, 0.0, 0.0]" — exactly
    assert R.softmax([2.0, -np.inf, -np.inf]).tolist() == [1.0, 0.0, 0.0]


def test_softmax_is_stable_and_safe():
    big = R.softmax([1e4, 1e4 - 1.0, -1e4])
    assert np.isfinite(big).all() and abs(big.sum() - 1) < TOL["float64_one_op"]
    assert R.softmax([-np.inf, -np.inf]).tolist() == [0.0, 0.0]  # nothing visible: zeros, not NaN
    with pytest.raises(ValueError, match="scalar"):
        R.softmax(3.0)


def test_causal_mask_is_the_tutorial_table():
    expected = np.array([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], bool)
    assert (R.causal_mask(5) == expected).all()
    assert R.causal_mask(1, 6).all()  # one decoding step sees the whole past
    assert (R.causal_mask(2, 4) == np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)).all()
    with pytest.raises(ValueError, match="-1"):
        R.causal_mask(-1)
    with pytest.raises(TypeError, match="2.5"):
        R.causal_mask(2.5)


def test_self_attention_by_hand():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(10, 128))
    w_q, w_k, w_v = (rng.normal(size=(128, 128)) / np.sqrt(128) for _ in range(3))
    t = R.self_attention(x, w_q, w_k, w_v)
    assert t.output.shape == x.shape == (10, 128)  # 10×128 in, 10×128 out
    assert t.scores.shape == (10, 10)
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = q @ k.T / np.sqrt(128)
    s[np.triu_indices(10, 1)] = -np.inf
    w = np.exp(s - s.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    np.testing.assert_allclose(t.weights, w, rtol=TOL["float64"], atol=TOL["float64_one_op"])
    np.testing.assert_allclose(t.output, w @ v, rtol=TOL["float64"], atol=TOL["float64"])
    assert (t.weights[np.triu_indices(10, 1)] == 0).all()  # future positions: exactly 0
    np.testing.assert_allclose(t.weights.sum(1), 1.0, rtol=TOL["float64_few_ops"])
    assert np.isneginf(t.masked[np.triu_indices(10, 1)]).all()


def test_self_attention_extra_mask_and_empty_rows():
    x = np.eye(3)
    mask = np.array([[0, 0, 0], [1, 1, 1], [1, 0, 1]], bool)
    t = R.self_attention(x, np.eye(3), np.eye(3), np.eye(3), mask=mask)
    assert (t.weights[0] == 0).all() and (t.output[0] == 0).all()
    assert t.weights[2, 1] == 0 and abs(t.weights[2].sum() - 1) < TOL["float64_one_op"]


@pytest.mark.parametrize(
    "bad, err, match",
    [
        (dict(x=np.ones((3,))), ValueError, r"x must be 2-D, got shape \(3,\)"),
        (dict(w_q=np.ones((4, 2))), ValueError, "w_q has 4 rows but x has D=3"),
        (dict(w_k=np.ones((3, 5))), ValueError, "d_k=2 but w_k gives d_k=5"),
        (dict(x=np.array([["a"] * 3])), TypeError, "x must be a real numeric array"),
        (dict(mask=np.ones((3, 3))), TypeError, "mask must be bool"),
        (dict(mask=np.ones((2, 2), bool)), ValueError, r"mask has shape \(2, 2\)"),
    ],
)
def test_bad_inputs_are_named(bad, err, match):
    args = dict(x=np.ones((3, 3)), w_q=np.ones((3, 2)), w_k=np.ones((3, 2)), w_v=np.ones((3, 3)))
    mask = bad.pop("mask", None)
    args.update(bad)
    with pytest.raises(err, match=match):
        R.self_attention(**args, mask=mask)


def test_reference_attention_agrees_with_self_attention():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(7, 6))
    w = [rng.normal(size=(6, 6)) for _ in range(3)]
    t = R.self_attention(x, *w)
    out, weights, lse = R.attention(t.q[None, None], t.k[None, None], t.v[None, None], causal=True)
    np.testing.assert_allclose(out[0, 0], t.output, atol=TOL["float64_lse"])
    np.testing.assert_allclose(weights[0, 0], t.weights, atol=TOL["float64_one_op"])
    np.testing.assert_allclose(np.exp(t.masked - lse[0, 0, :, None]), t.weights, atol=TOL["float64_lse"])


def test_visibility_window():
    expected = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]], bool)
    assert (R.visibility(4, 4, window=2) == expected).all()
    assert (R.visibility(2, 4, causal=True, window=2) == np.array([[0, 1, 1, 0], [0, 0, 1, 1]], bool)).all()


def test_scale_scores_and_the_checked_arguments():
    np.testing.assert_allclose(R.scale_scores([[4.0, 8.0]], 16), [[1.0, 2.0]])
    assert not hasattr(R, "scale")  # `attention`'s scale argument shadows nothing
    q = np.ones((1, 1, 2, 4))
    out, _, _ = R.attention(q, q, q, scale=0.0, causal=True)
    np.testing.assert_allclose(out, 1.0)
    with pytest.raises(ValueError, match="d_k must be >= 1, got 0"):
        R.scale_scores([[1.0]], 0)
    with pytest.raises(TypeError, match="scale must be a real number, got str"):
        R.attention(q, q, q, scale="big")
    with pytest.raises(ValueError, match="softcap must be >= 0"):
        R.attention(q, q, q, softcap=-1.0)
    with pytest.raises(ValueError, match="window must be >= 1, got 0"):
        R.visibility(2, 2, window=0)
    with pytest.raises(TypeError, match="causal must be a bool"):
        R.self_attention(np.eye(2), np.eye(2), np.eye(2), np.eye(2), causal=1)
