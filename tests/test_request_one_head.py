"""`Request.one_head`: one query head of a request, every per-head field cut with it (the explainer's head apart)."""

from __future__ import annotations

import pytest
import torch

from selfattn.kernels.naive import NaiveBackend
from selfattn.request import build_request
from tests.tolerances import TOL


@pytest.mark.parametrize("with_mask", [False, True])
def test_one_head_equals_that_head_of_the_whole_request(with_mask):
    g = torch.Generator().manual_seed(0)
    B, Hq, Hkv, L, D = 2, 4, 2, 6, 8
    q = torch.randn(B, Hq, L, D, generator=g, dtype=torch.float64)
    k = torch.randn(B, Hkv, L, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, Hkv, L, D, generator=g, dtype=torch.float64)
    mask = torch.randn(B, Hq, L, L, generator=g, dtype=torch.float64) if with_mask else None
    sinks = torch.randn(Hq, generator=g, dtype=torch.float64)
    alibi = torch.rand(Hq, generator=g, dtype=torch.float64)
    r = build_request(q, k, v, causal=True, mask=mask, sinks=sinks, alibi=alibi, return_weights=True, return_lse=True)
    whole = NaiveBackend().forward(r)
    for h in range(Hq):
        part = NaiveBackend().forward(r.one_head(h))
        torch.testing.assert_close(part.output, whole.output[:, h : h + 1], rtol=0, atol=TOL["float64"])
        torch.testing.assert_close(part.lse, whole.lse[:, h : h + 1], rtol=0, atol=TOL["float64"])
        torch.testing.assert_close(part.weights, whole.weights[:, h : h + 1], rtol=0, atol=TOL["float64"])
    with pytest.raises(ValueError, match=r"head must be in \[0, 3\], got 4"):
        r.one_head(4)
