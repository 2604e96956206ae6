"""Backend "native" with bfloat16/float16 inputs, both paths on any CPU: the half GEMM (MKL's
gemm_bf16bf16f32 / gemm_f16f16f32, float32 accumulation; forced with `half_gemm=True` where the CPU lacks
the instructions, when MKL widens to float32 inside) and the fallback that converts to float32
(`half_gemm=False`). Every score feature, forward and backward, against the float64 reference by the
tolerance rule (tests/tolerances.py); `gemm_path` names the path the CPU takes."""

from __future__ import annotations

import pytest
import torch

import selfattn
from selfattn.kernels import native
from selfattn.kernels.native import NativeBackend, gemm_path, has_half_gemm
from selfattn.kernels.native_op import native_forward
from selfattn.request import build_request

from ..helpers import make_inputs, reference_of
from ..test_score_features import FEATURE_NAMES, SHAPES, features
from ..tolerances import assert_close_to_reference, max_error, tolerance

HALF = [torch.bfloat16, torch.float16]
PATHS = {"half-gemm": True, "float32": False}
EXTRA = ["causal", "window-softcap", "mask-bool", "mask-additive"]


@pytest.fixture(scope="module", autouse=True)
def built():
    try:
        native.build()
    except RuntimeError as error:
        pytest.skip(f"the native kernel is unavailable here: {error}")


def _kwargs(feature, B, Hq, Lq, Lk, dtype):
    if feature in FEATURE_NAMES:
        return features(B, Hq, Lq, dtype)[feature]
    g = torch.Generator().manual_seed(5)
    hidden = torch.rand(Lq, Lk, generator=g) < 0.3
    hidden[:, 0] = False  # every row sees a key
    return {
        "causal": dict(causal=True),
        "window-softcap": dict(window=9, causal=True, softcap=4.0),
        "mask-bool": dict(mask=~hidden),
        "mask-additive": dict(mask=torch.where(hidden, -2.0, 0.5).to(dtype)),
    }[feature]


def _case(shape, dtype, feature):
    B, Hq, Hkv, Lq, Lk, D, Dv = shape
    q, k, v = make_inputs(B, Hq, Hkv, Lq, Lk, D, Dv, dtype=dtype)
    return q, k, v, _kwargs(feature, B, Hq, Lq, Lk, dtype)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("feature", FEATURE_NAMES + EXTRA)
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("path", PATHS)
def test_forward_matches_reference_on_both_paths(path, dtype, feature, shape):
    q, k, v, kw = _case(shape, dtype, feature)
    ref_out, _, ref_lse = reference_of(q, k, v, **kw)
    naive = selfattn.attention(q, k, v, backend="naive", return_lse=True, **kw)
    got = NativeBackend(half_gemm=PATHS[path]).forward(build_request(q, k, v, return_lse=True, **kw))
    assert got.output.dtype == dtype and got.lse.dtype == torch.float32
    assert_close_to_reference(got.output, ref_out, naive.output, dtype=dtype)
    assert_close_to_reference(got.lse, ref_lse, naive.lse, dtype=dtype, what="lse")


