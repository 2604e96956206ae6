"""Score features as data: one keyword list (`attention`'s signature), one entry per feature (`scores.FEATURES`),
and the code that builds scores generically asks the rule instead of naming a feature."""

import inspect
import pathlib
import re

import numpy as np
import pytest
import torch

import selfattn
from selfattn import reference
from selfattn.distributed import ring
from selfattn.kernels.base import EVERY_FEATURE, Capabilities
from selfattn.request import REQUEST_DEFAULTS, REQUEST_KEYWORDS, build_request
from selfattn.scores import FEATURES, PER_HEAD, POSITIONAL, ScoreRule
from tests.tolerances import TOL

from .helpers import make_inputs

SRC = pathlib.Path(selfattn.__file__).parent

GENERIC = ("kernels/naive.py", "kernels/tiled.py", "distributed/blocks.py", "explainer/stages.py")
"""Files that build scores generically: they name no feature that changes the scores themselves (the sinks,
a term of the softmax's denominator, stay named where that denominator is computed)."""


def test_the_keyword_list_is_attentions_signature():
    """`attention`'s keyword-only parameters are the request's keywords and `backend`, and the ring takes the
    same features by name (no second list of them)."""
    params = inspect.signature(selfattn.attention).parameters
    keywords = [name for name, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert sorted(keywords) == sorted([*REQUEST_KEYWORDS, "backend"]) and len(keywords) == len(REQUEST_KEYWORDS) + 1
    assert {name: params[name].default for name in REQUEST_KEYWORDS} == REQUEST_DEFAULTS
    assert set(FEATURES) <= set(REQUEST_KEYWORDS)
    assert not set(FEATURES) & set(inspect.signature(ring.ring_attention).parameters)


@pytest.mark.parametrize("path", GENERIC)
def test_generic_scorers_name_no_feature(path):
    text = (SRC / path).read_text()
    named = [name for name in FEATURES if name != "sinks" and re.search(rf"\b{name}\b", text)]
    assert named == [], f"{path} names {named}: ask the rule (bias, apart, features) instead"


def test_at_most_nine_files_name_alibi():
    """The bound: the rule entry, the reference, the C++ branch, the flex mod, the public signature, SDPA's refusal
    note, the model-card reading of a transformers config (source/resolve, its text), and FlashAttention's drop-in
    (`compat.flash_attn_func`'s alibi_slopes, FlashAttention's own name)."""
    files = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*") if p.is_file() and p.suffix in (".py", ".cpp", ".h"))
    naming = {f for f in files if "alibi" in (SRC / f).read_text(errors="replace")}
    # the C++ is one translation unit (attention.cpp and the csrc/ headers it includes): one branch, one place
    units = {"kernels/csrc" if f.startswith("kernels/csrc/") else f for f in naming}
    assert len(units) <= 9, sorted(units)


def test_a_backend_refuses_what_its_capabilities_leave_out_by_the_rule():
    q, k, v = make_inputs(1, 2, 2, 4, 4, 4, dtype=torch.float64)
    r = build_request(q, k, v, alibi=torch.tensor([0.5, 0.25], dtype=torch.float64), sinks=torch.zeros(2).double())
    assert [f.name for f in r.rule.unsupported(frozenset({"sinks"}))] == ["alibi"]
    assert r.rule.unsupported(EVERY_FEATURE) == []
    only_segments = Capabilities(
        returns_weights=True, returns_lse=True, softcap=True, dropout=True, features=frozenset({"segments"})
    )
    reasons = only_segments.not_supported_reasons(r)
    assert reasons == ["it has no attention sinks", "it has no ALiBi slopes"]


def test_with_rule_changes_the_rule_and_what_it_derives():
    """`Request.with_rule` is `dataclasses.replace` for the rule's fields: a changed causal rule / window gives
    new bounds (nothing cached on the old rule leaks), and the result equals a request built that way."""
    q, k, v = make_inputs(1, 2, 1, 5, 5, 3, dtype=torch.float64)
    r = build_request(q, k, v, causal=True, window=2)
    assert r.rule.bounds == (1, 0)
    lifted = r.with_rule(causal=False, window=None)
    assert lifted.rule.bounds is None and lifted.causal is False and r.rule.bounds == (1, 0)
    got = selfattn.kernels.choose(lifted, "naive").forward(lifted).output
    want = selfattn.attention(q, k, v, backend="naive")
    assert torch.equal(got, want)
    with pytest.raises(TypeError):
        r.with_rule(slopes=None)


def test_keywords_and_without_positions_round_trip():
    """`keywords()` is the rule as `attention`'s arguments: the same call gives the same output, and
    `without_positions` drops exactly the POSITIONAL fields."""
    q, k, v = make_inputs(2, 2, 1, 6, 6, 4, dtype=torch.float64)
    slopes = torch.tensor([0.5, 0.125], dtype=torch.float64)
    r = build_request(q, k, v, causal=True, window=(3, None), softcap=2.0, alibi=slopes)
    again = selfattn.attention(q, k, v, **r.rule.keywords(), backend="naive")
    direct = selfattn.attention(q, k, v, causal=True, window=(3, None), softcap=2.0, alibi=slopes, backend="naive")
    assert torch.equal(again, direct)
    plain = r.rule.without_positions()
    assert all(getattr(plain, name) in (None, False) for name in POSITIONAL)
    assert (plain.scale, plain.softcap) == (r.scale, 2.0)


def test_one_head_cuts_every_per_head_feature():
    q, k, v = make_inputs(1, 4, 2, 3, 3, 2, dtype=torch.float64)
    values = {name: torch.arange(4, dtype=torch.float64) / 8 for name in PER_HEAD}
    r = build_request(q, k, v, **values)
    one = r.one_head(3)
    assert all(getattr(one.rule, name).tolist() == [3 / 8] for name in PER_HEAD)


def test_feature_terms_of_the_rule_against_the_reference():
    """The rule's generic hooks (`bias`, `apart`) give the reference's weights with ALiBi and segments (float64)."""
    g = torch.Generator().manual_seed(5)
    B, H, L, D = 2, 3, 7, 4
    q, k, v = (torch.randn(B, H, L, D, generator=g, dtype=torch.float64) for _ in range(3))
    slopes = torch.rand(H, generator=g, dtype=torch.float64)
    segments = torch.tensor([[0, 0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 1, 1, 2]])
    rule = ScoreRule(scale=0.5, alibi=slopes, segments=segments, causal=True)
    assert rule.biased and rule.parted
    weights = torch.softmax(rule.logits(q @ k.transpose(-1, -2)), dim=-1)
    _, want, _ = reference.attention(q, k, v, scale=0.5, alibi=slopes, segments=segments, causal=True)
    assert np.allclose(weights.numpy(), want, rtol=0, atol=TOL["float64"])
    assert ScoreRule(scale=1.0).bias(None, None, L, L, dtype=torch.float64, device="cpu") is None
    assert ScoreRule(scale=1.0).apart() is None
