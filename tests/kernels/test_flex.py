"""Backend "flex" (FlexAttention, compiled): against the float64 reference where it serves, its refusals
named, and nothing compiled before the first call. Every compile costs seconds, so the CPU cases are few
and each covers several features at once; the GPU cases are marked `gpu` and skip without CUDA."""

import pytest
import torch

from selfattn.functional import build_request
from selfattn.kernels import flex
from selfattn.kernels.flex import MIN_CPU_LENGTH, FlexBackend
from selfattn.kernels.naive import NaiveBackend

from ..helpers import make_inputs, reference_of
from ..tolerances import TOL, assert_close_to_reference

FLEX = FlexBackend()


def cpu_compiles():
    r = build_request(*make_inputs(1, 1, 1, 128, 128, 16, 16, dtype=torch.float32))
    if FLEX.not_supported_reasons(r):
        pytest.skip("flex cannot run on this CPU: " + FLEX.refuse(r))


def _masks(Lq, Lk):
    g = torch.Generator().manual_seed(3)
    bool_mask = torch.rand(2, 1, Lq, Lk, generator=g) > 0.3
    bool_mask[:, :, 5] = False  # a row that sees nothing
    additive = torch.randn(1, 4, Lq, Lk, generator=g)
    return {"bool": bool_mask, "additive": additive}


CPU_CASES = {
    "causal-lq<lk-gqa": dict(shape=(1, 4, 2, 130, 200, 16, 16), causal=True),
    "window-softcap": dict(shape=(1, 2, 2, 200, 200, 16, 8), causal=True, window=40, softcap=3.0),
    "bool-mask-causal": dict(shape=(2, 4, 2, 150, 150, 16, 16), causal=True, mask="bool"),
    "additive-mask": dict(shape=(2, 4, 4, 150, 150, 16, 16), mask="additive"),
}


@pytest.mark.parametrize("case", sorted(CPU_CASES))
def test_cpu_forward_matches_reference(case):
    cpu_compiles()
    kwargs = dict(CPU_CASES[case])
    shape = kwargs.pop("shape")
    q, k, v = make_inputs(*shape, dtype=torch.float32)
    if "mask" in kwargs:
        kwargs["mask"] = _masks(shape[3], shape[4])[kwargs["mask"]]
    r = build_request(q, k, v, **kwargs)
    assert FLEX.refuse(r) is None
    assert not flex.is_warm(r)
    out = FLEX.forward(r).output
    assert flex.is_warm(r) and flex.compile_seconds[flex.signature(r)] > 0
    ref_out, _, _ = reference_of(q, k, v, **kwargs)
    naive = NaiveBackend().forward(r).output
    assert_close_to_reference(out, ref_out, naive)
    if kwargs.get("mask") is not None and kwargs["mask"].dtype == torch.bool:
        assert (out[:, :, 5] == 0).all()  # the row that sees nothing: 0, not NaN


def test_cpu_refusals_name_every_reason():
    q, k, v = (t.requires_grad_() for t in make_inputs(1, 2, 2, 16, 16, 8, 8, dtype=torch.float32))
    reasons = FLEX.not_supported_reasons(build_request(q, k, v, return_lse=True, return_weights=True))
    text = " | ".join(reasons)
    for part in ("weights", "log-sum-exp", "no backward on the CPU", f"Lq and Lk >= {MIN_CPU_LENGTH}"):
        assert part in text
    r = build_request(*make_inputs(1, 1, 1, 4, 4, 8, 8, dtype=torch.float32), dropout_p=0.1)
    assert FLEX.refuse(r).startswith("it has no dropout")


def test_asking_compiles_nothing():
    r = build_request(*make_inputs(1, 1, 1, 256, 256, 8, 8, seed=4, dtype=torch.float32), causal=True, scale=0.123)
    before = dict(flex._COMPILED)
    FLEX.not_supported_reasons(r)
    assert not flex.is_warm(r) and flex._COMPILED == before


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("kwargs", [dict(causal=True), dict(causal=True, window=64, softcap=5.0)], ids=str)
def test_gpu_forward_lse_and_backward(kwargs):
    q, k, v = (t.cuda().requires_grad_() for t in make_inputs(1, 4, 2, 300, 300, 64, 64, dtype=torch.float32))
    r = build_request(q, k, v, return_lse=True, **kwargs)
    assert FLEX.refuse(r) is None
    res = FLEX.forward(r)
    ref_out, _, ref_lse = reference_of(q.cpu(), k.cpu(), v.cpu(), **kwargs)
    assert_close_to_reference(res.output.cpu(), ref_out, dtype=torch.float32)
    assert torch.allclose(res.lse.cpu().double(), torch.as_tensor(ref_lse), atol=TOL["gpu_float32_lse"])
    grads = torch.autograd.grad(res.output.square().sum(), (q, k, v))
    leaves = [t.detach().cpu().double().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(NaiveBackend().forward(build_request(*leaves, **kwargs)).output.square().sum(), leaves)
    for g, w in zip(grads, want, strict=True):
        assert (g.cpu().double() - w).abs().max() < TOL["gpu_float32_grad"]