def _grads(backend, q, k, v, kw, dtype):
    """∂(Σ out² + Σ lse)/∂(q, k, v[, sinks]) through `backend` (a NativeBackend, or "naive"), inputs in `dtype`."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    kw = {name: value.to(dtype) if name in ("alibi", "sinks") else value for name, value in kw.items()}
    if "mask" in kw and kw["mask"].dtype != torch.bool:
        kw["mask"] = kw["mask"].to(dtype)
    if "sinks" in kw:
        kw["sinks"] = kw["sinks"].detach().requires_grad_()
        leaves.append(kw["sinks"])
    if backend == "naive":
        out = selfattn.attention(*leaves[:3], backend="naive", return_lse=True, **kw)
    else:
        out = backend.forward(build_request(*leaves[:3], return_lse=True, **kw))
    return torch.autograd.grad((out.output.float() ** 2).sum() + out.lse.sum(), leaves)


@pytest.mark.parametrize("feature", FEATURE_NAMES + EXTRA)
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("path", PATHS)
def test_backward_matches_float64_on_both_paths(path, dtype, feature):
    """Gradients of q, k, v (and the sinks) against float64 autograd through the naive path, by the rule:
    at most twice the naive path's error in the same dtype (relative to the gradient's size), plus the floor."""
    q, k, v, kw = _case(SHAPES[0], torch.float64, feature)
    want = _grads("naive", q, k, v, kw, torch.float64)
    naive = _grads("naive", q, k, v, kw, dtype)
    got = _grads(NativeBackend(half_gemm=PATHS[path]), q, k, v, kw, dtype)
    for name, g, w, n in zip("q k v sinks".split(), got, want, naive, strict=False):
        assert g.dtype == dtype, name
        scale = max(1.0, float(w.abs().max()))
        err, tol = max_error(g, w) / scale, tolerance(dtype, max_error(n, w) / scale)
        assert err <= tol, f"d{name}: {err:.3g} > {tol:.3g} ({path}, {dtype}, {feature})"


def test_the_half_gemm_path_keeps_bf16_operands_and_rounds_p():
    """Forced, the kernel gets bfloat16 q, k, v (the operator returns bfloat16 out, float32 lse) and rounds P
    to bfloat16 for P·V, so it differs from the float32 path somewhere while both meet the rule."""
    q, k, v = make_inputs(1, 2, 2, 200, 200, 32, dtype=torch.bfloat16)
    r = build_request(q, k, v, causal=True)
    half = NativeBackend(half_gemm=True).forward(r).output
    converted = NativeBackend(half_gemm=False).forward(r).output
    assert half.dtype == converted.dtype == torch.bfloat16
    assert not torch.equal(half, converted)
    out, lse = native_forward(q, k, v, *native.tile_arguments(r, native.BLOCK_Q, native.BLOCK_K))
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert torch.equal(out, half)  # the operator on the bfloat16 tensors themselves is what the backend ran


def test_the_operator_passes_opcheck_with_half_inputs():
    q, k, v = make_inputs(1, 2, 1, 20, 20, 8, dtype=torch.bfloat16)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    sinks = torch.tensor([0.5, -1.0])
    args = (q, k, v, None, 4, 0, 8**-0.5, 0.0, sinks, None, None, None, 16, 16)
    torch.library.opcheck(native_forward, args)


@pytest.mark.parametrize("dtype", HALF)
def test_gemm_path_names_the_path_this_cpu_takes(dtype):
    said = gemm_path(dtype)
    half = "bfloat16" if dtype == torch.bfloat16 else "float16"
    if has_half_gemm(dtype):
        assert said.startswith(f"{half} GEMM, float32 accumulation (MKL")
        assert NativeBackend()._operand_dtype(dtype) == dtype
    else:
        assert said.startswith(f"converted to float32 (this CPU has no {half} GEMM")
        assert NativeBackend()._operand_dtype(dtype) == torch.float32
    assert gemm_path(dtype, half_gemm=False) == "converted to float32 (forced)"
    assert gemm_path(dtype, half_gemm=True).startswith(f"{half} GEMM, float32 accumulation")
    assert NativeBackend(half_gemm=True).gemm_path(dtype) == gemm_path(dtype, True)


def test_gemm_path_of_full_precision_and_bad_arguments():
    assert gemm_path(torch.float32) == "float32 GEMM (BLAS sgemm)"
    assert gemm_path(torch.float64) == "float64 GEMM (BLAS dgemm)"
    assert not has_half_gemm(torch.float32)
    with pytest.raises(ValueError, match="not torch.int64"):
        gemm_path(torch.int64)
    with pytest.raises(TypeError, match="dtype must be a torch.dtype, got str 'bf16'"):
        gemm_path("bf16")
    with pytest.raises(TypeError, match="half_gemm must be None, True or False, got str 'yes'"):
        NativeBackend(half_gemm="yes")
    assert repr(NativeBackend(half_gemm=False)).endswith("half_gemm=False)")
