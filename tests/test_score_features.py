"""Sinks, ALiBi slopes, segments (packed sequences) and two-sided windows: every backend that serves them
against the float64 reference (`selfattn.reference`), forward and backward, by the tolerance rule
(tests/tolerances.py); every backend that does not refuses them by name."""

from __future__ import annotations

import pytest
import torch

import selfattn
from selfattn import kernels
from selfattn.request import build_request

from .helpers import make_inputs, reference_of
from .matrix import DTYPES
from .tolerances import FLOOR, TOL, assert_close_to_reference, max_error, tolerance

BACKENDS = ["naive", "tiled", "native", "sdpa", "flex"]
GRAD_BACKENDS = ["tiled", "native"]

# (B, Hq, Hkv, Lq, Lk, D, Dv): GQA, lengths that divide no block, Lq ≠ Lk where the feature allows it
SHAPES = [(2, 4, 2, 113, 113, 16, 8), (1, 3, 1, 15, 15, 3, 5)]
UNEQUAL = (1, 2, 2, 5, 17, 8, 8)


def segments_of(B, L, contiguous=True):
    """(B, L) ids: runs of awkward lengths (the last batch item one segment), or ids that come back."""
    ids = torch.zeros(B, L, dtype=torch.int64)
    cuts = [L // 5, L // 2, L - 1]
    for c in cuts:
        ids[0, c:] += 1
    if not contiguous:
        ids[0, L // 2 :] = ids[0, : L - L // 2].clone()
    ids[1:] = 7
    return ids


def features(B, Hq, L, dtype):
    g = torch.Generator().manual_seed(3)
    sinks = (torch.randn(Hq, generator=g, dtype=torch.float64) * 2).to(dtype)
    alibi = (torch.rand(Hq, generator=g, dtype=torch.float64) * 0.5).to(dtype)
    return {
        "sinks": dict(sinks=sinks),
        "sinks-causal": dict(sinks=sinks, causal=True),
        "alibi": dict(alibi=alibi),
        "alibi-causal": dict(alibi=alibi, causal=True, softcap=3.0),
        "segments": dict(segments=segments_of(B, L)),
        "segments-causal": dict(segments=segments_of(B, L), causal=True),
        "segments-scattered": dict(segments=segments_of(B, L, contiguous=False), causal=True),
        "two-sided": dict(window=(3, 2)),
        "right-only": dict(window=(None, 1)),
        "left-open": dict(window=(2, None), causal=True),
        "everything": dict(window=(4, 3), segments=segments_of(B, L), sinks=sinks, alibi=alibi),
    }


FEATURE_NAMES = list(features(2, 1, 4, torch.float64))
NEEDS = {"sinks": "attention sinks", "alibi": "ALiBi", "segments": "segments"}


def _serves(backend: str, q, k, v, **kw) -> str | None:
    return kernels.BACKENDS[backend].refuse(build_request(q, k, v, **kw))


def _case(shape, dtype, feature):
    B, Hq, Hkv, Lq, Lk, D, Dv = shape
    q, k, v = make_inputs(B, Hq, Hkv, Lq, Lk, D, Dv, dtype=dtype)
    return q, k, v, features(B, Hq, Lq, dtype)[feature]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("feature", FEATURE_NAMES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_matches_reference(backend, dtype, feature, shape):
    q, k, v, kw = _case(shape, dtype, feature)
    why = _serves(backend, q, k, v, **kw)
    if why is not None:
        needed = [NEEDS[name] for name in NEEDS if name in kw]
        assert backend == "flex" or any(word in why for word in needed), why
        pytest.skip(f"{backend} refuses: {why}")
    ref_out, _, ref_lse = reference_of(q, k, v, **kw)
    naive = selfattn.attention(q, k, v, backend="naive", return_lse=True, **kw)
    got = selfattn.attention(q, k, v, backend=backend, **kw)
    assert_close_to_reference(got, ref_out, naive.output, dtype=dtype)
    if kernels.BACKENDS[backend].capabilities.returns_lse and backend != "flex":
        lse = selfattn.attention(q, k, v, backend=backend, return_lse=True, **kw).lse
        assert_close_to_reference(lse, ref_lse, naive.lse, dtype=dtype, what="lse")


def test_unequal_lengths_with_sinks_alibi_and_two_sided_windows():
    """Lq ≠ Lk: positions are bottom-right (p = i + Lk − Lq) for ALiBi's distance and both window sides."""
    q, k, v = make_inputs(*UNEQUAL, dtype=torch.float64)
    kw = dict(window=(3, 1), sinks=torch.tensor([0.5, -1.0], dtype=torch.float64), alibi=torch.tensor([0.25, 1.0]))
    kw["alibi"] = kw["alibi"].double()
    ref_out, _, ref_lse = reference_of(q, k, v, **kw)
    for backend in ("naive", "tiled", "native"):
        got = selfattn.attention(q, k, v, backend=backend, return_lse=True, **kw)
        assert max_error(got.output, ref_out) < TOL["float64"], backend
        assert max_error(got.lse, ref_lse) < TOL["float64"], backend


def _loss(out):
    return (out.output * out.output).sum() + out.lse.sum()


def _grads(backend, q, k, v, kw, dtype):
    """∂(Σ out² + Σ lse)/∂(q, k, v[, sinks]) of one backend, inputs cast to `dtype`."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    kw = dict(kw)
    if "sinks" in kw:
        kw["sinks"] = kw["sinks"].detach().to(dtype).requires_grad_()
        leaves.append(kw["sinks"])
    if "alibi" in kw:
        kw["alibi"] = kw["alibi"].to(dtype)
    out = selfattn.attention(*leaves[:3], backend=backend, return_lse=True, **kw)
    return torch.autograd.grad(_loss(out), leaves)


@pytest.mark.parametrize("feature", FEATURE_NAMES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", GRAD_BACKENDS)
def test_backward_matches_float64(backend, dtype, feature):
    """Gradients of q, k, v (and the sinks) against float64 autograd through the naive path (plain PyTorch
    ops), by the rule: at most twice the naive path's error in the same dtype, plus the dtype's floor."""
    q, k, v, kw = _case(SHAPES[0], torch.float64, feature)
    want = _grads("naive", q, k, v, kw, torch.float64)
    naive = _grads("naive", q, k, v, kw, dtype) if dtype != torch.float64 else want
    got = _grads(backend, q, k, v, kw, dtype)
    for name, g, w, n in zip("q k v sinks".split(), got, want, naive, strict=False):
        scale = max(1.0, float(w.abs().max()))  # gradients sum over many keys: judged relative to their size
        err, base = max_error(g, w) / scale, max_error(n, w) / scale
        tol = TOL["float64_grad"] if dtype == torch.float64 else tolerance(dtype, base)
        assert err <= tol, f"d{name}: {err:.3g} > {tol:.3g} ({backend}, {dtype}, {feature})"


def test_naive_gradcheck_with_every_feature():
    """The naive path's gradients, sinks included, against finite differences (float64)."""
    q, k, v = (t.requires_grad_() for t in make_inputs(2, 2, 1, 6, 6, 3, 2, dtype=torch.float64, seed=4))
    sinks = torch.tensor([0.3, -0.7], dtype=torch.float64, requires_grad=True)
    seg = torch.tensor([[0, 0, 1, 1, 1, 2], [5, 5, 5, 5, 5, 5]])
    alibi = torch.tensor([0.5, 0.125], dtype=torch.float64)

    def f(q, k, v, sinks):
        out = selfattn.attention(
            q, k, v, backend="naive", window=(2, 1), sinks=sinks, alibi=alibi, segments=seg, return_lse=True
        )
        return out.output, out.lse

    assert torch.autograd.gradcheck(f, (q, k, v, sinks))


def test_sink_rows_follow_the_gpt_oss_formula():
    """w_ij = exp(s_ij) / (Σ_j exp(s_ij) + exp(sink_h)): the weights of a row sum to 1 − exp(sink − lse)."""
    q, k, v = make_inputs(1, 2, 2, 4, 4, 8, dtype=torch.float64)
    sinks = torch.tensor([1.0, -2.0], dtype=torch.float64)
    out = selfattn.attention(q, k, v, sinks=sinks, return_weights=True, return_lse=True, backend="naive")
    s = (q @ k.transpose(-1, -2)) / 8**0.5
    denominator = s.exp().sum(-1) + sinks.exp()[None, :, None]
    assert max_error(out.weights, s.exp() / denominator[..., None]) < TOL["float64_few_ops"]
    assert max_error(out.lse, denominator.log()) < TOL["float64_few_ops"]


def test_a_row_that_sees_nothing_with_a_sink_is_zero_with_the_sinks_lse():
    q, k, v = make_inputs(1, 2, 2, 3, 3, 4, dtype=torch.float64)
    mask = torch.tensor([[False] * 3, [True] * 3, [True] * 3])
    sinks = torch.tensor([0.5, -0.5], dtype=torch.float64)
    for backend in ("naive", "tiled", "native"):
        out = selfattn.attention(q, k, v, mask=mask, sinks=sinks, return_lse=True, backend=backend)
        assert torch.equal(out.output[:, :, 0], torch.zeros_like(out.output[:, :, 0])), backend
        assert torch.allclose(out.lse[0, :, 0], sinks), backend


@pytest.mark.parametrize("backend", ["naive", "tiled", "native", "sdpa"])
def test_a_nan_in_another_segment_never_reaches_a_row(backend):
    """Packed sequences: a NaN in the keys of segment 1 leaves segment 0's rows equal to segment 0 alone."""
    q, k, v = make_inputs(1, 2, 2, 300, 300, 8, dtype=torch.float32)
    seg = torch.tensor([[0] * 140 + [1] * 160])
    k_bad = k.clone()
    k_bad[:, :, 200] = float("nan")
    if backend == "sdpa":
        pytest.skip("sdpa refuses non-finite keys under a dense mask (its own test)")
    out = selfattn.attention(q, k_bad, v, segments=seg, causal=True, backend=backend)
    alone = selfattn.attention(q[:, :, :140], k[:, :, :140], v[:, :, :140], causal=True, backend="naive")
    assert torch.isfinite(out[:, :, :140]).all()
    assert max_error(out[:, :, :140], alone) <= FLOOR[torch.float32]


def test_window_pairs_normalise_and_keep_the_old_meaning():
    q, k, v = make_inputs(1, 1, 1, 6, 6, 4)
    assert build_request(q, k, v, window=(2, 0)).window == 3  # (w − 1, 0) is the window w
    assert build_request(q, k, v, window=(None, None)).window is None
    assert build_request(q, k, v, window=[1, 4]).window == (1, 4)
    ref_out, _, _ = reference_of(q, k, v, window=3)
    assert max_error(selfattn.attention(q, k, v, window=(2, 0), backend="native"), ref_out) < TOL["float64"]


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(window=(1, 2, 3)), ValueError, r"window as a pair must be \(left, right\)"),
        (dict(window=(-2, 2)), ValueError, r"window left must be >= 0, or -1 or None \(unbounded\), got -2"),
        (dict(window=(1, 2.5)), TypeError, "window right must be an int"),
        (dict(sinks=torch.zeros(3)), ValueError, r"sinks must have shape \(Hq,\) = \(2,\), got \(3,\)"),
        (dict(sinks=torch.zeros(2, dtype=torch.int64)), TypeError, "sinks must be a floating tensor"),
        (dict(sinks=torch.tensor([0.0, float("inf")])), ValueError, "sinks must be finite"),
        (dict(alibi=torch.zeros(2, requires_grad=True)), ValueError, "alibi slopes are constants"),
        (dict(segments=torch.zeros(1, 5, dtype=torch.int64)), ValueError, r"segments must have shape \(B, L\)"),
        (dict(segments=torch.zeros(1, 4)), TypeError, "segments must be an integer tensor"),
    ],
)
def test_bad_feature_arguments_are_named(kwargs, err, match):
    q, k, v = make_inputs(1, 2, 2, 4, 4, 4, dtype=torch.float32)
    with pytest.raises(err, match=match):
        selfattn.attention(q, k, v, **kwargs)


