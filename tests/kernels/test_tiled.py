"""Backend "tiled", what only it does: every supported block size and their checks, its refusals,
and its Plan (which tiles it visits, forward and backward, and the work it counts); it never builds
an Lq × Lk matrix. The contract it shares with "native" (every feature, awkward lengths, masks,
poisoned padding, fully masked rows, gradients) is tested for both in test_fused.py."""

import numpy as np
import pytest
import torch

import selfattn
from selfattn import reference
from selfattn.kernels import tiled
from selfattn.kernels.tiled import BLOCK_SIZES, TiledBackend
from selfattn.request import build_request

from ..helpers import forward_with_lse, make_inputs, reference_of
from ..tolerances import TOL, assert_close_to_reference, assert_lse_matches


@pytest.mark.parametrize("block_q", BLOCK_SIZES)
@pytest.mark.parametrize("block_k", BLOCK_SIZES)
def test_every_supported_block_size(block_q, block_k):
    q, k, v = make_inputs(2, 4, 2, 113, 150, 8, 8)
    kwargs = dict(causal=True, window=70)
    res = forward_with_lse(TiledBackend(block_q, block_k), q, k, v, **kwargs)
    ref_out, _, ref_lse = reference_of(q, k, v, **kwargs)
    assert_close_to_reference(res.output, ref_out)
    assert_lse_matches(res.lse, ref_lse, TOL["float64"])


def test_block_sizes_are_checked():
    with pytest.raises(ValueError, match=r"block_q=48 is not a supported block size; choose one of \(16"):
        TiledBackend(block_q=48)
    with pytest.raises(ValueError, match="block_k=0"):
        TiledBackend(block_k=0)


def test_refusals_say_why():
    # every reason at once, not only the first
    q, k, v = make_inputs(1, 1, 1, 4, 4, 8, 8)
    request = build_request(q, k, v, return_weights=True, dropout_p=0.1)
    reasons = TiledBackend().not_supported_reasons(request)
    assert len(reasons) == 2 and "weight matrix" in reasons[0] and "no dropout" in reasons[1]
    q, k, v = make_inputs(1, 1, 1, 4, 4, 8, 8)
    with pytest.raises(ValueError, match="never builds the weight matrix.*attention_weights"):
        selfattn.attention(q, k, v, return_weights=True, backend="tiled")
    with pytest.raises(ValueError, match="no dropout"):
        selfattn.attention(q, k, v, dropout_p=0.1, backend="tiled")
    mask = torch.zeros(4, 4, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ValueError, match="does not differentiate an additive mask"):
        selfattn.attention(q, k, v, mask=mask, backend="tiled")
    with torch.no_grad():
        assert selfattn.attention(q, k, v, mask=mask, backend="tiled").shape == q.shape


def _visited(plan):
    tiles = {"full": 0, "partial": 0, "pairs": 0}
    for q0 in range(0, plan.Lq, plan.block_q):
        full, partial = plan.key_blocks(q0, min(q0 + plan.block_q, plan.Lq))
        tiles["full"] += len(full)
        tiles["partial"] += len(partial)
        tiles["pairs"] += sum((q1 - q0) * (k1 - k0) for q0, q1, k0, k1 in full + partial)
    return tiles


def _plan(L, block_q=64, block_k=64, **kwargs):
    q = torch.zeros(1, 1, L, 4)
    return tiled.Plan.of(build_request(q, q, q, **kwargs), block_q, block_k)


def test_blocks_the_request_makes_invisible_are_skipped():
    # causal, 16 × 16 blocks: 120 below the diagonal, 16 on it, the 120 above never visited
    assert _visited(_plan(1024, causal=True)) == {"full": 120, "partial": 16, "pairs": 136 * 64 * 64}
    # a window of 128 = 2 blocks: per query block at most 3 tiles, so O(N·w), not O(N²)
    for L in (1024, 4096):
        tiles = _visited(_plan(L, causal=True, window=128))
        assert tiles["full"] + tiles["partial"] <= 3 * (L // 64)
    assert _visited(_plan(1024)) == {"full": 256, "partial": 0, "pairs": 1024 * 1024}


def test_tall_query_blocks_trim_the_rows_above_the_diagonal():
    # 256 × 64 blocks, causal: a tile holds only the rows that see its key block, so the work is
    # the visible triangle plus the masked halves of 64 × 64 diagonal squares, as with square blocks
    tiles = _visited(_plan(1024, block_q=256, causal=True))
    assert tiles["partial"] == 16 and tiles["pairs"] == 136 * 64 * 64
    assert tiles["pairs"] == tiled.Plan.work(_plan(1024, block_q=256, causal=True))[1]


def test_backward_covers_what_the_forward_computes_and_both_cover_every_visible_pair():
    L = 700
    for kwargs in (dict(causal=True), dict(causal=True, window=100), dict(window=7)):
        visible = reference.visibility(L, L, causal=kwargs.get("causal", False), window=kwargs.get("window"))
        for block_q in (64, 256):
            plan = _plan(L, block_q=block_q, **kwargs)
            forward, backward = np.zeros((L, L), bool), np.zeros((L, L), bool)
            for q0 in range(0, L, block_q):
                full, partial = plan.key_blocks(q0, min(q0 + block_q, L))
                for r0, r1, k0, k1 in full + partial:
                    forward[r0:r1, k0:k1] = True
            for k0 in range(0, L, 64):
                full, partial = plan.query_blocks(k0, min(k0 + 64, L))
                for r0, r1, c0, c1 in full + partial:
                    backward[r0:r1, c0:c1] = True
            assert (forward >= visible).all() and (backward >= visible).all()  # nothing visible is skipped
            assert (backward >= forward).all()  # the backward recomputes every tile the forward summed
            assert not forward[:, ~visible.any(axis=0)].any()  # a key no query may see is never read


def test_never_builds_an_lq_by_lk_matrix(monkeypatch):
    biggest = []

    def spy(real):
        def matmul(*args, **kwargs):
            out = real(*args, **kwargs)
            biggest.append(out.shape[-2] * out.shape[-1])
            return out

        return matmul

    for name in ("bmm", "baddbmm"):
        monkeypatch.setattr(torch, name, spy(getattr(torch, name)))
    q, k, v = (t.requires_grad_() for t in make_inputs(1, 2, 2, 1000, 1000, 8, 8, dtype=torch.float32))
    out = TiledBackend(64, 128).forward(build_request(q, k, v, causal=True)).output
    out.sum().backward()
    assert len(biggest) > 100 and max(biggest) <= 64 * 128
    biggest.clear()
    with torch.no_grad():
        TiledBackend().forward(build_request(q, k, v, causal=True))  # default blocks: 1024 × 256
    assert max(biggest) <= 1000 * 256
