"""The contract both fused backends keep ("tiled": FlashAttention-2 in PyTorch ops; "native": the
compiled C++ kernel), each test run for both and for small and default blocks: the feature × dtype
matrix with the lse, awkward lengths and head dims, masks through any strides, NaN-poisoned padding,
keys no query may see never read, non-contiguous inputs, fully masked rows, empty lengths,
gradients against naive autograd, gradcheck, low precision within twice the naive error.

What only one of them does (tiled: block sizes, its Plan; native: building, threads) is tested in
test_tiled.py and test_native.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

import selfattn
from selfattn.kernels.base import Backend
from selfattn.kernels.naive import NaiveBackend
from selfattn.kernels.native import NativeBackend
from selfattn.kernels.tiled import TiledBackend
from selfattn.request import build_request

from ..helpers import forward_with_lse, make_inputs, reference_of
from ..matrix import matrix_case, over_the_matrix
from ..tolerances import RATIO, TOL, assert_close_to_reference, assert_lse_matches, lse_error, max_error


@dataclass(frozen=True)
class Fused:
    """One fused backend under test: how to make it with given blocks, and which blocks to try."""

    name: str
    make: Callable[..., Backend]  # make() has the default blocks, make(block_q, block_k) others
    small: tuple[int, int]  # lengths like 113 span many full, partial and ragged tiles (and tasks)
    smallest: tuple[int, int]  # the smallest blocks it takes, for gradcheck
    nondet_tol: float  # gradcheck: how far two runs of the backward may differ

    def at(self, blocks: str) -> Backend:
        return {"small": lambda: self.make(*self.small), "medium": lambda: self.make(64, 128), "default": self.make}[
            blocks
        ]()


FUSED = {
    "tiled": Fused("tiled", TiledBackend, small=(16, 16), smallest=(16, 16), nondet_tol=0.0),
    # dQ sums the key blocks' parts in the order workers finish them: equal up to rounding (see native.py)
    "native": Fused("native", NativeBackend, small=(16, 32), smallest=(4, 8), nondet_tol=TOL["float64"]),
}

BLOCKS = ["small", "default"]

# (Lq, Lk): 1, 3, 15, 113, 1023 do not divide any block size; Lq ≠ Lk both ways
LENGTHS = [(1, 1), (3, 3), (15, 15), (113, 113), (1023, 1023), (15, 40), (40, 15), (1, 113), (113, 1)]

# (D, Dv): odd and even head dims, Dv ≠ D
HEAD_DIMS = [(1, 1), (3, 2), (7, 5), (64, 63), (80, 79)]

RULES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(window=5),
    "causal-window": dict(causal=True, window=17),
}

LOW_PRECISION = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(params=sorted(FUSED))
def backend(request) -> Fused:
    """Each fused backend in turn; the native kernel is built (once per session) before its tests."""
    if request.param == "native":
        request.getfixturevalue("native_built")
    return FUSED[request.param]


@pytest.mark.parametrize("blocks", BLOCKS)
@over_the_matrix
def test_feature_dtype_matrix_matches_reference(backend, blocks, dtype, feature, shape):
    q, k, v, f = matrix_case(feature, shape, dtype)
    res = forward_with_lse(backend.at(blocks), q, k, v, **f)
    assert res.output.dtype == dtype and res.output.shape == (*q.shape[:3], v.shape[-1])
    ref_out, _, ref_lse = reference_of(q, k, v, **f)
    naive = forward_with_lse(NaiveBackend(), q, k, v, **f)
    assert_close_to_reference(res.output, ref_out, naive.output, dtype=dtype)
    assert_lse_matches(res.lse, ref_lse, RATIO * lse_error(naive.lse, ref_lse) + TOL["float32"])


@pytest.mark.parametrize("dims", HEAD_DIMS, ids=lambda d: f"D{d[0]}-Dv{d[1]}")
@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("lengths", LENGTHS, ids=lambda t: f"{t[0]}x{t[1]}")
def test_forward_and_lse_at_awkward_lengths_and_head_dims(backend, lengths, rule, dims):
    Lq, Lk = lengths
    heads = (1, 1) if Lq * Lk > 10_000 else (4, 2)  # GQA wherever it stays cheap
    q, k, v = make_inputs(1, *heads, Lq, Lk, *dims)
    ref_out, _, ref_lse = reference_of(q, k, v, **RULES[rule])
    for blocks in BLOCKS:
        res = forward_with_lse(backend.at(blocks), q, k, v, **RULES[rule])
        assert_close_to_reference(res.output, ref_out)
        assert_lse_matches(res.lse, ref_lse, TOL["float64"])


def _masks(B, Hq, Lq, Lk):
    g = torch.Generator().manual_seed(4)
    bool_full = torch.rand(B, Hq, Lq, Lk, generator=g) > 0.4
    bool_full[:, :, 2] = False  # a row that sees nothing
    additive = torch.randn(1, Hq, Lq, Lk, generator=g, dtype=torch.float64)
    additive[torch.rand(additive.shape, generator=g) > 0.8] = float("-inf")
    return {
        "bool-full": bool_full,
        "bool-2d": torch.rand(Lq, Lk, generator=g) > 0.5,
        "key-padding": (torch.arange(Lk)[None] < torch.tensor([Lk, Lk // 3])[:, None])[:, None, None, :],
        "per-head-query": torch.rand(1, Hq, Lq, 1, generator=g) > 0.2,
        "additive": additive,
        "additive-keys": torch.randn(Lk, generator=g, dtype=torch.float64),
        "transposed": (torch.rand(Lk, Lq, generator=g) > 0.5).T,  # strides not in the usual order
    }


@pytest.mark.parametrize("mask_kind", sorted(_masks(2, 4, 3, 3)))
@pytest.mark.parametrize("rule", ["plain", "causal-window"])
def test_user_masks_block_by_block_through_strides(backend, mask_kind, rule):
    B, Hq, Hkv, Lq, Lk = 2, 4, 2, 45, 37
    q, k, v = make_inputs(B, Hq, Hkv, Lq, Lk, 8, 8)
    mask = _masks(B, Hq, Lq, Lk)[mask_kind]
    res = forward_with_lse(backend.at("small"), q, k, v, mask=mask, **RULES[rule])
    ref_out, _, ref_lse = reference_of(q, k, v, mask=mask, **RULES[rule])
    assert_close_to_reference(res.output, ref_out)
    assert_lse_matches(res.lse, ref_lse, TOL["float64"])


@pytest.mark.parametrize(
    "kwargs",
    [dict(scale=0.3), dict(softcap=2.0), dict(softcap=0.5, scale=2.0, causal=True)],
    ids=["scale", "softcap", "softcap-scale-causal"],
)
def test_scale_and_softcap(backend, kwargs):
    q, k, v = make_inputs(1, 2, 1, 33, 47, 16, 8)
    res = forward_with_lse(backend.at("small"), q, k, v, **kwargs)
    ref_out, _, ref_lse = reference_of(q, k, v, **kwargs)
    assert_close_to_reference(res.output, ref_out)
    assert_lse_matches(res.lse, ref_lse, TOL["float64"])


@pytest.mark.parametrize("softcap", [None, 5.0], ids=["no-softcap", "softcap"])
@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=str)
@pytest.mark.parametrize("rule", sorted(RULES))
def test_low_precision_within_twice_the_naive_error(backend, dtype, rule, softcap):
    q, k, v = make_inputs(1, 4, 2, 113, 97, 32, 32, dtype=dtype, seed=2)
    kwargs = dict(RULES[rule], softcap=softcap)
    res = forward_with_lse(backend.at("small"), q, k, v, **kwargs)
    naive = forward_with_lse(NaiveBackend(), q, k, v, **kwargs)
    ref_out, _, ref_lse = reference_of(q, k, v, **kwargs)
    assert res.output.dtype == dtype and res.lse.dtype == torch.float32
    assert_close_to_reference(res.output, ref_out, naive.output, dtype=dtype)
    assert lse_error(res.lse, ref_lse) <= RATIO * lse_error(naive.lse, ref_lse) + TOL["float32"]


@pytest.mark.parametrize("kwargs", [dict(causal=True), dict(causal=True, window=300), dict()], ids=str)
def test_default_blocks_past_one_block_through_attention(backend, kwargs):
    # the default blocks: more than one query block, the last ragged, several key blocks (native: many tasks)
    q, k, v = make_inputs(2, 4, 2, 1100, 1100, 16, 16, dtype=torch.float32)
    naive = NaiveBackend().forward(build_request(q, k, v, **kwargs))
    ref_out, _, _ = reference_of(q, k, v, **kwargs)
    assert_close_to_reference(selfattn.attention(q, k, v, backend=backend.name, **kwargs), ref_out, naive.output)


def _poisoned(t: torch.Tensor, pad: int) -> torch.Tensor:
    """t as a view into a bigger buffer whose extra positions and features are NaN."""
    B, H, L, D = t.shape
    buffer = torch.full((B, H, L + pad, D + 3), float("nan"), dtype=t.dtype)
    buffer[:, :, :L, :D] = t
    return buffer[:, :, :L, :D]


@pytest.mark.parametrize("rule", sorted(RULES))
def test_padding_of_partial_blocks_is_never_read(backend, rule):
    q, k, v = make_inputs(1, 4, 2, 113, 71, 8, 8)
    pq, pk, pv = (_poisoned(t, pad=200) for t in (q, k, v))
    mask = torch.rand(113, 71, generator=torch.Generator().manual_seed(0)) > 0.3
    ref_out, _, _ = reference_of(q, k, v, mask=mask, **RULES[rule])
    for blocks in ("small", "medium", "default"):
        res = forward_with_lse(backend.at(blocks), pq, pk, pv, mask=mask, **RULES[rule])
        assert torch.isfinite(res.output).all()
        assert_close_to_reference(res.output, ref_out)
    # and gradients of poisoned views stay finite and right
    pq, pk, pv = (t.requires_grad_() for t in (pq, pk, pv))
    out = forward_with_lse(backend.at("small"), pq, pk, pv, **RULES[rule]).output
    grads = torch.autograd.grad(out.square().sum(), (pq, pk, pv))
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("blocks", BLOCKS)
def test_keys_no_query_may_see_are_never_read(backend, blocks):
    # a window of 8 over 200 positions, decoding the last 16: keys before 200 − 16 − 8 are hidden from
    # every query; NaN there must not reach the output (the kernel never reads them)
    q, k, v = make_inputs(1, 2, 1, 16, 200, 8, 8)
    k_bad, v_bad = k.clone(), v.clone()
    k_bad[:, :, :170] = float("nan")
    v_bad[:, :, :170] = float("nan")
    ref_out, _, _ = reference_of(q, k, v, causal=True, window=8)
    out = forward_with_lse(backend.at(blocks), q, k_bad, v_bad, causal=True, window=8).output
    assert_close_to_reference(out, ref_out)


@pytest.mark.parametrize("hidden_by", ["causal", "bool-mask", "window"])
def test_a_nan_in_a_hidden_key_never_reaches_the_rows_that_cannot_see_it(backend, hidden_by):
    # hidden scores are set to −inf, not summed with it: NaN + (−inf) would be NaN and poison the row
    Lq = Lk = 45
    q, k, v = make_inputs(1, 4, 2, Lq, Lk, 8, 8)
    poisoned = k.clone()
    poisoned[:, :, 30] = float("nan")
    kwargs = {
        "causal": dict(causal=True),
        "window": dict(causal=True, window=5),
        "bool-mask": dict(mask=torch.arange(Lk) != 30),
    }[hidden_by]
    rows = list(range(30)) + (list(range(35, Lq)) if hidden_by != "causal" else [])  # rows that never see key 30
    if hidden_by == "bool-mask":
        rows = list(range(Lq))
    for blocks in BLOCKS:
        got = forward_with_lse(backend.at(blocks), q, poisoned, v, **kwargs)
        want = forward_with_lse(backend.at(blocks), q, k, v, **kwargs)
        assert torch.isfinite(got.output[:, :, rows]).all() and torch.isfinite(got.lse[:, :, rows]).all()
        assert torch.equal(got.output[:, :, rows], want.output[:, :, rows])


def test_non_contiguous_inputs(backend):
    small = backend.at("small")
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in make_inputs(2, 4, 2, 50, 50, 8, 8))
    assert not q.is_contiguous()
    assert_close_to_reference(
        forward_with_lse(small, q, k, v, causal=True).output, reference_of(q, k, v, causal=True)[0]
    )
    q1, k1, v1 = (t[..., ::2] for t in make_inputs(1, 2, 2, 9, 9, 8, 8))  # stride 2 along D
    assert_close_to_reference(forward_with_lse(small, q1, k1, v1).output, reference_of(q1, k1, v1)[0])


def test_fully_masked_rows_give_zeros_lse_minus_inf_and_finite_gradients(backend):
    q, k, v = (t.requires_grad_() for t in make_inputs(1, 2, 1, 40, 20, 8, 8))
    mask = torch.ones(40, 20, dtype=torch.bool)
    mask[[0, 17, 39]] = False
    res = forward_with_lse(
        backend.at("small"), q, k, v, mask=mask, causal=True
    )  # causal, Lq > Lk: rows 0..19 see nothing too
    assert (res.output[:, :, :20] == 0).all() and (res.output[:, :, [39]] == 0).all()
    assert torch.isneginf(res.lse[:, :, :20]).all() and torch.isfinite(res.lse[:, :, 20:39]).all()
    grads = torch.autograd.grad(res.output.sum(), (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)
    assert (grads[0][:, :, :20] == 0).all()


def test_empty_query_and_key_lengths(backend):
    small = backend.at("small")
    q, k, v = make_inputs(1, 2, 2, 0, 5, 4, 4)
    assert forward_with_lse(small, q, k, v, causal=True).output.shape == (1, 2, 0, 4)
    q, k, v = make_inputs(1, 2, 2, 5, 0, 4, 4)
    res = forward_with_lse(small, q, k, v)
    assert (res.output == 0).all() and torch.isneginf(res.lse).all()


GRAD_CASES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "causal-lq<lk": dict(causal=True, lengths=(19, 45)),
    "causal-lq>lk": dict(causal=True, lengths=(45, 19)),
    "window": dict(causal=True, window=9),
    "window-only": dict(window=4),
    "softcap": dict(softcap=1.5, scale=0.7),
    "bool-mask": dict(mask="bool", causal=True),
    "additive-mask": dict(mask="additive"),
}


@pytest.mark.parametrize("blocks", BLOCKS)
@pytest.mark.parametrize("case", sorted(GRAD_CASES))
def test_gradients_match_naive_autograd(backend, case, blocks):
    kwargs = dict(GRAD_CASES[case])
    Lq, Lk = kwargs.pop("lengths", (37, 37))
    q, k, v = make_inputs(2, 4, 2, Lq, Lk, 8, 6, seed=5)
    g = torch.Generator().manual_seed(9)
    if kwargs.get("mask") == "bool":
        kwargs["mask"] = torch.rand(2, 1, Lq, Lk, generator=g) > 0.4
    elif kwargs.get("mask") == "additive":
        kwargs["mask"] = torch.randn(1, 4, Lq, Lk, generator=g, dtype=torch.float64)
    d_out = torch.randn(2, 4, Lq, 6, generator=g, dtype=torch.float64)
    d_lse = torch.randn(2, 4, Lq, generator=g, dtype=torch.float64)

    def grads(fn):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        res = forward_with_lse(fn, *leaves, **kwargs)
        lse = torch.where(torch.isfinite(res.lse), res.lse, 0.0)  # the lse is differentiable too
        loss = (res.output * d_out).sum() + (lse * d_lse).sum()
        return torch.autograd.grad(loss, leaves)

    for got, want in zip(grads(backend.at(blocks)), grads(NaiveBackend()), strict=True):
        assert torch.isfinite(got).all()
        assert max_error(got, want) < TOL["float64"]


@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=str)
def test_low_precision_gradients_within_twice_the_naive_error(backend, dtype):
    q, k, v = make_inputs(1, 4, 1, 70, 70, 16, 16, dtype=dtype, seed=8)
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(
        forward_with_lse(NaiveBackend(), *ref, causal=True, window=30).output.square().sum(), ref
    )

    def grads(fn):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        return torch.autograd.grad(
            forward_with_lse(fn, *leaves, causal=True, window=30).output.float().square().sum(), leaves
        )

    for g, n, w in zip(grads(backend.at("small")), grads(NaiveBackend()), want, strict=True):
        assert g.dtype == dtype
        assert_close_to_reference(g, w, n, dtype=dtype, what="gradient")


@pytest.mark.parametrize("heads", [(2, 1), (4, 2)], ids=lambda h: f"Hq{h[0]}-Hkv{h[1]}")
def test_gradcheck_float64(backend, heads):
    q, k, v = (t.requires_grad_() for t in make_inputs(1, *heads, 13, 17, 4, 3))
    mask = torch.rand(13, 17, generator=torch.Generator().manual_seed(1)) > 0.2

    def f(q, k, v):
        res = forward_with_lse(backend.make(*backend.smallest), q, k, v, causal=True, window=6, mask=mask, softcap=2.0)
        return res.output, torch.where(torch.isfinite(res.lse), res.lse, 0.0)

    assert torch.autograd.gradcheck(f, (q, k, v), nondet_tol=backend.nondet_tol)
