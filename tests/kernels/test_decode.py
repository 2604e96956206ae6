"""Split-K (flash-decoding) in the native kernel: a query of a few rows over a long KV cache, its keys cut into
chunks (one task each) merged by their lse. Every score feature on that path, forced on (small chunks, so that
even 113 keys split) and off (`split_keys=None`: one task per kv head), at awkward key lengths, against the
float64 reference by the tolerance rule (tests/tolerances.py), lse included; NaN-poisoned padding and hidden
keys never read; the result independent of the thread count."""

from __future__ import annotations

import re

import pytest
import torch

from selfattn.kernels import native_build
from selfattn.kernels.naive import NaiveBackend
from selfattn.kernels.native import SPLIT_KEYS, SPLIT_ROWS, STACK_ROWS, NativeBackend
from selfattn.request import build_request

from ..helpers import forward_with_lse, make_inputs, reference_of
from ..tolerances import RATIO, TOL, assert_close_to_reference, assert_lse_matches, lse_error
from .test_fused import _poisoned

SPLIT = {"on": NativeBackend(split_keys=7), "default": NativeBackend(), "off": NativeBackend(split_keys=None)}
"""Split-K forced on (7-key chunks: ragged everywhere), as auto's native runs it, and forced off."""

KEY_LENGTHS = [1, 3, 113, 1023, 16385]


@pytest.fixture(autouse=True)
def built(native_built):
    return native_built


