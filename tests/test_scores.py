"""The score rule (`selfattn.scores.ScoreRule`): its logits against the float64 spec and a plain formula,
the base-2 form the tiled kernel keeps, its NaN-proof hiding, and the mask helpers it relies on."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from selfattn import masks, reference
from selfattn.request import build_request
from selfattn.scores import LOG2_E, ScoreRule, additive_in, finite_extent
from selfattn.weights import weights_from_lse

from .helpers import make_inputs
from .tolerances import TOL

CASES = [
    dict(),
    dict(causal=True),
    dict(causal=True, window=3, softcap=1.5),
    dict(window=2, scale=-0.7),
    dict(mask="bool", causal=True),
    dict(mask="additive", softcap=4.0),
]


def _mask(kind, B, Hq, Lq, Lk):
    g = torch.Generator().manual_seed(7)
    if kind == "bool":
        m = torch.rand(B, 1, Lq, Lk, generator=g) > 0.3
        m[..., 0, :] = False  # a row that sees nothing
        return m
    m = torch.randn(1, Hq, Lq, Lk, generator=g, dtype=torch.float64)
    m[0, 0, 1, 2] = -math.inf
    return m


@pytest.mark.parametrize("kwargs", CASES, ids=str)
def test_the_rules_logits_give_the_specs_weights(kwargs):
    kwargs = dict(kwargs)
    B, Hq, Hkv, Lq, Lk, D = 2, 4, 2, 5, 7, 3
    q, k, v = make_inputs(B, Hq, Hkv, Lq, Lk, D)
    if "mask" in kwargs:
        kwargs["mask"] = _mask(kwargs["mask"], B, Hq, Lq, Lk)
    r = build_request(q, k, v, **kwargs)
    raw = torch.einsum("bhqd,bhkd->bhqk", q, k.repeat_interleave(Hq // Hkv, dim=1))
    logits = r.rule.logits(raw, None, None, Lq, Lk)
    np_mask = None if r.mask is None else r.mask.numpy()
    _, weights, lse = reference.attention(q.numpy(), k.numpy(), v.numpy(), **{**kwargs, "mask": np_mask})
    np.testing.assert_array_equal(np.isneginf(logits.numpy()), weights == 0)
    got = weights_from_lse(logits, torch.as_tensor(lse))
    np.testing.assert_allclose(got.numpy(), weights, atol=TOL["float64_lse"], rtol=0)


def test_the_rules_steps_are_the_plain_formula():
    """raw · scale → c·tanh(·/c) → + mask → −inf where hidden, written out here by hand."""
    g = torch.Generator().manual_seed(2)
    raw = torch.randn(1, 2, 4, 6, generator=g, dtype=torch.float64) * 5
    mask = torch.randn(1, 2, 4, 6, generator=g, dtype=torch.float64)
    mask[0, 1, 3, 0] = -math.inf
    rule = ScoreRule(scale=0.3, softcap=2.0, mask=mask, causal=True, window=3)
    s = 2.0 * torch.tanh(raw * 0.3 / 2.0) + mask
    j, p = torch.arange(6)[None, :], torch.arange(4)[:, None] + 2
    s = s.masked_fill(~((j <= p) & (j > p - 3)) | (mask == -math.inf), -math.inf)
    assert torch.equal(rule.logits(raw), s)
    stages = rule.stages(raw, keep_tanh=True)
    assert torch.equal(stages["scaled"], 2.0 * torch.tanh(raw * 0.3 / 2.0))
    assert torch.equal(stages["tanh"], torch.tanh(raw * 0.3 / 2.0)) and torch.equal(stages["masked"], s)
    rows, cols = torch.tensor([1, 3]), torch.tensor([0, 4, 5])
    assert torch.equal(rule.logits(raw[:, :, rows][..., cols], rows, cols, 4, 6), s[:, :, rows][..., cols])


@pytest.mark.parametrize("softcap", [None, 3.0])
def test_base_two_and_folded_forms_are_the_natural_logits_times_log2e(softcap):
    g = torch.Generator().manual_seed(3)
    raw = torch.randn(2, 3, 5, generator=g, dtype=torch.float64)
    rule = ScoreRule(scale=0.5, softcap=softcap)
    natural = rule.scaled(raw)
    np.testing.assert_allclose(rule.scaled(raw, unit=LOG2_E), natural * LOG2_E, rtol=TOL["same_op_rel"])
    folded = rule.scaled(raw * rule.alpha(LOG2_E), unit=LOG2_E, folded=True)
    np.testing.assert_allclose(folded, natural * LOG2_E, rtol=TOL["few_ops_rel"])
    s, tanh = rule.scaled(raw * rule.alpha(), folded=True, keep_tanh=True)
    assert (tanh is None) == (softcap is None)
    np.testing.assert_allclose(s, natural, rtol=TOL["few_ops_rel"])


def test_hiding_is_nan_proof():
    """+inf or NaN scores behind a −inf mask entry, a False bool entry or the causal rule end as −inf."""
    s = torch.tensor([[math.inf, math.nan, 1.0]])
    additive = torch.tensor([[-math.inf, -math.inf, 0.5]])
    assert torch.equal(ScoreRule(scale=1.0).hide(s, additive), torch.tensor([[-math.inf, -math.inf, 1.5]]))
    boolean = torch.tensor([[False, False, True]])
    assert torch.equal(ScoreRule(scale=1.0).hide(s, boolean), torch.tensor([[-math.inf, -math.inf, 1.0]]))
    hidden = torch.tensor([[True, True, False]])
    out = s.clone()
    ScoreRule(scale=1.0).hide(out, hidden=hidden, inplace=True)
    assert torch.equal(out, torch.tensor([[-math.inf, -math.inf, 1.0]]))


def test_visibility_is_one_rule_for_tiles_and_positions():
    rule = ScoreRule(scale=1.0, causal=True, window=2)
    rows, cols = torch.tensor([0, 2, 3]), torch.tensor([1, 2, 5])
    whole = masks.visibility(4, 6, causal=True, window=2)
    assert torch.equal(rule.visible(rows, cols, 4, 6), whole[rows][:, cols])
    p, j = torch.tensor(4), torch.arange(6)
    assert rule.visible_at(p, j).tolist() == [False, False, False, True, True, False]
    assert torch.equal(ScoreRule(scale=1.0).visible(None, None, 2, 3), torch.ones(2, 3, dtype=torch.bool))


def test_additive_masks_saturate_to_the_compute_dtype_and_minus_inf_stays():
    m = torch.tensor([-1e300, -3e38, 1e300, -math.inf, 0.25], dtype=torch.float64)
    info = torch.finfo(torch.float32)
    out = additive_in(m, torch.float32)
    assert out.dtype == torch.float32
    assert out.tolist() == [info.min, float(torch.tensor(-3e38, dtype=torch.float32)), info.max, -math.inf, 0.25]
    assert additive_in(m, torch.float64) is m


def test_finite_extent_skips_infinities_and_broadcast_copies(monkeypatch):
    m = torch.tensor([[-math.inf, 2.0], [-5.0, 1.0]]).reshape(1, 1, 2, 2).expand(3, 4, 2, 2)
    assert finite_extent(m) == 5.0
    assert finite_extent(torch.full((1, 1, 2, 2), -math.inf)) == 0.0
    assert finite_extent(torch.tensor([[[[1.0, -7.0]]]])) == 7.0
    monkeypatch.setattr("selfattn.scores.EXTENT_CHUNK", 3)  # one row per step
    big = torch.zeros(1, 2, 5, 4)
    big[0, 1, 4, 3], big[0, 0, 0, 0] = -9.0, -math.inf
    assert finite_extent(big) == 9.0


def test_base_two_only_where_the_mask_fits():
    assert ScoreRule(scale=1.0).base2_fits(torch.float32)
    mask = torch.zeros(1, 1, 2, 2)
    mask[0, 0, 1] = torch.finfo(torch.float32).min
    assert not ScoreRule(scale=1.0, mask=mask).base2_fits(torch.float32)
    assert ScoreRule(scale=1.0, mask=mask.double()).base2_fits(torch.float64)
    assert ScoreRule(scale=1.0, mask=torch.full((1, 1, 2, 2), -math.inf)).base2_fits(torch.float32)


def test_the_rule_as_data_and_of_a_request():
    q, k, v = make_inputs(1, 2, 1, 3, 4, 4)
    r = build_request(q, k, v, causal=True, window=2, softcap=5.0, mask=torch.ones(3, 4, dtype=torch.bool))
    assert ScoreRule.of(r).as_dict() == r.rule.as_dict()
    d = r.rule.as_dict()
    assert json.loads(json.dumps(d)) == d
    assert d == {
        "scale": 0.5,
        "softcap": 5.0,
        "causal": True,
        "window": 2,
        "mask": {"kind": "bool", "shape": [1, 1, 3, 4]},
        "sinks": None,
        "alibi": None,
        "segments": None,
    }
    assert r.rule is r.rule  # built once per request
    with pytest.raises(ValueError, match="4-D"):
        ScoreRule(scale=1.0, mask=torch.ones(3, 4))
