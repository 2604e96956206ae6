import re

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
                    want = (
                        masks.Block.HIDDEN
                        if not tile.any()
                        else masks.Block.FULL
                        if tile.all()
                        else masks.Block.PARTIAL
                    )
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


@pytest.mark.parametrize("causal, window", [(False, None), (True, None), (True, 3), (False, 2)])
def test_visibility_of_chosen_rows_and_columns_is_a_slice_of_the_whole(causal, window):
    whole = masks.visibility(9, 13, causal=causal, window=window)
    rows, cols = torch.tensor([0, 4, 8]), torch.tensor([2, 3, 11, 12])
    part = masks.visibility(9, 13, causal=causal, window=window, rows=rows, cols=cols)
    assert torch.equal(part, whole[rows][:, cols])
    assert torch.equal(masks.visibility(9, 13, causal=causal, window=window, rows=rows), whole[rows])


def test_draw_blocks_is_the_tiled_docstring_picture():
    from selfattn.kernels import tiled

    picture = masks.draw_blocks(8, 8, 2, 2, causal=True)
    assert picture == "P . . .\nF P . .\nF F P .\nF F F P"
    for doc in (tiled.__doc__, masks.draw_blocks.__doc__):
        drawn = re.findall(r"^ +([FP.](?: [FP.]){3})(?= |$)", doc, flags=re.MULTILINE)
        assert "\n".join(drawn) == picture


@pytest.mark.parametrize("causal, window", [(False, None), (True, None), (True, 5), (False, 3)])
@pytest.mark.parametrize("n_q, n_k, bq, bk", [(13, 13, 4, 3), (5, 17, 2, 4), (17, 5, 6, 1)])
def test_draw_blocks_agrees_with_block_visibility(causal, window, n_q, n_k, bq, bk):
    rows = masks.draw_blocks(n_q, n_k, bq, bk, causal=causal, window=window).splitlines()
    assert len(rows) == -(-n_q // bq)
    for i, row in enumerate(rows):
        for j, char in enumerate(row.split(" ")):
            kind = masks.block_visibility(
                i * bq, min(i * bq + bq, n_q), j * bk, min(j * bk + bk, n_k), n_q, n_k, causal=causal, window=window
            )
            assert char == masks.BLOCK_CHARS[kind]
    with pytest.raises(ValueError, match="block_q must be >= 1, got 0"):
        masks.draw_blocks(4, 4, 0, 2)