def _features(Hq: int, Lq: int, Lk: int, dtype: torch.dtype) -> dict[str, dict]:
    g = torch.Generator().manual_seed(3)
    bool_mask = torch.rand(2, 1, Lq, Lk, generator=g) > 0.3
    bool_mask[:, :, 0] = False  # a row that sees nothing
    additive = torch.randn(1, Hq, Lq, Lk, generator=g, dtype=torch.float64)
    additive[torch.rand(additive.shape, generator=g) > 0.8] = float("-inf")
    return {
        "plain": dict(),
        "causal": dict(causal=True),  # bottom-right: the last query sees every key
        "window": dict(causal=True, window=5),
        "two-sided": dict(window=(40, 3)),
        "softcap": dict(softcap=2.0, scale=1.5),
        "sinks": dict(causal=True, sinks=torch.randn(Hq, generator=g, dtype=torch.float64).to(dtype)),
        "alibi": dict(causal=True, alibi=(torch.rand(Hq, generator=g, dtype=torch.float64) * 0.1).to(dtype)),
        "bool-mask": dict(mask=bool_mask),
        "additive-mask": dict(mask=additive.to(dtype), causal=True),
        "key-padding": dict(mask=(torch.arange(Lk)[None] < torch.tensor([Lk, (Lk + 1) // 2])[:, None])[:, None, None]),
    }


FEATURE_NAMES = sorted(_features(4, 3, 3, torch.float64))


@pytest.mark.parametrize("split", sorted(SPLIT))
@pytest.mark.parametrize("feature", FEATURE_NAMES)
@pytest.mark.parametrize("Lk", KEY_LENGTHS)
@pytest.mark.parametrize("Lq", [1, 3])
def test_decode_matches_reference_split_on_and_off(Lq, Lk, feature, split):
    dtype = torch.float64
    q, k, v = make_inputs(2, 4, 2, Lq, Lk, 16, 12, dtype=dtype)  # GQA: two query heads per kv head
    kwargs = _features(4, Lq, Lk, dtype)[feature]
    backend = SPLIT[split]
    res = forward_with_lse(backend, q, k, v, **kwargs)
    request = build_request(q, k, v, **kwargs)
    assert backend.splits(request) == (split != "off" and Lk > backend.chunk(request))
    ref_out, _, ref_lse = reference_of(q, k, v, **kwargs)
    assert_close_to_reference(res.output, ref_out)
    assert_lse_matches(res.lse, ref_lse, TOL["float64"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("split", ["on", "off"])
@pytest.mark.parametrize("feature", ["causal", "softcap", "sinks", "alibi"])
def test_low_precision_decode_within_twice_the_naive_error(feature, split, dtype):
    q, k, v = make_inputs(1, 8, 2, 2, 4099, 64, 64, dtype=dtype, seed=5)
    kwargs = _features(8, 2, 4099, dtype)[feature]
    kwargs = {name: t.float() if isinstance(t, torch.Tensor) and name != "mask" else t for name, t in kwargs.items()}
    res = forward_with_lse(SPLIT[split], q, k, v, **kwargs)
    naive = forward_with_lse(NaiveBackend(), q, k, v, **kwargs)
    ref_out, _, ref_lse = reference_of(q, k, v, **kwargs)
    assert_close_to_reference(res.output, ref_out, naive.output, dtype=dtype)
    assert lse_error(res.lse, ref_lse) <= RATIO * lse_error(naive.lse, ref_lse) + TOL["float32"]


@pytest.mark.parametrize("split", ["on", "off"])
def test_segments_split_along_the_keys(split):
    # segments need Lq = Lk: a few rows, each in its own packed sequence, chunks of 2 keys when on
    q, k, v = make_inputs(2, 4, 1, 7, 7, 8, 8)
    segments = torch.tensor([[0, 0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 0, 0, 2]])  # the second: a segment in two runs
    backend = NativeBackend(split_keys=2) if split == "on" else SPLIT["off"]
    res = forward_with_lse(backend, q, k, v, causal=True, segments=segments)
    ref_out, _, ref_lse = reference_of(q, k, v, causal=True, segments=segments)
    assert_close_to_reference(res.output, ref_out)
    assert_lse_matches(res.lse, ref_lse, TOL["float64"])


@pytest.mark.parametrize("split", ["on", "off"])
def test_poisoned_padding_and_keys_outside_the_window_are_never_read(split):
    q, k, v = make_inputs(1, 4, 2, 3, 1023, 8, 8)
    pq, pk, pv = (_poisoned(t, pad=300) for t in (q, k, v))
    k_bad, v_bad = k.clone(), v.clone()  # keys before 1023 − 100 − 2: hidden from every query by the window
    k_bad[:, :, :900] = float("nan")
    v_bad[:, :, :900] = float("nan")
    k_bad, v_bad = _poisoned(k_bad, pad=300), _poisoned(v_bad, pad=300)
    backend = SPLIT[split]
    for kwargs, keys in ((dict(causal=True), (pk, pv)), (dict(causal=True, window=100), (k_bad, v_bad))):
        res = forward_with_lse(backend, pq, *keys, **kwargs)
        assert torch.isfinite(res.output).all() and torch.isfinite(res.lse).all()
        assert_close_to_reference(res.output, reference_of(q, k, v, **kwargs)[0])


def test_a_nan_key_makes_its_rows_nan_whichever_chunk_holds_it():
    q, k, v = make_inputs(1, 2, 1, 1, 113, 8, 8)
    for j in (0, 50, 112):
        bad = k.clone()
        bad[:, :, j] = float("nan")
        for backend in (SPLIT["on"], SPLIT["off"]):
            res = forward_with_lse(backend, q, bad, v)
            assert torch.isnan(res.output).all() and torch.isnan(res.lse).all()


def test_split_forward_does_not_depend_on_the_thread_count():
    q, k, v = make_inputs(1, 8, 1, 1, 5000, 16, 16, dtype=torch.float32)
    before = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            outs.append(forward_with_lse(NativeBackend(split_keys=512), q, k, v, causal=True).output)
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(outs[0], o) for o in outs[1:])  # chunks merged in key order, not finishing order


def test_gradients_of_a_split_decode_step():
    q, k, v = (t.requires_grad_() for t in make_inputs(1, 4, 2, 2, 300, 8, 8))
    weights = torch.linspace(-1, 1, 4 * 2 * 8, dtype=torch.float64).reshape(1, 4, 2, 8)
    grads = {}
    for name, backend in (("on", NativeBackend(split_keys=32)), ("naive", NaiveBackend())):
        out = backend.forward(build_request(q, k, v, causal=True, sinks=torch.zeros(4, dtype=torch.float64))).output
        grads[name] = torch.autograd.grad((out * weights).sum(), (q, k, v))
    for got, want in zip(grads["on"], grads["naive"], strict=True):
        assert (got - want).abs().max() <= TOL["float64_grad"]


def test_which_requests_split_and_the_kernel_agrees_on_the_row_limit():
    source = native_build.source_text()
    assert re.search(rf"constexpr int64_t SPLIT_ROWS = {SPLIT_ROWS};", source)
    default = NativeBackend()
    one = torch.zeros(())
    for Lq, Lk, want in ((1, SPLIT_KEYS + 1, True), (SPLIT_ROWS, 16384, True), (SPLIT_ROWS + 1, 16384, False)):
        r = build_request(one.expand(1, 8, Lq, 64), one.expand(1, 8, Lk, 64), one.expand(1, 8, Lk, 64))
        assert default.splits(r) is want
        assert ("split-K" in default.compute_path(r)) is want
    assert not default.splits(build_request(*(one.expand(1, 8, 1, 64),) * 3))
    # few kv heads: chunks cut so that the batch gets SPLIT_TASKS tasks (a count of tasks, not of threads)
    for B, Hkv, Lk, want in ((1, 1, 512, 256), (1, 1, 4096, 512), (1, 2, 4096, 1024), (1, 8, 4096, SPLIT_KEYS)):
        r = build_request(one.expand(B, 8, 1, 64), one.expand(B, Hkv, Lk, 64), one.expand(B, Hkv, Lk, 64))
        assert default.chunk(r) == want and default.splits(r)
        assert f"chunks of {want} keys" in default.compute_path(r)
    assert NativeBackend(split_keys=None).chunk(r) is None
    with pytest.raises(ValueError, match="split_keys"):
        NativeBackend(split_keys=0)


@pytest.mark.parametrize("feature", ["causal", "window", "alibi", "sinks", "additive-mask"])
@pytest.mark.parametrize("Hq, Lq", [(8, 1), (8, 8), (32, 2), (64, 1), (65, 1), (24, 3)])
def test_gqa_heads_stacked_into_one_gemm_match_the_reference(Hq, Lq, feature):
    """The G query heads of a kv head as one GEMM per key tile (G·Lq <= STACK_ROWS; above it head by head:
    Hq=65 over one kv head, 24×3 = 72 rows), split-K and not, against float64 by the tolerance rule."""
    Hkv = 1 if Hq in (65, 64) else Hq // 8
    q, k, v = make_inputs(1, Hq, Hkv, Lq, 1031, 16, 8, dtype=torch.float64, seed=Hq)
    kwargs = _features(Hq, Lq, 1031, torch.float64)[feature]
    r = build_request(q, k, v, **kwargs)
    default = SPLIT["default"]
    assert default.stacks(r) == (Hq // Hkv * Lq <= STACK_ROWS)
    assert ("stacked into one GEMM" in default.compute_path(r)) == default.stacks(r)
    ref_out, _, ref_lse = reference_of(q, k, v, **kwargs)
    for backend in (default, SPLIT["on"], SPLIT["off"]):
        res = forward_with_lse(backend, q, k, v, **kwargs)
        assert_close_to_reference(res.output, ref_out)
        assert_lse_matches(res.lse, ref_lse, TOL["float64"])


def test_the_kernel_agrees_on_the_stack_limit():
    assert re.search(rf"constexpr int64_t STACK_ROWS = {STACK_ROWS};", native_build.source_text())
    one = torch.zeros(())
    r = build_request(one.expand(1, 8, 1, 64), one.expand(1, 8, 16, 64), one.expand(1, 8, 16, 64))
    assert not NativeBackend().stacks(r)  # no GQA: nothing to stack
