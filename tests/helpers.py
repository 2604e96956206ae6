"""Test inputs and the float64 reference of them, written once for every test file.

make_inputs(B, Hq, Hkv, Lq, Lk, D, Dv)   q, k, v from a seeded generator (float64, then cast)
reference_of(q, k, v, **attention_kwargs) `selfattn.reference.attention` of the same tensors
shaped_request(B=1, Hq=8, ...)            a Request of that shape whose tensors take no memory
forward_with_lse(backend, q, k, v, **kw)  one backend's forward of these tensors, lse included
"""

from __future__ import annotations

import torch

from selfattn import reference
from selfattn.request import build_request


def make_inputs(B, Hq, Hkv, Lq, Lk, D, Dv=None, *, dtype=torch.float64, seed=0, magnitude=1.0):
    """q (B, Hq, Lq, D) and k (B, Hkv, Lk, D) scaled by `magnitude`, v (B, Hkv, Lk, Dv): one
    generator, drawn in that order in float64 and cast to `dtype`."""
    Dv = D if Dv is None else Dv
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(B, Hq, Lq, D, generator=g, dtype=torch.float64) * magnitude).to(dtype)
    k = (torch.randn(B, Hkv, Lk, D, generator=g, dtype=torch.float64) * magnitude).to(dtype)
    v = torch.randn(B, Hkv, Lk, Dv, generator=g, dtype=torch.float64).to(dtype)
    return q, k, v


def _numpy(t):
    return None if t is None else t.detach().double().numpy() if t.dtype != torch.bool else t.numpy()


def reference_of(
    q, k, v, *, causal=False, mask=None, window=None, scale=None, softcap=None, sinks=None, alibi=None, segments=None
):
    """(output, weights, lse) of the float64 spec for these tensors and `attention` arguments."""
    return reference.attention(
        _numpy(q),
        _numpy(k),
        _numpy(v),
        causal=causal,
        mask=_numpy(mask),
        window=window,
        scale=scale,
        softcap=softcap,
        sinks=_numpy(sinks),
        alibi=_numpy(alibi),
        segments=None if segments is None else segments.numpy(),
    )


def shaped_request(B=1, Hq=8, Hkv=8, Lq=1024, Lk=1024, D=64, device="cpu", grad=False, dtype=torch.float32, **kwargs):
    """A request of that shape whose tensors take no memory (one element, expanded)."""
    one = torch.zeros((), device=device, dtype=dtype, requires_grad=grad)
    q, k, v = one.expand(B, Hq, Lq, D), one.expand(B, Hkv, Lk, D), one.expand(B, Hkv, Lk, D)
    return build_request(q, k, v, **kwargs)


def forward_with_lse(backend, q, k, v, **kwargs):
    """`backend.forward` (a Backend object, not a name) of a request of these tensors and `attention`
    arguments, with return_lse=True: its Result (output (B, Hq, Lq, Dv), lse (B, Hq, Lq))."""
    return backend.forward(build_request(q, k, v, return_lse=True, **kwargs))


def skip_if_flex_refuses(backend: str, q, k, v, **kwargs) -> None:
    """Skip a test that runs every backend when it is flex and flex cannot serve this request on
    this machine (on a CPU: no lse, no backward, nothing under one 128-position block). Any other
    backend's refusal stays a failure."""
    import pytest

    from selfattn import kernels

    if backend == "flex":
        why = kernels.BACKENDS["flex"].refuse(build_request(q, k, v, **kwargs))
        if why:
            pytest.skip(f"flex refuses here: {why}")
