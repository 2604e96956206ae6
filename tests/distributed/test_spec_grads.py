"""The ring tests' gradient spec (spec_grads.py) equals torch autograd of a plain PyTorch softmax."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import make_inputs
from tests.tolerances import TOL, max_error

from .spec_grads import spec_with_grads


def _plain(q, k, v, *, causal, window, scale, softcap, sinks=None, alibi=None):
    """Attention in a few plain PyTorch ops (no selfattn code): output and lse; a sink is one more key
    whose value is 0."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    s = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    L = q.shape[2]
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    if alibi is not None:
        s = s - alibi[:, None, None] * (i - j).abs()
    visible = torch.ones(L, L, dtype=torch.bool)
    if causal:
        visible &= j <= i
    if isinstance(window, int):
        visible &= (j <= i) & (j > i - window)
    elif window is not None:
        left, right = window
        visible &= (j >= i - (L if left is None else left)) & (j <= i + (L if right is None else right))
    s = s.masked_fill(~visible, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks[None, :, None, None].expand(*s.shape[:3], 1)], dim=-1)
        v = torch.cat([v, v.new_zeros(*v.shape[:2], 1, v.shape[3])], dim=2)
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


@pytest.mark.parametrize(
    "causal, window, softcap, Hq, Hkv",
    [(True, None, None, 4, 2), (False, (2, 3), 1.5, 3, 1), (False, (None, 1), None, 2, 2), (True, 4, None, 2, 1)],
)
def test_spec_grads_with_sinks_and_alibi_equal_autograd(causal, window, softcap, Hq, Hkv):
    """The sinks' gradient and ALiBi / two-sided windows in the spec's gradients, against autograd."""
    q, k, v = make_inputs(2, Hq, Hkv, 11, 11, 5, 3, seed=6)
    g = torch.Generator().manual_seed(7)
    do = torch.randn(2, Hq, 11, 3, generator=g, dtype=torch.float64)
    dl = torch.randn(2, Hq, 11, generator=g, dtype=torch.float64)
    sinks = torch.randn(Hq, generator=g, dtype=torch.float64)
    alibi = torch.rand(Hq, generator=g, dtype=torch.float64)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, sinks)]
    opts = dict(causal=causal, window=window, scale=None, softcap=softcap)
    out, lse = _plain(*leaves[:3], **opts, sinks=leaves[3], alibi=alibi)
    ((out * do).sum() + (lse * dl).sum()).backward()
    got = spec_with_grads(q, k, v, do, dl, **opts, sinks=sinks, alibi=alibi)
    want = (out, lse, *(t.grad for t in leaves))
    for name, a, b in zip(("output", "lse", "dq", "dk", "dv", "dsinks"), got, want, strict=True):
        assert max_error(torch.from_numpy(a), b) <= TOL["float64"], name
