"""Random hostile arguments to `attention`: the answer is either the float64 reference or a
TypeError/ValueError naming the problem — never NaN, a crash from deep inside, or a wrong number.

Issue 11's rule for the library's edge, as a property: whatever a user passes (zero-sized
dimensions, non-finite or absurd scales, masks with ±inf or NaN, wrong types, windows of any
size), each backend either refuses at the edge or agrees with `selfattn.reference`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import selfattn

from .helpers import make_inputs, reference_of
from .tolerances import FLOOR, TOL

HOSTILE_NUMBERS = st.one_of(
    st.sampled_from(
        [
            0,
            -1,
            0.0,
            -0.0,
            -1e-300,
            1e-300,
            1e300,
            -1e300,
            math.inf,
            -math.inf,
            math.nan,
            True,
            False,
            10**30,
            1e6,
            1e7,
            0.5,
            2,
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.none(),
)
WINDOWS = st.one_of(
    st.none(), st.integers(1, 12), st.sampled_from([0, -3, 1, 2, 10**30, True, 2.0, "4"]), st.integers(-5, 50)
)
SCALES = st.one_of(st.none(), st.floats(-10, 10), st.sampled_from([1e5, 1e6, -1e6]), HOSTILE_NUMBERS)
SOFTCAPS = st.one_of(st.none(), st.none(), st.floats(0.05, 50), HOSTILE_NUMBERS)
BACKENDS = st.sampled_from(["auto", "naive", "sdpa", "tiled", "native"])


@st.composite
def masks(draw, B, Hq, Lq, Lk):
    kind = draw(st.sampled_from(["none", "none", "bool", "additive", "1d", "wrong_shape", "int", "list"]))
    g = torch.Generator().manual_seed(draw(st.integers(0, 1000)))
    if kind == "none":
        return None
    if kind == "bool":
        return torch.rand(B, 1, Lq, Lk, generator=g) > draw(st.sampled_from([0.0, 0.5, 1.0]))
    if kind == "additive":
        m = torch.randn(1, Hq, Lq, Lk, generator=g, dtype=torch.float64)
        special = draw(st.sampled_from([None, -math.inf, math.inf, math.nan, -1e300, 1e300]))
        if special is not None and m.numel():
            m.view(-1)[0] = special
        return m
    if kind == "1d":
        return torch.rand(Lk, generator=g) > 0.3
    if kind == "wrong_shape":
        return torch.ones(Lq + 1, Lk + 2, dtype=torch.bool)
    if kind == "int":
        return torch.ones(Lq, Lk, dtype=torch.int64)
    return [[True] * Lk] * Lq


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    B=st.integers(1, 2),
    Hkv=st.integers(1, 2),
    G=st.integers(1, 2),
    Lq=st.integers(0, 9),
    Lk=st.integers(0, 9),
    D=st.integers(1, 5),
    causal=st.booleans(),
    backend=BACKENDS,
)
def test_hostile_arguments_give_the_reference_or_a_named_error(data, B, Hkv, G, Lq, Lk, D, causal, backend):
    Hq = Hkv * G
    q, k, v = make_inputs(B, Hq, Hkv, Lq, Lk, D)
    scale = data.draw(SCALES, label="scale")
    softcap = data.draw(SOFTCAPS, label="softcap")
    window = data.draw(WINDOWS, label="window")
    mask = data.draw(masks(B, Hq, Lq, Lk), label="mask")
    try:
        out, weights_, lse = selfattn.attention(
            q,
            k,
            v,
            causal=causal,
            mask=mask,
            window=window,
            scale=scale,
            softcap=softcap,
            backend=backend,
            return_lse=backend != "sdpa",
        )
    except (TypeError, ValueError) as exc:
        assert str(exc), "an error must say what is wrong"
        event(f"refused: {type(exc).__name__}")
        return
    event("accepted")
    assert torch.isfinite(out).all(), f"non-finite output for scale={scale!r} softcap={softcap!r} mask={mask!r}"
    # accepted: it must be the spec's answer (a window wider than Lk is the same rule as Lk)
    ref_out, _, ref_lse = reference_of(
        q,
        k,
        v,
        causal=causal,
        mask=mask,
        window=None if window is None else min(window, max(Lk, 1)),
        scale=scale,
        softcap=softcap,
    )
    np.testing.assert_allclose(out.numpy(), ref_out, atol=TOL["float64_hostile"], rtol=0)
    if lse is not None:
        ref_lse = np.asarray(ref_lse)
        assert np.array_equal(np.isneginf(lse.numpy()), np.isneginf(ref_lse))
        finite = np.isfinite(ref_lse)
        np.testing.assert_allclose(lse.numpy()[finite], ref_lse[finite], rtol=TOL["float64_hostile"])


@pytest.mark.parametrize(
    "B, Hq, Hkv, Lq, Lk, D, Dv",
    [
        (0, 1, 1, 3, 3, 4, 4),
        (1, 0, 1, 3, 3, 4, 4),
        (1, 1, 0, 3, 3, 4, 4),
        (1, 1, 1, 0, 3, 4, 4),
        (1, 1, 1, 3, 0, 4, 4),
        (1, 1, 1, 3, 3, 0, 4),
        (1, 1, 1, 3, 3, 4, 0),
    ],
)
@pytest.mark.parametrize("backend", ["auto", "naive", "sdpa", "tiled", "native"])
def test_zero_sized_dimensions_give_the_reference_or_a_named_error(B, Hq, Hkv, Lq, Lk, D, Dv, backend):
    q, k, v = make_inputs(B, max(Hq, 1), max(Hkv, 1), Lq, Lk, D, Dv)
    q, k, v = q[:, :Hq], k[:, :Hkv], v[:, :Hkv]
    try:
        out = selfattn.attention(q, k, v, causal=True, backend=backend)
    except ValueError as exc:
        assert any(name in str(exc) for name in ("B", "Hq", "Hkv", "D", "Dv", "head")), str(exc)
        return
    np.testing.assert_allclose(out.numpy(), reference_of(q, k, v, causal=True)[0], atol=TOL["float64"], rtol=0)


@pytest.mark.parametrize("value", [torch.zeros(2, 2), np.zeros((1, 1, 2, 2)), [[[[0.0]]]], "q", None])
def test_non_tensor_or_wrong_rank_inputs_are_named(value):
    k = torch.zeros(1, 1, 2, 2)
    with pytest.raises((TypeError, ValueError), match="q "):
        selfattn.attention(value, k, k)


# --- regressions found by scripts/hostile_run.py -----------------------------------------------------------


def _nan_key_case(how):
    q, k, v = make_inputs(1, 2, 1, 4, 5, 4, dtype=torch.float32)
    if how == "causal Lq < Lk":
        k[..., 4, :] = math.nan  # seen by the last query row only
        kw = {"causal": True}
    else:
        k[..., 2, :] = math.nan  # hidden from every row
        visible = torch.tensor([True, True, False, True, True])
        kw = {"mask": visible if how == "bool mask" else torch.where(visible, 0.0, -math.inf)}
    return q, k, v, kw


@pytest.mark.parametrize("backend", ["auto", "naive", "tiled"])
@pytest.mark.parametrize("how", ["bool mask", "additive mask", "causal Lq < Lk"])
def test_a_non_finite_key_hidden_by_a_mask_reaches_no_row_that_cannot_see_it(backend, how):
    """SDPA adds its mask to the scores (NaN + −inf = NaN): one NaN key hidden by a mask made every row NaN."""
    q, k, v, kw = _nan_key_case(how)
    out = selfattn.attention(q, k, v, backend=backend, **kw)
    ref_out = reference_of(q, k, v, **kw)[0]
    assert np.array_equal(np.isnan(out.numpy()), np.isnan(ref_out))
    np.testing.assert_allclose(out.numpy(), ref_out, atol=TOL["float32"], rtol=0)


@pytest.mark.parametrize("how", ["bool mask", "additive mask", "causal Lq < Lk"])
def test_sdpa_refuses_a_non_finite_masked_key_and_auto_reroutes_it_visibly(how):
    """SDPA used to hand such a request to tiled itself, and `explain` still said "sdpa": now SDPA refuses
    with the reason, and the dispatch rule (the next backend that can serve it) is what explain reports."""
    from selfattn import kernels
    from selfattn.request import build_request

    q, k, v, kw = _nan_key_case(how)
    with pytest.raises(ValueError, match=r"backend 'sdpa' cannot serve this request: k holds NaN or ±inf"):
        selfattn.attention(q, k, v, backend="sdpa", **kw)
    e = kernels.explain(build_request(q, k, v, **kw))
    assert e["choice"] not in (None, "sdpa") and any("NaN" in why for why in e["backends"]["sdpa"]["reasons"])
    assert kernels.choose(build_request(q, k, v, **kw), "auto").name == e["choice"]
    k = torch.nan_to_num(k)  # the same request with finite keys: SDPA serves it
    assert not any("NaN" in why for why in kernels.BACKENDS["sdpa"].not_supported_reasons(build_request(q, k, v, **kw)))


def test_auto_gives_a_non_finite_masked_key_only_to_a_kernel_within_its_limits():
    """With dropout tiled cannot serve it; naive does, within its weight budget; past it, every reason is named."""
    from selfattn import kernels

    q, k, v = make_inputs(1, 2, 1, 4, 5, 4, dtype=torch.float32)
    k[..., 2, :] = math.nan
    mask = torch.tensor([True, True, False, True, True])
    assert selfattn.attention(q, k, v, mask=mask, dropout_p=0.5).shape == q.shape  # naive
    assert kernels.explain(dict(q=q, k=k, v=v, mask=mask, dropout_p=0.5))["choice"] == "naive"
    with kernels.budget(10):
        with pytest.raises(
            ValueError, match=r"sdpa: .*k holds NaN.*tiled: it has no dropout.*naive: it would materialise"
        ):
            selfattn.attention(q, k, v, mask=mask, dropout_p=0.5)


def test_the_reference_keeps_a_nan_score_nan():
    """The spec used to turn a row holding a NaN score into weights 0 (output 0), hiding the NaN."""
    from selfattn import reference

    weights = reference.softmax(np.array([[1.0, math.nan], [1.0, -math.inf], [-math.inf, -math.inf]]))
    assert np.isnan(weights[0]).all()
    np.testing.assert_array_equal(weights[1:], [[1.0, 0.0], [0.0, 0.0]])


@pytest.mark.parametrize("backend", ["auto", "naive", "sdpa", "tiled"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_finite_inputs_whose_scores_overflow_are_refused_not_nan(backend, dtype):
    """q, k of magnitude 1e20 in float32: q·k overflows to inf and the softmax gave NaN (the float64 spec is finite)."""
    q, k, v = make_inputs(1, 2, 2, 5, 6, 4, dtype=dtype, magnitude=1e20)
    with pytest.raises(ValueError, match=r"attention of finite inputs overflowed torch.float32 \(largest \|q\| "):
        selfattn.attention(q, k, v, causal=True, backend=backend)
    q[..., 0, 0] = math.nan  # non-finite inputs: NaN where the spec has it, no error
    assert torch.isnan(selfattn.attention(q, k, v, backend=backend)).any()


def _overflowing_row(dtype=torch.float32):
    """(B 2, Hq 4, Hkv 2, L 4, D 4): every key's first coordinate 1e20, so query row 2 of head 3 in batch 1, −1e20
    along it, scores −4e40 and more against every key (past float32's −3.4e38); every other query's scores are
    about 10."""
    q, k, v = make_inputs(2, 4, 2, 4, 4, 4, dtype=torch.float64, seed=3)
    q = q * 1e-19
    k[..., 0] = 1e20
    q[1, 3, 2] = torch.tensor([-1e20, 0.0, 0.0, 0.0])
    return q.to(dtype), k.to(dtype), v.to(dtype)


@pytest.mark.parametrize("backend", ["auto", "naive", "sdpa", "tiled", "native"])
def test_a_query_whose_every_score_overflows_to_minus_inf_is_refused_not_zero(backend):
    """Found by the hypothesis property (tests/adversarial/library): a float32 score past −3.4e38 became −inf, the
    key was taken for a masked one, and a query whose every score did so got the 0 of a query that sees no key,
    where float64 gives a weighted mean of V."""
    q, k, v = _overflowing_row()
    ref = reference_of(q, k, v, causal=True)[0]
    assert np.isfinite(ref).all() and (ref[1, 3, 2] != 0).any()  # the spec: a mean of V, not the 0 of no key
    with pytest.raises(ValueError, match=r"attention of finite inputs overflowed torch.float32 \(largest \|q\| 1e\+20"):
        selfattn.attention(q, k, v, causal=True, backend=backend)
    out = selfattn.attention(q.double(), k.double(), v.double(), causal=True, backend=backend)  # float64 holds it
    np.testing.assert_allclose(out.numpy(), ref, atol=TOL["float64"], rtol=0)


@pytest.mark.parametrize("backend", ["auto", "naive", "sdpa", "tiled", "native"])
def test_a_query_that_sees_no_key_is_still_zero_whatever_the_magnitudes(backend):
    """A row the mask hides every key from gives 0 without an error, with inputs of ordinary size and with inputs
    of 1e20 whose scores stay in range (the check computes that row's scores in float64 before it refuses)."""
    for scale in (1.0, 1e20):
        q, k, v = make_inputs(1, 2, 2, 4, 4, 4, dtype=torch.float32, seed=4)
        q[..., 1:] *= scale  # q's coordinates 1–3 huge, k's zero there: every score is q₀·k₀, of ordinary size
        k[..., 1:] = 0
        mask = torch.ones(4, 4, dtype=torch.bool)
        mask[2] = False  # query 2 sees no key
        out = selfattn.attention(q, k, v, mask=mask, backend=backend)
        assert torch.equal(out[:, :, 2], torch.zeros_like(out[:, :, 2]))
        np.testing.assert_allclose(out.numpy(), reference_of(q, k, v, mask=mask)[0], atol=TOL["float32"], rtol=0)


@pytest.mark.parametrize("backend", ["auto", "naive", "tiled", "native"])
def test_a_softcap_saturates_an_overflowing_score_as_float64_does(backend):
    """cap · tanh(s / cap) of s = −inf is −cap, as of s = −4e40 in float64: the softcap's answer is right, no error."""
    q, k, v = _overflowing_row()
    out = selfattn.attention(q, k, v, causal=True, softcap=30.0, backend=backend)
    ref = reference_of(q, k, v, causal=True, softcap=30.0)[0]
    np.testing.assert_allclose(out.numpy(), ref, atol=TOL["float32"], rtol=0)


@pytest.mark.parametrize("backend", ["auto", "naive", "tiled"])
@pytest.mark.parametrize("softcap", [1e-300, 5e-5, -1.0])
def test_a_softcap_below_the_minimum_is_named(backend, softcap):
    """softcap=1e-300: tiled's multiplier scale/c overflowed float32 ("value cannot be converted") from deep inside."""
    q, k, v = make_inputs(1, 1, 1, 3, 3, 4, dtype=torch.float32)
    with pytest.raises(ValueError, match="softcap must be >= 0.0001"):
        selfattn.attention(q, k, v, softcap=softcap, backend=backend)
    out = selfattn.attention(q, k, v, softcap=1e-4, backend=backend)
    np.testing.assert_allclose(out.numpy(), reference_of(q, k, v, softcap=1e-4)[0], atol=TOL["float32"], rtol=0)


def test_the_overflow_check_costs_no_copy_of_the_output(monkeypatch):
    """The check after every CPU call must not allocate like `torch.isfinite(out).all()` (several copies of
    the output: 110 MiB extra at L = 32768): a finite sum settles it, else a chunked exact pass."""
    from selfattn.kernels import base

    seen = []
    real = torch.isfinite
    monkeypatch.setattr(torch, "isfinite", lambda t: seen.append(t.numel()) or real(t))
    q, k, v = make_inputs(1, 2, 2, 64, 64, 8, dtype=torch.float32)
    selfattn.attention(q, k, v, causal=True, backend="sdpa")
    assert max(seen, default=1) == 1  # a finite sum settles it: nothing of the output's size is looked at
    out = torch.full((3, base.FINITE_CHECK_CHUNK), 3e38)  # finite, but its sum overflows
    seen.clear()
    assert base.all_finite(out) and max(seen) <= base.FINITE_CHECK_CHUNK
    out[2, 5] = math.nan
    assert not base.all_finite(out)


# --- regressions found by the attack run of issue 18 ---------------------------------------------------------


def _mean_v(v: torch.Tensor, Hq: int) -> torch.Tensor:
    """mean over keys of V, per query head (B, Hq, Dv): what a uniform row gives."""
    return v.double().mean(dim=2).repeat_interleave(Hq // v.shape[1], dim=1)


@pytest.mark.parametrize("backend", ["auto", "naive", "sdpa", "tiled", "native"])
def test_a_row_masked_with_the_float32_minimum_is_uniform_not_empty(backend):
    """transformers' idiom for "hidden" is torch.finfo(float32).min: the row's weights are uniform (mean of V,
    as naive, SDPA, native and the spec give). tiled multiplied the mask by log₂e in float32, so the row
    became −inf everywhere and gave 0."""
    q, k, v = make_inputs(1, 2, 1, 4, 6, 8, dtype=torch.float32)
    mask = torch.zeros(4, 6)
    mask[1] = torch.finfo(torch.float32).min
    mask[3, :2] = torch.finfo(torch.float32).min  # part of a row: those keys weigh nothing
    out = selfattn.attention(q, k, v, mask=mask, backend=backend)
    ref = reference_of(q, k, v, mask=mask)[0]
    np.testing.assert_allclose(out[:, :, 1].double().numpy(), _mean_v(v, 2).numpy(), atol=TOL["float32"], rtol=0)
    np.testing.assert_allclose(out.numpy(), ref, atol=TOL["float32"], rtol=0)


@pytest.mark.parametrize("backend", ["auto", "naive", "tiled", "native"])
def test_a_huge_finite_additive_entry_is_computed_not_refused_as_overflow(backend):
    """A finite +3e38 entry: naive computes it (the row looks at that key only); tiled's 3e38 · log₂e was
    +inf, the row NaN, and the call refused as "overflowed"."""
    q, k, v = make_inputs(1, 1, 1, 3, 5, 4, dtype=torch.float32)
    mask = torch.zeros(1, 1, 3, 5)
    mask[0, 0, 2, 3] = 3e38
    out = selfattn.attention(q, k, v, mask=mask, backend=backend)
    np.testing.assert_allclose(out.numpy(), reference_of(q, k, v, mask=mask)[0], atol=TOL["float32"], rtol=0)
    assert torch.equal(out[0, 0, 2], v[0, 0, 3])


@pytest.mark.parametrize("backend", ["auto", "naive", "tiled", "native"])
def test_a_float64_mask_beyond_float32_stays_finite_for_float32_q(backend):
    """A float64 mask of −1e300 with float32 q: converted to float32 it was −inf, so a fully masked row gave 0
    where the float64 spec gives mean(V). Finite entries now saturate at float32's range; −inf stays −inf."""
    q, k, v = make_inputs(1, 2, 2, 3, 4, 4, dtype=torch.float32)
    mask = torch.zeros(3, 4, dtype=torch.float64)
    mask[0] = -1e300
    mask[2, 1] = -math.inf
    out = selfattn.attention(q, k, v, mask=mask, backend=backend)
    ref = reference_of(q, k, v, mask=mask)[0]
    np.testing.assert_allclose(out[:, :, 0].double().numpy(), _mean_v(v, 2).numpy(), atol=TOL["float32"], rtol=0)
    np.testing.assert_allclose(out.numpy(), ref, atol=TOL["float32"], rtol=0)
    if backend == "auto":  # SDPA adds the mask in float32: it refuses, by name
        with pytest.raises(ValueError, match=r"holds 1e\+300, beyond torch.float32's range"):
            selfattn.attention(q, k, v, mask=mask, backend="sdpa")


def test_sdpa_refuses_a_dense_window_mask_over_the_budget():
    """window=128 at L=65536: SDPA built a 16 GiB dense mask; naive refused the same clearly. Now SDPA refuses
    over the budget (selfattn.kernels.budget) and auto takes a kernel that skips hidden blocks."""
    from selfattn import kernels

    shape = dict(B=1, Hq=1, Lq=65536, Lk=65536, D=8, causal=True, window=128)
    e = kernels.explain(shape, backend="sdpa")
    assert e["choice"] is None
    (why,) = [w for w in e["backends"]["sdpa"]["reasons"] if "dense" in w]
    assert "65536×65536 mask" in why and "over the budget of 1.00 GiB (selfattn.kernels.budget)" in why
    assert kernels.explain(shape)["choice"] not in (None, "sdpa")
    small = dict(shape, Lq=1024, Lk=1024)
    assert kernels.explain(small, backend="sdpa")["choice"] == "sdpa"
    with kernels.budget(1 << 20):  # 1 MiB: a 1024×1024 dense mask (5 MiB) no longer fits
        assert kernels.explain(small, backend="sdpa")["choice"] is None


def test_sdpa_names_an_additive_mask_beyond_half_range_instead_of_an_overflow():
    """float16 q with a finite float32 mask entry of 7e4: SDPA (which adds the mask in q's dtype) said the
    inputs "overflowed float32". Now it names the mask; auto computes it in float32 like the spec."""
    q, k, v = make_inputs(1, 1, 1, 3, 4, 8, dtype=torch.float16)
    mask = torch.zeros(3, 4)
    mask[1, 2] = 7e4
    with pytest.raises(ValueError, match=r"additive mask holds 7e\+04, beyond torch.float16's range"):
        selfattn.attention(q, k, v, mask=mask, backend="sdpa")
    out = selfattn.attention(q, k, v, mask=mask)
    np.testing.assert_allclose(
        out.double().numpy(), reference_of(q, k, v, mask=mask)[0], atol=FLOOR[torch.float16], rtol=0
    )


@pytest.mark.parametrize("backend", ["tiled", "naive", "native"])
def test_the_backward_with_no_keys_gives_zero_gradients(backend):
    """Lk = 0: tiled's backward crashed ("cannot reshape tensor of 0 elements")."""
    q = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.zeros(1, 1, 0, 4, dtype=torch.float64, requires_grad=True)
    v = torch.zeros(1, 1, 0, 5, dtype=torch.float64, requires_grad=True)
    out = selfattn.attention(q, k, v, backend=backend)
    assert out.shape == (1, 2, 3, 5) and not out.any()
    dq, dk, dv = torch.autograd.grad(out.sum(), (q, k, v))
    assert not dq.any() and dk.shape == k.shape and dv.shape == v.shape


def test_tiled_in_natural_units_has_the_same_gradients_as_naive():
    """A mask tiled cannot keep in base 2 (the float32 minimum) runs its forward and backward in natural units.
    (A row whose every logit is near the float32 minimum has an lse equal to its maximum — log 6 is lost
    beside 3.4e38 — so weights recomputed from that lse, as lse-based backwards do, are not exact for it.)"""
    from selfattn.request import build_request

    q, k, v = make_inputs(1, 2, 1, 5, 6, 4, dtype=torch.float32)
    mask = torch.randn(1, 2, 5, 6)
    mask[0, 0, 4, :3] = torch.finfo(torch.float32).min  # half of the last row, which sees every key
    mask[0, 1, 2, 3] = -math.inf
    assert not build_request(q, k, v, mask=mask).rule.base2_fits(torch.float32)
    grads = {}
    for backend in ("naive", "tiled"):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        res = selfattn.attention(*leaves, mask=mask, causal=True, softcap=3.0, return_lse=True, backend=backend)
        (res.output.square().sum() + res.lse.sum()).backward()
        grads[backend] = [t.grad for t in leaves] + [res.output.detach(), res.lse.detach()]
    for got, want in zip(grads["tiled"], grads["naive"], strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), atol=TOL["float32"], rtol=0)