def test_segments_need_one_packed_sequence():
    q, k, v = make_inputs(1, 2, 2, 3, 4, 4, dtype=torch.float32)
    with pytest.raises(ValueError, match="segments need Lq = Lk"):
        selfattn.attention(q, k, v, segments=torch.zeros(1, 3, dtype=torch.int64))


def test_sdpa_and_flex_refuse_what_they_cannot_do_exactly_by_name():
    q, k, v = make_inputs(1, 2, 2, 4, 4, 4, dtype=torch.float32)
    sinks = build_request(q, k, v, sinks=torch.zeros(2))
    alibi = build_request(q, k, v, alibi=torch.zeros(2))
    assert "it has no attention sinks; SDPA's softmax" in kernels.BACKENDS["sdpa"].refuse(sinks)
    assert "it has no ALiBi slopes; SDPA would add" in kernels.BACKENDS["sdpa"].refuse(alibi)
    assert "it has no attention sinks; FlexAttention" in kernels.BACKENDS["flex"].refuse(sinks)
    assert kernels.choose(sinks, "auto").name in ("native", "tiled", "naive")


def test_the_rule_as_data_carries_the_features():
    q, k, v = make_inputs(1, 2, 2, 4, 4, 4, dtype=torch.float32)
    r = build_request(q, k, v, window=(1, 2), sinks=torch.tensor([0.5, 1.0]), segments=torch.zeros(1, 4).long())
    d = r.rule.as_dict()
    assert d["window"] == [1, 2] and d["sinks"] == [0.5, 1.0] and d["segments"] == [1, 4] and d["alibi"] is None


def test_flex_serves_alibi_segments_and_two_sided_windows_through_its_mods():
    """One compile on the CPU (it needs one 128-position block): the document mask and ALiBi as mods."""
    q, k, v = make_inputs(2, 2, 1, 256, 256, 16, dtype=torch.float32)
    kw = dict(window=(40, 9), segments=segments_of(2, 256), alibi=torch.tensor([0.25, 0.0625]))
    why = _serves("flex", q, k, v, **kw)
    if why is not None:
        pytest.skip(f"flex refuses here: {why}")
    ref_out, _, _ = reference_of(q, k, v, **kw)
    naive = selfattn.attention(q, k, v, backend="naive", **kw)
    assert_close_to_reference(selfattn.attention(q, k, v, backend="flex", **kw), ref_out, naive)
