"""selfattn.detect_head against TransformerLens' formulas computed by hand on the eager attention weights
of a tiny transformers Llama (the same weights run by transformers itself, `output_attentions=True`)."""

import numpy as np
import pytest
import torch

import selfattn
from selfattn.explainer import detect
from tests.tolerances import TOL

transformers = pytest.importorskip("transformers")

from ...hf import models  # noqa: E402 - needs transformers

PROMPT = "a blue monster walks into the forest a blue monster walks"
OTHER = "the cat sleeps in the house the cat sleeps"


@pytest.fixture(scope="module")
def tok():
    return models.tokenizer()


def _eager(tok, prompt: str) -> tuple[list[int], np.ndarray]:
    """(ids, weights (layers, heads, L, L) float64) of the eager model, as transformers gives them."""
    ids = tok(prompt)["input_ids"]
    with torch.no_grad():
        out = models.build("llama", "eager")(torch.tensor([ids]), output_attentions=True)
    return ids, torch.cat(out.attentions).double().numpy()


def _ours(tok, prompt, pattern, **kw) -> torch.Tensor:
    return selfattn.detect_head((models.build("llama", "eager"), tok), prompt, pattern, **kw)


def _patterns(ids: list[int]) -> dict[str, np.ndarray]:
    """TransformerLens' three patterns, written out entry by entry."""
    L = len(ids)
    prev, dup, ind = np.zeros((L, L)), np.zeros((L, L)), np.zeros((L, L))
    for i in range(L):
        for j in range(i):
            prev[i, j] = j == i - 1
            dup[i, j] = ids[j] == ids[i]
            if j + 1 <= i and ids[j] == ids[i]:
                ind[i, j + 1] = 1.0
    return {"previous_token_head": prev, "duplicate_token_head": dup, "induction_head": ind}


def _mul(w: np.ndarray, p: np.ndarray) -> float:
    return float((w * p).sum() / w.sum())


@pytest.mark.parametrize("name", list(detect.HEAD_NAMES))
def test_named_heads_score_as_transformer_lens_on_eager_weights(tok, name):
    ids, w = _eager(tok, PROMPT)
    assert all(a != b for a, b in zip(ids, ids[1:], strict=False))  # no token twice in a row: the two induction
    # patterns (TransformerLens also counts the query itself after a repeat) agree
    assert selfattn.explain(PROMPT, (models.build("llama", "eager"), tok)).doc["token_ids"] == ids
    p = _patterns(ids)[name]
    assert p.sum() > 0
    expected = np.array([[_mul(w[l, h], p) for h in range(w.shape[1])] for l in range(w.shape[0])])
    got = _ours(tok, PROMPT, name)
    assert got.shape == (2, 4) and got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), expected, atol=TOL["float32_vs_transformers"])
    assert (
        np.ptp(expected) > 100 * TOL["float32_vs_transformers"]
    )  # the heads differ far beyond the tolerance: a swap would be noticed


def test_a_pattern_of_ones_own_with_the_options(tok):
    ids, w = _eager(tok, PROMPT)
    L = len(ids)
    mine = np.tril(np.ones((L, L)))
    mine[:, 1::2] = 0.0  # "attends to even positions"
    kept = np.ones((L, L), dtype=bool)
    kept[:, 0] = False
    np.fill_diagonal(kept, False)
    by_hand = np.array([[_mul(np.where(kept, w[l, h], 0.0), mine) for h in range(4)] for l in range(2)])
    got = _ours(tok, PROMPT, torch.tensor(mine), exclude_bos=True, exclude_current_token=True)
    np.testing.assert_allclose(got.numpy(), by_hand, atol=TOL["float32_vs_transformers"])
    abs_by_hand = np.array([[1 - round(np.abs(w[l, h] - mine).mean() * L, 3) for h in range(4)] for l in range(2)])
    got = _ours(tok, PROMPT, mine, error_measure="abs")
    np.testing.assert_allclose(
        got.numpy(), abs_by_hand, atol=TOL["transformer_lens_rounding"]
    )  # TransformerLens rounds to 3 places


def test_chosen_heads_and_several_prompts(tok):
    got = _ours(tok, [PROMPT, OTHER], "previous_token_head", heads={1: [2]})
    expected = np.mean(
        [_mul(w[1, 2], _patterns(ids)["previous_token_head"]) for ids, w in (_eager(tok, p) for p in (PROMPT, OTHER))]
    )
    assert got[1, 2].item() == pytest.approx(expected, abs=TOL["float32_vs_transformers"])
    others = torch.ones(2, 4, dtype=torch.bool)
    others[1, 2] = False
    assert (got[others] == -1).all()
    by_function = _ours(tok, PROMPT, lambda ids: _patterns(ids)["duplicate_token_head"], heads=[(0, 0)])
    assert by_function[0, 0].item() == pytest.approx(_ours(tok, PROMPT, "duplicate_token_head")[0, 0].item())


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        ({"detection_pattern": "copy_head"}, ValueError, "one of the head names"),
        ({"detection_pattern": np.zeros((3, 3))}, ValueError, r"must be \(L, L\) for the prompt's L = "),
        ({"detection_pattern": "induction_head", "error_measure": "sq"}, ValueError, "error_measure must be"),
        ({"detection_pattern": "induction_head", "heads": [(2, 0)]}, ValueError, r"head \(2, 0\) does not exist"),
        ({"detection_pattern": [[1.0]]}, TypeError, "detection_pattern must be"),
    ],
)
def test_bad_arguments_are_named(tok, kw, error, match):
    with pytest.raises(error, match=match):
        selfattn.detect_head((models.build("llama", "eager"), tok), PROMPT, **kw)
