"""Properties that must hold for every input: hypothesis searches for a counterexample."""

import numpy as np
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import selfattn
from selfattn import KVCache, MultiHeadSelfAttention, SelfAttention, kernels
from selfattn.request import build_request

from .helpers import make_inputs
from .tolerances import TOL

shapes = st.tuples(
    st.integers(1, 2),
    st.sampled_from([(1, 1), (2, 1), (4, 2), (3, 3)]),
    st.integers(1, 12),
    st.integers(1, 12),
    st.integers(1, 9),
)


def tensors(shape, seed):
    """q, k, v of the drawn shape, and a generator for anything else the test draws."""
    B, (Hq, Hkv), Lq, Lk, D = shape
    return (*make_inputs(B, Hq, Hkv, Lq, Lk, D, seed=seed), torch.Generator().manual_seed(seed + 1))


@settings(max_examples=60, deadline=None)
@given(
    shape=shapes,
    seed=st.integers(0, 2**16),
    causal=st.booleans(),
    window=st.none() | st.integers(1, 6),
    masked=st.booleans(),
)
def test_rows_sum_to_one_or_are_all_zero(shape, seed, causal, window, masked):
    q, k, v, g = tensors(shape, seed)
    mask = (torch.rand(q.shape[2], k.shape[2], generator=g) > 0.4) if masked else None
    w = selfattn.attention(q, k, v, causal=causal, window=window, mask=mask, return_weights=True).weights
    sums = w.sum(-1)
    assert torch.all(((sums - 1).abs() < TOL["float64"]) | (sums == 0))
    assert torch.all(w >= 0)


@settings(max_examples=40, deadline=None)
@given(
    shape=shapes, seed=st.integers(0, 2**16), backend=st.sampled_from(sorted(kernels.BACKENDS)), i=st.integers(0, 11)
)
def test_causality_future_inputs_never_change_the_past(shape, seed, backend, i):
    q, k, v, _ = tensors(shape, seed)
    Lq, Lk = q.shape[2], k.shape[2]
    i = i % Lq
    p = i + Lk - Lq  # the position of query i (bottom-right)
    assume(kernels.BACKENDS[backend].refuse(build_request(q, k, v, causal=True)) is None)
    out = selfattn.attention(q, k, v, causal=True, backend=backend)
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    q2[:, :, i + 1 :] += 5.0
    k2[:, :, max(p + 1, 0) :] -= 3.0
    v2[:, :, max(p + 1, 0) :] *= -7.0
    out2 = selfattn.attention(q2, k2, v2, causal=True, backend=backend)
    assert torch.allclose(out[:, :, : i + 1], out2[:, :, : i + 1], atol=TOL["float64"])


@settings(max_examples=25, deadline=None)
@given(
    d_model=st.integers(1, 40),
    d_k=st.none() | st.integers(1, 20),
    L=st.integers(1, 15),
    batch=st.none() | st.integers(1, 3),
    causal=st.booleans(),
)
def test_self_attention_keeps_the_input_shape(d_model, d_k, L, batch, causal):
    head = SelfAttention(d_model, d_k, causal)
    x = torch.randn(L, d_model) if batch is None else torch.randn(batch, L, d_model)
    assert head(x).shape == x.shape


@settings(max_examples=20, deadline=None)
@given(
    heads=st.sampled_from([(2, 2), (4, 2), (4, 1)]),
    L=st.integers(1, 20),
    split=st.integers(0, 20),
    seed=st.integers(0, 2**16),
)
def test_kv_cache_decoding_equals_full_forward(heads, L, split, seed):
    torch.manual_seed(seed)
    mha = MultiHeadSelfAttention(16, *heads).double().eval()
    x = torch.randn(1, L, 16, dtype=torch.float64)
    split = split % (L + 1)
    with torch.no_grad():
        full = mha(x)
        cache = KVCache()
        parts = [mha(x[:, :split], cache=cache)] if split else []
        parts += [mha(x[:, i : i + 1], cache=cache) for i in range(split, L)]
    assert np.allclose(torch.cat(parts, 1).numpy(), full.numpy(), atol=TOL["float64"])
