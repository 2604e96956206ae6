"""attention(): every backend, every feature, every dtype, against the float64 reference.

Each backend registered in `selfattn.kernels.BACKENDS` is checked here; a backend that
refuses a case must say why (ValueError), and the reason is asserted to be non-empty.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import selfattn
from selfattn import kernels
from selfattn.request import build_request

from .helpers import make_inputs, reference_of, skip_if_flex_refuses
from .matrix import DTYPES, FEATURES, make_mask, matrix_case, over_the_matrix, resolve
from .tolerances import TOL, agree, assert_close_to_reference, assert_lse_matches, max_error


@pytest.mark.parametrize("backend", sorted(kernels.BACKENDS))
@over_the_matrix
def test_backend_matches_reference(backend, dtype, feature, shape):
    q, k, v, f = matrix_case(feature, shape, dtype)
    why = kernels.BACKENDS[backend].not_supported_reasons(build_request(q, k, v, **f))
    if why:
        assert all(reason.strip() for reason in why)
        with pytest.raises(ValueError, match=f"backend '{backend}' cannot serve"):
            selfattn.attention(q, k, v, backend=backend, **f)
        return
    out = selfattn.attention(q, k, v, backend=backend, **f)
    assert out.dtype == dtype and out.shape == (*q.shape[:3], v.shape[-1])
    ref_out, _, _ = reference_of(q, k, v, **f)
    naive = selfattn.attention(q, k, v, backend="naive", **f)
    assert_close_to_reference(out, ref_out, naive, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_weights_and_lse_match_reference(dtype, feature):
    shape = (2, 4, 2, 7, 9, 16, 8)
    q, k, v = make_inputs(*shape, dtype=dtype, seed=3)
    f = resolve(FEATURES[feature], shape, dtype)
    res = selfattn.attention(q, k, v, return_weights=True, return_lse=True, **f)
    _, ref_w, ref_lse = reference_of(q, k, v, **f)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    assert res.weights.dtype == acc and res.lse.dtype == acc
    assert max_error(res.weights, ref_w) <= agree(dtype)
    assert_lse_matches(res.lse, ref_lse, agree(dtype))
    # output is weights · V, and visible rows sum to 1
    sums = res.weights.sum(-1)
    assert torch.all((sums - 1).abs() < TOL["float32"]) or torch.all(((sums - 1).abs() < TOL["float32"]) | (sums == 0))


def test_named_tuple_fields_and_plain_output():
    q, k, v = make_inputs(1, 1, 1, 4, 4, 8, 8, dtype=torch.float32)
    out = selfattn.attention(q, k, v)
    assert isinstance(out, torch.Tensor)
    res = selfattn.attention(q, k, v, return_lse=True)
    assert isinstance(res, selfattn.AttentionOutput) and res.weights is None and res.lse.shape == (1, 1, 4)
    assert selfattn.AttentionOutput is kernels.Result  # one class, two names
    assert torch.equal(res.output, res[0])


@pytest.mark.parametrize("shape", [(1, 2, 2, 6, 6, 8, 8), (2, 4, 2, 5, 5, 16, 16), (1, 4, 1, 9, 9, 8, 8)])
@pytest.mark.parametrize("causal", [False, True])
def test_agrees_with_pytorch_sdpa_itself(shape, causal):
    """Where PyTorch SDPA serves the case directly (square causal, GQA), it is a second oracle."""
    q, k, v = make_inputs(*shape, dtype=torch.float64, seed=5)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=shape[1] != shape[2])
    for backend in kernels.BACKENDS:
        if kernels.BACKENDS[backend].refuse(build_request(q, k, v, causal=causal)):
            continue  # e.g. flex on a CPU below one block
        got = selfattn.attention(q, k, v, causal=causal, backend=backend)
        assert max_error(got, want) < TOL["float64"], backend


def test_bottom_right_causal_for_decoding():
    q, k, v = make_inputs(1, 1, 1, 1, 6, 4, 4, dtype=torch.float64)
    out = selfattn.attention(q, k, v, causal=True)
    full = selfattn.attention(q, k, v)  # a single query at the end sees everything
    assert torch.allclose(out, full, atol=TOL["float64_few_ops"])


@pytest.mark.parametrize("backend", sorted(kernels.BACKENDS))
def test_gradients_flow_and_match_naive(backend):
    shape = (1, 4, 2, 11, 13, 8, 8)
    q, k, v = (t.requires_grad_() for t in make_inputs(*shape, dtype=torch.float64, seed=7))
    mask = make_mask("bool", shape)
    f = dict(causal=True, mask=mask)
    if kernels.BACKENDS[backend].refuse(build_request(q, k, v, **f)):
        pytest.skip(f"{backend} refuses this request")
    out = selfattn.attention(q, k, v, backend=backend, **f)
    grads = torch.autograd.grad((out * out).sum(), (q, k, v))
    want = torch.autograd.grad((lambda o: (o * o).sum())(selfattn.attention(q, k, v, backend="naive", **f)), (q, k, v))
    for g, w in zip(grads, want, strict=True):
        assert torch.isfinite(g).all()
        assert max_error(g, w) < TOL["float64_grad"]


def test_naive_gradcheck():
    q, k, v = (t.requires_grad_() for t in make_inputs(1, 2, 1, 3, 4, 3, 2, dtype=torch.float64, seed=2))
    mask = torch.tensor([[False, False, False, False], [True, False, True, True], [True, True, True, True]])
    assert torch.autograd.gradcheck(
        lambda q, k, v: selfattn.attention(q, k, v, causal=True, mask=mask, softcap=3.0, backend="naive"), (q, k, v)
    )


@pytest.mark.parametrize("backend", sorted(kernels.BACKENDS))
def test_fully_masked_row_gives_zeros_and_finite_gradients(backend):
    q, k, v = (t.requires_grad_() for t in make_inputs(1, 2, 2, 3, 4, 8, 8, dtype=torch.float32))
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False
    if kernels.BACKENDS[backend].refuse(build_request(q, k, v, mask=mask)):
        pytest.skip(f"{backend} refuses this request")
    out = selfattn.attention(q, k, v, mask=mask, backend=backend)
    assert torch.isfinite(out).all() and (out[:, :, 1] == 0).all()
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    additive = torch.zeros(3, 4)
    additive[2] = float("-inf")
    out = selfattn.attention(q, k, v, mask=additive, backend=backend)
    assert torch.isfinite(out).all() and (out[:, :, 2] == 0).all()


@pytest.mark.parametrize("backend", sorted(kernels.BACKENDS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_scores_of_magnitude_1e4_stay_finite(backend, dtype):
    q, k, v = make_inputs(1, 2, 2, 8, 8, 4, 4, dtype=dtype, magnitude=100.0)  # q·k/√D ~ 1e4
    if kernels.BACKENDS[backend].refuse(build_request(q, k, v, causal=True)):
        pytest.skip(f"{backend} refuses this request")
    out = selfattn.attention(q, k, v, causal=True, backend=backend)
    assert torch.isfinite(out).all()
    ref, _, _ = reference_of(q, k, v, causal=True)
    naive = selfattn.attention(q, k, v, causal=True, backend="naive")
    assert_close_to_reference(out, ref, naive, dtype=dtype)


def test_dropout_drops_and_rescales():
    torch.manual_seed(0)
    q, k, v = make_inputs(1, 4, 4, 64, 64, 16, 16, dtype=torch.float64)
    res = selfattn.attention(q, k, v, dropout_p=0.25, return_weights=True, backend="naive")
    clean = selfattn.attention(q, k, v, return_weights=True, backend="naive").weights
    dropped = res.weights == 0
    assert 0.2 < dropped.float().mean().item() < 0.3
    kept = ~dropped
    assert torch.allclose(res.weights[kept], clean[kept] / 0.75)
    assert torch.allclose(res.output, res.weights @ v)  # the returned weights are the ones used
    sdpa = selfattn.attention(q, k, v, dropout_p=0.25, backend="sdpa")
    assert torch.isfinite(sdpa).all() and not torch.allclose(sdpa, selfattn.attention(q, k, v, backend="sdpa"))


def test_auto_picks_a_backend_that_serves_and_explains_refusals():
    q, k, v = make_inputs(1, 1, 1, 4, 4, 8, 8, dtype=torch.float32)
    assert selfattn.attention(q, k, v, return_weights=True).weights is not None  # auto → naive
    with pytest.raises(ValueError, match="sdpa.*never returns attention weights"):
        selfattn.attention(q, k, v, return_weights=True, backend="sdpa")
    with pytest.raises(ValueError, match="softcap"):
        selfattn.attention(q, k, v, softcap=1.0, backend="sdpa")


def test_naive_refuses_over_its_memory_budget():
    q, k, v = make_inputs(1, 2, 2, 32, 32, 8, 8, dtype=torch.float32)
    with kernels.budget(1000):
        with pytest.raises(ValueError, match=r"1×2×32×32 weights.*use backend='sdpa' or 'tiled'"):
            selfattn.attention(q, k, v, backend="naive")
        assert selfattn.attention(q, k, v).shape == q.shape  # auto still serves it
    assert selfattn.attention(q, k, v, backend="naive").shape == q.shape  # the budget ends with its context


def _qkv(**over):
    t = dict(q=torch.zeros(1, 4, 5, 8), k=torch.zeros(1, 2, 6, 8), v=torch.zeros(1, 2, 6, 3))
    t.update(over)
    return t


@pytest.mark.parametrize(
    "over, kwargs, err, match",
    [
        (dict(q=torch.zeros(4, 5, 8)), {}, ValueError, r"q must be 4-D \(B, H, L, D\), got shape \(4, 5, 8\)"),
        (dict(k=[[1.0]]), {}, TypeError, "k must be a torch.Tensor, got list"),
        (dict(k=torch.zeros(1, 2, 6, 32)), {}, ValueError, "k has D=32 but q has D=8"),
        (dict(k=torch.zeros(2, 2, 6, 8), v=torch.zeros(2, 2, 6, 3)), {}, ValueError, "q has B=1, k has B=2"),
        (
            dict(k=torch.zeros(1, 3, 6, 8), v=torch.zeros(1, 3, 6, 3)),
            {},
            ValueError,
            "Hq=4 heads, not a multiple of k's Hkv=3",
        ),
        (dict(v=torch.zeros(1, 2, 7, 3)), {}, ValueError, "v has Lk=7 positions but k has Lk=6"),
        (dict(v=torch.zeros(1, 1, 6, 3)), {}, ValueError, "v has 1 heads but k has 2"),
        (dict(v=torch.zeros(1, 2, 6, 3, dtype=torch.float64)), {}, TypeError, "share one dtype.*torch.float64"),
        (dict(q=torch.zeros(1, 4, 5, 8, dtype=torch.int64)), {}, TypeError, "q has dtype torch.int64"),
        (
            {},
            dict(mask=torch.ones(3, 6, dtype=torch.bool)),
            ValueError,
            r"mask has shape \(3, 6\), which does not broadcast to \(B, Hq, Lq, Lk\) = \(1, 4, 5, 6\)",
        ),
        ({}, dict(mask=torch.ones(5, 6, dtype=torch.int32)), TypeError, "mask must be bool.*torch.int32"),
        ({}, dict(mask=torch.full((5, 6), float("nan"))), ValueError, "NaN"),
        ({}, dict(mask=torch.ones(1, 1, 1, 5, 6, dtype=torch.bool)), ValueError, "more than 4 dims"),
        ({}, dict(window=0), ValueError, "window must be >= 1, got 0"),
        ({}, dict(window=2.5), TypeError, "window must be an int, got float 2.5"),
        ({}, dict(dropout_p=1.0), ValueError, r"dropout_p must be < 1, got 1$"),
        ({}, dict(dropout_p=-0.1), ValueError, "got -0.1"),
        ({}, dict(scale=float("nan")), ValueError, "scale must be finite, got nan"),
        ({}, dict(scale=float("inf")), ValueError, "scale must be finite, got inf"),
        ({}, dict(scale="big"), TypeError, "scale must be a real number, got str 'big'"),
        ({}, dict(softcap=-1.0), ValueError, r"softcap must be >= 0.0001 \(or 0: no cap\), got -1"),
        ({}, dict(causal="yes"), TypeError, "causal must be a bool, got str 'yes'"),
        ({}, dict(backend="flash"), ValueError, "unknown backend 'flash'"),
        ({}, dict(backend=3), TypeError, "backend must be a str, got int 3"),
    ],
)
def test_bad_input_is_named(over, kwargs, err, match):
    t = _qkv(**over)
    with pytest.raises(err, match=match):
        selfattn.attention(t["q"], t["k"], t["v"], **kwargs)


def test_mixed_devices_are_refused():
    meta = torch.zeros(1, 2, 6, 8, device="meta")
    with pytest.raises(ValueError, match="one device.*meta"):
        selfattn.attention(torch.zeros(1, 4, 5, 8), meta, torch.zeros(1, 2, 6, 3))


def test_default_scale_is_one_over_sqrt_d():
    q, k, v = make_inputs(1, 1, 1, 5, 5, 16, 4, dtype=torch.float64)
    assert torch.allclose(selfattn.attention(q, k, v), selfattn.attention(q, k, v, scale=1 / math.sqrt(16)))


# ---- regressions (issue 11): inputs that gave NaN, a crash from deep inside, or a wrong result


@pytest.mark.parametrize("backend", ["auto", *sorted(kernels.BACKENDS)])
@pytest.mark.parametrize("scale", [0.0, -0.5])
def test_non_positive_scale_is_right_on_every_backend(backend, scale):
    # PyTorch's fused causal CPU kernel returns NaN for scale <= 0: SDPA must be given a dense mask
    q, k, v = make_inputs(1, 2, 2, 64, 64, 8, 8)
    skip_if_flex_refuses(backend, q, k, v, causal=True, scale=scale)
    if backend == "native" and scale == 0:  # BLAS skips alpha = 0: refused, tests/kernels/test_native.py
        assert "scale = 0" in kernels.BACKENDS["native"].refuse(build_request(q, k, v, causal=True, scale=0.0))
        return
    out = selfattn.attention(q, k, v, causal=True, scale=scale, backend=backend)
    ref_out, _, _ = reference_of(q, k, v, causal=True, scale=scale)
    assert_close_to_reference(out, ref_out)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(mask=torch.tensor([0.0, float("inf"), 0.0, 0.0, 0.0, 0.0])), r"\+inf"),
        (dict(scale=1e300), "scale must be <= 1e\\+06, got 1e\\+300"),
        (dict(scale=-1e38), "scale must be >= -1e\\+06"),
        (dict(softcap=1e308), "softcap must be <= 1e\\+06"),
    ],
)
def test_values_that_would_overflow_are_refused(kwargs, match):
    t = _qkv()
    with pytest.raises(ValueError, match=match):
        selfattn.attention(t["q"], t["k"], t["v"], **kwargs)


@pytest.mark.parametrize("backend", sorted(kernels.BACKENDS))
def test_largest_scale_and_softcap_stay_finite(backend):
    q, k, v = make_inputs(1, 2, 2, 9, 9, 4, 4)
    f = dict(causal=True, scale=selfattn.request.MAX_SCALE)
    if backend != "sdpa":
        f["softcap"] = selfattn.request.MAX_SOFTCAP
    skip_if_flex_refuses(backend, q, k, v, **f)
    out = selfattn.attention(q, k, v, backend=backend, **f)
    assert_close_to_reference(out, reference_of(q, k, v, **f)[0])


@pytest.mark.parametrize("backend", sorted(kernels.BACKENDS))
@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_one_dimensional_key_padding_mask(backend, kind):
    q, k, v = make_inputs(2, 4, 2, 5, 7, 8, 8)
    visible = torch.tensor([True, True, False, True, True, False, True])
    mask = visible if kind == "bool" else torch.zeros(7, dtype=torch.float64).masked_fill(~visible, float("-inf"))
    for causal in (False, True):
        skip_if_flex_refuses(backend, q, k, v, mask=mask, causal=causal)
        out = selfattn.attention(q, k, v, mask=mask, causal=causal, backend=backend)
        assert_close_to_reference(out, reference_of(q, k, v, mask=mask, causal=causal)[0])


@pytest.mark.parametrize("backend", sorted(kernels.BACKENDS))
def test_no_keys_gives_zeros_and_minus_inf(backend):
    q, k, v = make_inputs(1, 2, 2, 3, 0, 4, 4)
    f = dict(return_lse=True) if backend != "sdpa" else {}
    skip_if_flex_refuses(backend, q, k, v, causal=True, **f)
    res = selfattn.attention(q, k, v, causal=True, backend=backend, **f)
    out = res if backend == "sdpa" else res.output
    assert out.shape == (1, 2, 3, 4) and (out == 0).all()
    if backend != "sdpa":
        assert torch.isneginf(res.lse).all()


@pytest.mark.parametrize(
    "over, kwargs, match",
    [
        (dict(q=torch.zeros(1, 0, 5, 8)), {}, "at least one head each, got Hq=0, Hkv=2"),
        (dict(v=torch.zeros(1, 2, 6, 0)), {}, "Dv must be >= 1, got 0"),
    ],
)
def test_empty_heads_and_value_width_are_named(over, kwargs, match):
    t = _qkv(**over)
    with pytest.raises(ValueError, match=match):
        selfattn.attention(t["q"], t["k"], t["v"], **kwargs)


@pytest.mark.parametrize("backend", sorted(kernels.BACKENDS))
def test_a_window_wider_than_the_keys_is_the_causal_rule(backend):
    q, k, v = make_inputs(1, 2, 2, 5, 6, 4, 4)
    skip_if_flex_refuses(backend, q, k, v, window=10**30)
    wide = selfattn.attention(q, k, v, window=10**30, backend=backend)
    assert_close_to_reference(wide, reference_of(q, k, v, causal=True)[0])
    assert build_request(q, k, v, window=10**30).window == 6
