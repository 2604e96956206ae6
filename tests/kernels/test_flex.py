"""Backend "flex" (FlexAttention, compiled): against the float64 reference where it serves, its refusals
named, and nothing compiled before the first call. Every compile costs seconds, so the CPU cases are few
and each covers several features at once; the GPU cases are marked `gpu` and skip without CUDA."""

import math

import pytest
import torch

import selfattn
from selfattn import kernels
from selfattn.kernels import flex
from selfattn.kernels.flex import MIN_CPU_LENGTH, FlexBackend
from selfattn.kernels.naive import NaiveBackend
from selfattn.request import build_request

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


@pytest.mark.parametrize(
    "kwargs",
    [{}, dict(causal=True), dict(alibi=torch.full((2,), 0.25, dtype=torch.float64)), dict(segments="segments")],
)
def test_float64_on_the_cpu_is_refused_by_name(kwargs):
    """Issue 28: float64 reached an Inductor LoweringException after a compile attempt; now the call refuses
    it by name (the same sentence for every rule), before compiling anything."""
    q, k, v = make_inputs(1, 2, 2, 128, 128, 8, 8, dtype=torch.float64)
    if kwargs.get("segments") == "segments":
        kwargs = dict(segments=torch.arange(128).div(50, rounding_mode="floor")[None])
    before = dict(flex.compile_seconds)
    with pytest.raises(ValueError, match="backend 'flex' cannot serve this request: .*does not lower float64"):
        selfattn.attention(q, k, v, backend="flex", **kwargs)
    assert flex.compile_seconds == before


def test_asking_compiles_nothing():
    r = build_request(*make_inputs(1, 1, 1, 256, 256, 8, 8, seed=4, dtype=torch.float32), causal=True, scale=0.123)
    before = dict(flex.compile_seconds)
    FLEX.not_supported_reasons(r)
    assert not flex.is_warm(r) and flex.compile_seconds == before


@pytest.fixture
def eager_flex(monkeypatch):
    """flex's bookkeeping with FlexAttention run eagerly in place of its compiled kernel (no 13 s compile):
    a fresh, empty set of warm signatures, restored afterwards."""
    from torch.nn.attention.flex_attention import flex_attention

    cpu_compiles()
    fresh = flex._Compiles(function=flex_attention)
    monkeypatch.setattr(flex, "_COMPILES", fresh)
    monkeypatch.setattr(flex, "compile_seconds", fresh.seconds)
    return flex_attention


EAGER = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


@EAGER
def test_a_transposed_q_is_another_signature_and_auto_does_not_wait_on_it(eager_flex):
    """Issue 18: the warm check ignored strides, so a transposed q made auto recompile flex for 3.8 s."""
    q, k, v = make_inputs(1, 2, 2, 128, 128, 16, 16, dtype=torch.float32)
    r = build_request(q, k, v, causal=True)
    FLEX.forward(r)
    assert flex.is_warm(r)
    qt = q.transpose(2, 3).contiguous().transpose(2, 3)  # the same values, another layout
    rt = build_request(qt, k, v, causal=True)
    assert torch.equal(qt, q) and not flex.is_warm(rt)
    reasons = kernels.explain(rt)["backends"]["flex"]["reasons"]
    assert any("not compiled for this signature" in why for why in reasons)
    assert kernels.choose(rt, "auto").name != "flex"


@EAGER
def test_warm_signatures_are_a_bounded_lru_and_each_compile_is_a_notice(eager_flex, monkeypatch):
    monkeypatch.setattr(flex, "WARM_SIGNATURES", 2)
    heard = []
    requests = [build_request(*make_inputs(1, 1, 1, 128, L, 8, 8, dtype=torch.float32)) for L in (128, 129, 130)]
    with kernels.notices(heard.append):
        FLEX.forward(requests[0])
        FLEX.forward(requests[1])
        FLEX.forward(requests[0])  # used again: now the most recent
        FLEX.forward(requests[2])  # the third: the least recently used (requests[1]) is forgotten
    assert [flex.is_warm(r) for r in requests] == [True, False, True] and len(flex.compile_seconds) == 2
    assert [(n.source, n.stage) for n in heard] == [("flex", "start"), ("flex", "done")] * 3
    assert str(heard[0]).startswith("selfattn: compiling FlexAttention for q (1, 1, 128, 8) float32")
    assert str(heard[1]).endswith("s (cached for this signature)") and heard[1].seconds >= 0
    with kernels.notices(heard.append):
        FLEX.forward(requests[0])  # warm: nothing to say
    assert len(heard) == 6


def test_mods_are_the_score_rule():
    """flex's score_mod / mask_mod, evaluated position by position, give the rule's logits."""
    q, k, v = make_inputs(1, 2, 1, 6, 9, 4, 4, dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    mask = torch.randn(1, 2, 6, 9, generator=g, dtype=torch.float64)
    mask[0, 1, 2, 3] = -math.inf
    r = build_request(q, k, v, causal=True, window=4, softcap=2.0, mask=mask)
    score_mod, mask_mod, _ = flex.mods(r)
    raw = torch.einsum("bhqd,bkd->bhqk", q, k[:, 0])
    want = r.rule.logits(raw, None, None, 6, 9)
    got = torch.full_like(want, -math.inf)
    for h in range(2):
        for i in range(6):
            for j in range(9):
                index = (torch.tensor(0), torch.tensor(h), torch.tensor(i), torch.tensor(j))
                if mask_mod(*index):
                    got[0, h, i, j] = score_mod(raw[0, h, i, j] * r.scale, *index)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    assert torch.allclose(got, want, atol=TOL["float64"], rtol=0)


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
