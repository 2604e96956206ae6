"""The ring tests' gradient spec (spec_grads.py) equals torch autograd of a plain PyTorch softmax."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import make_inputs
from tests.tolerances import TOL, max_error

from .spec_grads import spec_with_grads


def _plain(q, k, v, *, causal, window, scale, softcap):
    """Attention in a few plain PyTorch ops (no selfattn code): output and lse."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    s = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    L = q.shape[2]
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    visible = torch.ones(L, L, dtype=torch.bool)
    if causal or window is not None:
        visible &= j <= i
    if window is not None:
        visible &= j > i - window
    s = s.masked_fill(~visible, float("-inf"))
    return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)


@pytest.mark.parametrize(
    "causal, window, scale, softcap, Hq, Hkv",
    [
        (False, None, None, None, 2, 2),
        (True, None, 0.7, None, 4, 2),
        (True, 3, None, 1.5, 3, 1),
        (False, 5, None, None, 2, 1),
    ],
)
def test_spec_grads_equal_autograd(causal, window, scale, softcap, Hq, Hkv):
    q, k, v = make_inputs(2, Hq, Hkv, 11, 11, 5, 3, seed=4)
    g = torch.Generator().manual_seed(5)
    do = torch.randn(2, Hq, 11, 3, generator=g, dtype=torch.float64)
    dl = torch.randn(2, Hq, 11, generator=g, dtype=torch.float64)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, lse = _plain(*leaves, causal=causal, window=window, scale=scale, softcap=softcap)
    ((out * do).sum() + (lse * dl).sum()).backward()
    got = spec_with_grads(q, k, v, do, dl, causal=causal, window=window, scale=scale, softcap=softcap)
    for name, a, b in zip(("output", "lse", "dq", "dk", "dv"), got, (out, lse, *(t.grad for t in leaves)), strict=True):
        assert max_error(torch.from_numpy(a), b) <= TOL["float64"], name
