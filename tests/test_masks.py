import numpy as np
import pytest
import torch

from selfattn import masks, reference


@pytest.mark.parametrize("n_q, n_k", [(1, 1), (4, 4), (2, 7), (7, 3), (5, 5)])
@pytest.mark.parametrize("causal, window", [(False, None), (True, None), (True, 2), (False, 3), (True, 1)])
def test_visibility_matches_reference(n_q, n_k, causal, window):
    got = masks.visibility(n_q, n_k, causal=causal, window=window).numpy()
    assert (got == reference.visibility(n_q, n_k, causal=causal, window=window)).all()


@pytest.mark.parametrize("causal, window", [(False, None), (True, None), (True, 3), (False, 5), (True, 1)])
@pytest.mark.parametrize("n_q, n_k", [(13, 13), (5, 17), (17, 5)])
def test_block_visibility_agrees_with_the_dense_matrix(causal, window, n_q, n_k):
    dense = masks.visibility(n_q, n_k, causal=causal, window=window)
    for bq in (1, 4, 6):
        for bk in (1, 3, 8):
            for q0 in range(0, n_q, bq):
                for k0 in range(0, n_k, bk):
                    q1, k1 = min(q0 + bq, n_q), min(k0 + bk, n_k)
                    tile = dense[q0:q1, k0:k1]
                    kind = masks.block_visibility(q0, q1, k0, k1, n_q, n_k, causal=causal, window=window)
                    want = (masks.Block.HIDDEN if not tile.any() else
                            masks.Block.FULL if tile.all() else masks.Block.PARTIAL)
                    assert kind == want, (q0, q1, k0, k1)


def test_padding_mask_and_draw():
    m = masks.padding_mask(torch.tensor([[1, 1, 0], [1, 0, 0]]))
    assert m.shape == (2, 1, 1, 3) and m.dtype == torch.bool
    assert masks.draw(reference.causal_mask(3)) == "1 0 0\n1 1 0\n1 1 1"
    assert masks.draw(masks.visibility(2, 3, causal=True)) == "1 1 0\n1 1 1"
    with pytest.raises(ValueError, match="found 2"):
        masks.padding_mask(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match=r"\(B, Lk\)"):
        masks.padding_mask(torch.ones(3))
    with pytest.raises(TypeError, match="list"):
        masks.padding_mask([1, 0])
    with pytest.raises(ValueError, match="2-D"):
        masks.draw(np.ones(3, bool))
