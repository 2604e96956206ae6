"""What "auto" remembers (`kernels.choices`), native's plain eager path, flex's block masks: each is only a way
to skip work, so each test holds that the answer is the one the full path gives."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from selfattn import attention, kernels
from selfattn.kernels import choices, dispatch, flex, native_op
from selfattn.kernels.base import Backend, Capabilities, Cost, Result
from selfattn.request import build_request
from tests.tolerances import TOL

from ..helpers import make_inputs, reference_of, shaped_request
from ..tolerances import assert_close_to_reference


@pytest.fixture(autouse=True)
def fresh():
    choices.forget()
    yield
    choices.forget()


@pytest.fixture
def weighings(monkeypatch):
    """How many times "auto" weighed the backends (dispatch._reasons with auto=True)."""
    count = [0]
    real = dispatch._reasons

    def counted(request, candidates, *, auto=False):
        count[0] += auto
        return real(request, candidates, auto=auto)

    monkeypatch.setattr(dispatch, "_reasons", counted)
    return count


SHAPES = [
    dict(Lq=1, Lk=512),
    dict(Lq=1, Lk=16384, Hkv=1, causal=True),
    dict(Lq=4096, Lk=4096, causal=True),
    dict(Lq=2048, Lk=2048, causal=True, grad=True),
    dict(Lq=64, Lk=64, return_weights=True),
    dict(Lq=1024, Lk=1024, causal=True, softcap=30.0, dtype=torch.float64),
]


@pytest.mark.parametrize("kwargs", SHAPES)
def test_a_remembered_choice_is_the_one_weighing_gives(kwargs, weighings):
    fresh_choice = kernels.explain(shaped_request(**kwargs))["choice"]
    first = kernels.choose(shaped_request(**kwargs), "auto").name
    again = kernels.choose(shaped_request(**kwargs), "auto").name
    assert first == again == fresh_choice
    assert weighings[0] == 2  # explain and the first call weighed; the second read the choice back


def test_another_form_is_weighed_afresh(weighings):
    kernels.choose(shaped_request(Lq=1, Lk=512), "auto")
    kernels.choose(shaped_request(Lq=1, Lk=513), "auto")
    kernels.choose(shaped_request(Lq=1, Lk=512, causal=True), "auto")
    kernels.choose(shaped_request(Lq=1, Lk=512, dtype=torch.float64), "auto")
    assert weighings[0] == 4


def test_masks_and_segments_are_always_weighed(weighings):
    """Their values decide: SDPA refuses NaN keys under a mask, segments decide the visible pairs."""
    q, k, v = make_inputs(1, 2, 2, 8, 8, 4, 4, dtype=torch.float32)
    mask = torch.ones(8, 8, dtype=torch.bool)
    assert kernels.choose(build_request(q, k, v, mask=mask), "auto").name == "sdpa"
    k[0, 0, 3, 0] = float("nan")
    assert kernels.choose(build_request(q, k, v, mask=mask), "auto").name != "sdpa"
    segments = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1]])
    kernels.choose(build_request(q, k, v, segments=segments), "auto")
    kernels.choose(build_request(q, k, v, segments=segments), "auto")
    assert weighings[0] == 4
    # a window: SDPA would add it as a dense mask, so it looks for NaN keys (`SdpaBackend.form_decides`)
    kernels.choose(shaped_request(Lq=8192, Lk=8192, causal=True, window=256), "auto")
    kernels.choose(shaped_request(Lq=8192, Lk=8192, causal=True, window=256), "auto")
    assert weighings[0] == 6


def test_a_change_of_state_or_cost_is_weighed_afresh(monkeypatch, weighings):
    r = shaped_request(Lq=4096, Lk=4096, causal=True)
    monkeypatch.setattr(kernels.native, "is_built", lambda: False)
    assert kernels.choose(r, "auto").name == "sdpa"
    monkeypatch.setattr(kernels.native, "is_built", lambda: True)
    monkeypatch.setattr(kernels.native, "unavailable_reason", lambda: None)
    assert kernels.choose(r, "auto").name == kernels.explain(r)["choice"] == "native"
    free = Cost(work=lambda req: (1, 1e12, 0.0), read_gbps=1e6, call_seconds=0.0, backward_factor=1.0, busy_factor=1.0)
    monkeypatch.setattr(kernels.BACKENDS["sdpa"], "cost", free)
    assert kernels.choose(r, "auto").name == "sdpa"
    assert weighings[0] == 4  # three choices and the explain, nothing read back


class _Anywhere(Backend):
    """Serves anything that asks for no weights, and costs nothing: "auto" takes it wherever it may."""

    name = "anywhere_choices_test"
    capabilities = Capabilities(returns_weights=False, returns_lse=True, softcap=True, dropout=False, backward=False)
    cost = Cost(work=lambda r: (1, 1e12, 0.0), read_gbps=1e6, call_seconds=0.0, backward_factor=1.0, busy_factor=1.0)

    def forward(self, r):
        return Result(r.q.new_zeros(r.B, r.Hq, r.Lq, r.Dv), None, None)


def test_a_backend_registered_at_run_time_is_weighed_every_time(monkeypatch, weighings):
    """Its reasons may read values (`Backend.form_decides` is False by default), and registering forgets."""
    monkeypatch.setattr(dispatch, "BACKENDS", dict(dispatch.BACKENDS))  # the registration ends with the test
    r = shaped_request(Lq=64, Lk=64, causal=True)
    kernels.choose(r, "auto")
    kernels.choose(r, "auto")
    assert weighings[0] == 1
    kernels.register(_Anywhere())
    assert kernels.choose(r, "auto").name == "anywhere_choices_test"
    assert kernels.choose(r, "auto").name == "anywhere_choices_test"
    assert weighings[0] == 3


def test_a_decoding_loop_gives_what_weighing_every_step_gives(native_built):
    q, k, v = make_inputs(1, 8, 2, 1, 600, 16, 16, dtype=torch.float64)
    for n in (200, 400, 600, 600):
        out = attention(q, k[:, :, :n], v[:, :, :n], causal=True)
        choices.forget()
        assert torch.equal(out, attention(q, k[:, :, :n], v[:, :, :n], causal=True))
        assert_close_to_reference(out, reference_of(q, k[:, :, :n], v[:, :, :n], causal=True)[0])


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def test_native_plain_eager_path_equals_the_operator(native_built):
    """No grad, no transform: the kernel is called directly (no Function, no operator layers), with the same
    answer; a dispatch mode, a gradient or a transform still goes through the operator."""
    q, k, v = make_inputs(2, 4, 2, 37, 113, 16, 16, dtype=torch.float32)
    args = native_op_args(q, k, v)
    assert native_op._plain_eager(q, k, v, args)
    with torch.no_grad():
        direct = native_op.native_attention(q, k, v, *args)
        through = native_op.native_forward(q, k, v, *args)
    assert all(torch.equal(a, b) for a, b in zip(direct, through, strict=True))
    with _Ops() as mode:
        native_op.native_attention(q, k, v, *args)
    assert any("native_forward" in name for name in mode.seen)
    grad_q = q.clone().requires_grad_()
    assert not native_op._plain_eager(grad_q, k, v, args)
    assert native_op._plain_eager(grad_q.detach(), k, v, args)
    one_item = lambda qi, ki, vi: native_op.native_attention(qi[None], ki[None], vi[None], *args)[0][0]  # noqa: E731
    assert torch.allclose(
        torch.func.vmap(one_item)(q, k, v), direct[0], atol=TOL["float32_same_model"]
    )  # under vmap: the operator


def native_op_args(q, k, v):
    r = build_request(q, k, v, causal=True)
    backend = kernels.BACKENDS["native"]
    return tuple(kernels.native.tile_arguments(r, *backend.blocks(r)))


def test_flex_builds_a_block_mask_once_per_shape_and_rule(monkeypatch):
    made = []
    real = flex._block_mask

    def counted(r, create, mask_mod, batch, heads):
        def create_counted(*args, **kwargs):
            made.append(args[3:5])
            return create(*args, **kwargs)

        return real(r, create_counted, mask_mod, batch, heads)

    monkeypatch.setattr(flex, "_block_mask", counted)
    monkeypatch.setattr(flex, "_COMPILES", flex._Compiles())
    if flex.FlexBackend().not_supported_reasons(shaped_request(Lq=128, Lk=128, causal=True)):
        pytest.skip("flex cannot serve here")
    q, k, v = make_inputs(1, 2, 2, 128, 128, 16, 16, dtype=torch.float32)
    with torch.no_grad():
        outs = [attention(q, k, v, causal=True, window=w, backend="flex") for w in (None, None, 32, 32)]
    assert len(made) == 2  # causal, then the window
    for out, w in zip(outs, (None, None, 32, 32), strict=True):
        assert_close_to_reference(out, reference_of(q, k, v, causal=True, window=w)[0])
