"""FlashAttention's and SDPA's argument conventions (issue 29): FlashAttention's forms accepted with its meaning,
checked against the selfattn forms and the float64 reference; SDPA's and FlashAttention's names answered with
the selfattn name; transformers' position_bias folded into the additive mask.

selfattn's layout is (B, H, L, D); flash_attn_func's is (B, L, H, D): `flash_style` transposes in and out, as
a FlashAttention user calling selfattn does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import selfattn
import selfattn.hf
from selfattn.functional import FOREIGN_KEYWORDS

from .helpers import make_inputs, reference_of
from .tolerances import TOL, assert_close_to_reference, max_error

BACKENDS = ["auto", "naive", "tiled", "native"]
B, HQ, HKV, L, D = 2, 4, 2, 11, 8


def flash_style(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                alibi_slopes=None, *, backend="auto"):  # fmt: skip
    """flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes) over
    selfattn.attention: q (B, L, Hq, D), k and v (B, L, Hkv, D) → (B, L, Hq, D); its defaults, its values."""
    out = selfattn.attention(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        dropout_p=dropout_p,
        scale=softmax_scale,
        causal=causal,
        window=window_size,
        softcap=softcap,
        alibi=alibi_slopes,
        backend=backend,
    )
    return out.transpose(1, 2)


def _skip_unbuilt(backend):
    if backend == "native":
        from selfattn.kernels import native_build

        if native_build.unavailable_reason() is not None:
            pytest.skip(native_build.unavailable_reason())


def _slopes(shape):
    g = torch.Generator().manual_seed(5)
    return torch.rand(*shape, generator=g, dtype=torch.float64) * 0.5


# (flash's keyword arguments, selfattn's keyword arguments for the same attention)
CASES = {
    "defaults": ({}, {}),
    "unbounded-window": (dict(window_size=(-1, -1)), dict(window=None)),
    "causal": (dict(causal=True, window_size=(-1, -1)), dict(causal=True)),
    "left-only": (dict(window_size=(3, -1)), dict(window=(3, None))),
    "right-only": (dict(window_size=(-1, 2)), dict(window=(None, 2))),
    "two-sided": (dict(window_size=(3, 2)), dict(window=(3, 2))),
    "softcap-off": (dict(softcap=0.0, softmax_scale=0.3), dict(softcap=None, scale=0.3)),
    "softcap-on": (dict(softcap=2.0), dict(softcap=2.0)),
    "alibi-heads": (dict(alibi_slopes=_slopes((HQ,))), dict(alibi=_slopes((HQ,)))),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
def test_flash_forms_mean_what_they_mean_in_flash(case, backend):
    _skip_unbuilt(backend)
    flash_kwargs, ours = CASES[case]
    q, k, v = make_inputs(B, HQ, HKV, L, L, D, dtype=torch.float64)
    got = flash_style(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **flash_kwargs, backend=backend)
    same = selfattn.attention(q, k, v, **ours, backend=backend)
    assert max_error(got.transpose(1, 2), same) <= TOL["float64"]
    ref = reference_of(q, k, v, **ours)[0]
    assert_close_to_reference(got.transpose(1, 2), ref, what=f"{case}, {backend}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
def test_per_batch_alibi_slopes(backend, causal):
    """flash's alibi_slopes of shape (B, Hq): each batch item its own slopes, against the float64 reference of
    each item with its (Hq,) slopes; (1, Hq) is the same as (Hq,)."""
    _skip_unbuilt(backend)
    q, k, v = make_inputs(B, HQ, HKV, 5, 9, D, dtype=torch.float64)
    slopes = _slopes((B, HQ))
    got = selfattn.attention(q, k, v, alibi=slopes, causal=causal, window=(-1, 3), backend=backend)
    for b in range(B):
        one = (q[b : b + 1], k[b : b + 1], v[b : b + 1])
        ref = reference_of(*one, alibi=slopes[b], causal=causal, window=(None, 3))[0]
        assert_close_to_reference(got[b : b + 1], ref, what=f"batch item {b}")
    single = selfattn.attention(q, k, v, alibi=slopes[:1], backend=backend)
    assert torch.equal(single, selfattn.attention(q, k, v, alibi=slopes[0], backend=backend))


def test_per_batch_alibi_with_a_mask():
    """(B, Hq) slopes join a bool mask (its False still hides) and an additive one (added)."""
    q, k, v = make_inputs(B, HQ, HKV, 6, 6, D, dtype=torch.float64)
    slopes = _slopes((B, HQ))
    hidden = torch.rand(B, 1, 6, 6, generator=torch.Generator().manual_seed(2)) > 0.3
    additive = torch.randn(1, HQ, 6, 6, dtype=torch.float64)
    for mask in (hidden, additive):
        got = selfattn.attention(q, k, v, alibi=slopes, mask=mask, causal=True, backend="naive")
        for b in range(B):
            one = (q[b : b + 1], k[b : b + 1], v[b : b + 1])
            m = mask[b : b + 1] if mask.shape[0] > 1 else mask
            ref = reference_of(*one, alibi=slopes[b], mask=m, causal=True)[0]
            assert_close_to_reference(got[b : b + 1], ref, what=f"mask {mask.dtype}, item {b}")


def test_softcap_zero_is_no_cap_bit_for_bit():
    q, k, v = make_inputs(1, 2, 2, 7, 7, 4, dtype=torch.float32)
    assert torch.equal(selfattn.attention(q, k, v, softcap=0.0), selfattn.attention(q, k, v))
    assert torch.equal(selfattn.attention(q, k, v, softcap=0), selfattn.attention(q, k, v))


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(window=(-2, 1)), ValueError, r"window left must be >= 0, or -1 or None \(unbounded\), got -2"),
        (dict(window=-1), ValueError, "window must be >= 1, got -1"),
        (dict(softcap=1e-5), ValueError, r"softcap must be >= 0.0001 \(or 0: no cap\), got 1e-05"),
        (dict(alibi=torch.zeros(3, 2)), ValueError, r"alibi must have shape \(Hq,\) = \(2,\) or \(B, Hq\) = \(2, 2\)"),
        (dict(alibi=torch.zeros(2, 2, 1)), ValueError, r"alibi must have shape .*got \(2, 2, 1\)"),
    ],
)
def test_bad_convention_values_are_named(kwargs, err, match):
    q, k, v = make_inputs(2, 2, 2, 4, 4, 4, dtype=torch.float32)
    with pytest.raises(err, match=match):
        selfattn.attention(q, k, v, **kwargs)


@pytest.mark.parametrize(
    "name, answer",
    [
        ("attn_mask", "write mask="),
        ("is_causal", "write causal=True .*bottom-right"),
        ("enable_gqa", "write nothing .*Hq % Hkv == 0"),
        ("softmax_scale", "write scale="),
        ("window_size", r"write window=\(left, right\)"),
        ("alibi_slopes", "write alibi="),
    ],
)
def test_other_libraries_names_get_the_selfattn_name(name, answer):
    assert name in FOREIGN_KEYWORDS
    q, k, v = make_inputs(1, 2, 2, 4, 4, 4, dtype=torch.float32)
    with pytest.raises(TypeError, match=rf"attention\(\) has no {name}= \(.*'s name\): {answer}"):
        selfattn.attention(q, k, v, **{name: None})


def test_an_unknown_keyword_is_pythons_message():
    q, k, v = make_inputs(1, 2, 2, 4, 4, 4, dtype=torch.float32)
    with pytest.raises(TypeError, match=r"attention\(\) got an unexpected keyword argument 'casual'"):
        selfattn.attention(q, k, v, casual=True)


@pytest.mark.parametrize("mask_kind", [None, "bool", "additive"])
def test_position_bias_is_folded_into_the_mask(mask_kind):
    """transformers' position_bias (additive, per head) joins attention_mask: against the float64 reference of the
    bias added to the mask (−inf where a bool mask hides)."""
    from .hf.models import build

    attn = build("llama").model.layers[0].self_attn  # read for its is_causal only
    q, k, v = make_inputs(2, 4, 2, 5, 5, 8, dtype=torch.float32)
    g = torch.Generator().manual_seed(4)
    bias = torch.randn(1, 4, 5, 5, generator=g)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(2, 1, 5, 5, generator=g) > 0.3
        mask[..., 0] = True
    elif mask_kind == "additive":
        mask = torch.randn(2, 1, 5, 5, generator=g)
    out, _ = selfattn.hf.attention_forward(attn, q, k, v, mask, position_bias=bias, is_causal=False)
    combined = (
        bias if mask is None else (torch.where(mask, bias, float("-inf")) if mask.dtype == torch.bool else mask + bias)
    )
    ref = reference_of(q, k, v, mask=combined)[0]
    assert_close_to_reference(out.transpose(1, 2), ref, dtype=torch.float32, what=f"position_bias, mask {mask_kind}")
    with pytest.raises(TypeError, match="position_bias must be a floating tensor"):
        selfattn.hf.attention_forward(attn, q, k, v, mask, position_bias=torch.zeros(1, 4, 5, 5, dtype=torch.int64))
    assert np.isfinite(out.detach().numpy()).all()
