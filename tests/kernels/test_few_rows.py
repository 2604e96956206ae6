"""The native kernel's own loops for a GEMM of a few rows (csrc/few_rows.h `few_rows_abt` / `few_rows_ab`:
float32, or bfloat16 widened in registers, with AVX2), which a decoding step's q·kᵀ and P·V take instead of BLAS,
MKL's bfloat16 GEMM or the bfloat16 tiles (whose packing of K and V a few rows do not pay back). A GEMM of at most
FEW_ROWS rows takes them, one of more goes to BLAS or the tiles: both sides of the limit (query rows, and GQA heads
stacked), head sizes and key counts that leave every remainder (D and Dv not multiples of 8 or 64, keys not of 4 nor
of the 64-key block), K and V rows further apart than D, forward and backward, float32 and bfloat16, against the
float64 reference by the tolerance rule."""

from __future__ import annotations

import re

import pytest
import torch

from selfattn.kernels import native_build
from selfattn.kernels.naive import NaiveBackend
from selfattn.kernels.native import FEW_ROWS, NativeBackend
from selfattn.request import build_request

from ..helpers import forward_with_lse, make_inputs, reference_of
from ..tolerances import FLOOR, RATIO, TOL, assert_close_to_reference, lse_error, max_error

VECTOR = torch.backends.cpu.get_cpu_capability() in native_build.ARCH_FLAGS
"""Whether the kernel is built with AVX2 here (the loops exist only then; elsewhere every GEMM is BLAS's)."""

FEATURES = {
    "plain": lambda Lq, Lk: {},
    "causal": lambda Lq, Lk: dict(causal=True),
    "softcap": lambda Lq, Lk: dict(softcap=2.0, scale=1.5),
    "additive-mask": lambda Lq, Lk: dict(mask=torch.randn(1, 1, Lq, Lk, generator=torch.Generator().manual_seed(1))),
}


@pytest.fixture(autouse=True)
def built(native_built):
    return native_built


DTYPES = [torch.float32, torch.bfloat16]
"""bfloat16 stays bfloat16 in the loops where the CPU has a bfloat16 GEMM (`NativeBackend._operand_dtype`), and is
converted to float32 before them elsewhere: the rule holds either way."""


def _check(q, k, v, backend=None, **kwargs):
    backend = backend or NativeBackend()
    if "mask" in kwargs and kwargs["mask"].dtype != torch.bool:
        kwargs["mask"] = kwargs["mask"].to(q.dtype)
    res = forward_with_lse(backend, q, k, v, **kwargs)
    naive = forward_with_lse(NaiveBackend(), q, k, v, **kwargs)
    ref_out, _, ref_lse = reference_of(q, k, v, **kwargs)
    assert res.output.dtype == q.dtype
    assert_close_to_reference(res.output, ref_out, naive.output)
    assert lse_error(res.lse, ref_lse) <= RATIO * lse_error(naive.lse, ref_lse) + TOL["float32"]


@pytest.mark.parametrize("feature", sorted(FEATURES))
@pytest.mark.parametrize("Lk", [1, 5, 67, 1031])
@pytest.mark.parametrize("D, Dv", [(1, 3), (7, 8), (33, 40), (64, 64), (100, 97)])
@pytest.mark.parametrize("Lq", [1, 3, FEW_ROWS, FEW_ROWS + 1])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_few_query_rows_and_one_more_than_the_loops_take_match_the_reference(dtype, Lq, D, Dv, Lk, feature):
    q, k, v = make_inputs(2, 3, 3, Lq, Lk, D, Dv, dtype=dtype, seed=D + Lk)
    backend = NativeBackend()
    r = build_request(q, k, v)
    assert (backend.few_rows(r) == Lq) == (VECTOR and Lq <= FEW_ROWS)
    assert ("own AVX2 loops" in backend.compute_path(r)) == (backend.few_rows(r) is not None)
    _check(q, k, v, backend, **FEATURES[feature](Lq, Lk))


@pytest.mark.parametrize("split", [None, 64])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_key_and_value_rows_further_apart_than_their_width(dtype, split):
    q, k, v = make_inputs(1, 4, 2, 2, 301, 13, 21, dtype=dtype, seed=4)
    wide_k, wide_v = torch.zeros(1, 2, 301, 13 + 6, dtype=dtype), torch.zeros(1, 2, 301, 21 + 11, dtype=dtype)
    wide_k[..., :13], wide_v[..., :21] = k, v
    k_view, v_view = wide_k[..., :13], wide_v[..., :21]
    assert k_view.stride(2) == 19 and v_view.stride(2) == 32
    _check(q, k_view, v_view, NativeBackend(split_keys=split), causal=True)


@pytest.mark.parametrize("Hq, Lq", [(8, 1), (4, 2), (8, 2), (9, 1)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gqa_heads_stacked_into_a_few_rows_and_beyond(dtype, Hq, Lq):
    """8 × 1 and 4 × 2 stacked rows take the loops; 8 × 2 = 16 and 9 × 1 go to BLAS (or the bfloat16 tiles)."""
    q, k, v = make_inputs(1, Hq, 1, Lq, 2053, 64, 64, dtype=dtype, seed=Hq)
    backend = NativeBackend()
    r = build_request(q, k, v, causal=True)
    assert backend.stacks(r)
    assert (backend.few_rows(r) is not None) == (VECTOR and Hq * Lq <= FEW_ROWS)
    _check(q, k, v, backend, causal=True)


@pytest.mark.parametrize("Lq", [3, FEW_ROWS + 1])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gradients_through_the_few_row_loops(dtype, Lq):
    """The backward's dP = dO·Vᵀ and dQ += dS·K of a query block of a few rows take the loops too."""
    q64, k64, v64 = make_inputs(1, 2, 1, Lq, 150, 24, 20, seed=Lq)
    grads = {}
    for name, backend, as_dtype in (
        ("native", NativeBackend(), dtype),
        ("naive", NaiveBackend(), dtype),
        ("reference", NaiveBackend(), torch.float64),
    ):
        q, k, v = (t.to(as_dtype).requires_grad_() for t in (q64, k64, v64))
        out = backend.forward(build_request(q, k, v, causal=True, softcap=3.0)).output
        weights = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).reshape(out.shape)
        grads[name] = torch.autograd.grad((out.double() * weights).sum(), (q, k, v))
    for got, naive, want in zip(grads["native"], grads["naive"], grads["reference"], strict=True):
        scale = max(1.0, float(want.abs().max()))
        assert max_error(got, want) / scale <= RATIO * max_error(naive, want) / scale + FLOOR[dtype]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_nan_key_or_value_reaches_its_rows(dtype):
    q, k, v = make_inputs(1, 2, 1, 2, 130, 16, 16, dtype=dtype)
    for name, j in (("k", 0), ("k", 129), ("v", 67)):
        bad_k, bad_v = k.clone(), v.clone()
        (bad_k if name == "k" else bad_v)[:, :, j, 3] = float("nan")
        out = forward_with_lse(NativeBackend(), q, bad_k, bad_v).output
        poisoned = out if name == "k" else out[..., 3]  # a NaN score poisons its row; a NaN value its dimension
        assert torch.isnan(poisoned).all() and (name == "k" or torch.isfinite(out[..., :3]).all()), (name, j)


def test_the_kernel_agrees_on_the_row_limit():
    assert re.search(rf"constexpr int64_t FEW_ROWS = {FEW_ROWS};", native_build.source_text())
