"""Adding a backend, as docs/architecture.md says: a `Backend` subclass with its Capabilities and Cost,
registered. A real one — naive's maths in float64, through the request's score rule — refused and chosen
by dispatch as its declarations say, and listed by `explain`."""

from __future__ import annotations

import pytest
import torch

import selfattn
from selfattn import kernels
from selfattn.kernels.base import Backend, Capabilities, Cost, Result
from selfattn.request import build_request
from selfattn.weights import weights_from_lse

from ..helpers import make_inputs, reference_of
from ..tolerances import TOL


class Float64(Backend):
    """Attention weights in float64 whatever the input dtype: the score rule, a log-sum-exp, exp(s − lse)."""

    name = "float64"
    capabilities = Capabilities(
        returns_weights=True,
        returns_lse=True,
        softcap=True,
        dropout=False,
        backward=False,
        notes={"dropout": "use backend='naive'"},
    )

    def forward(self, r):
        q = r.q.double().reshape(r.B, r.Hkv, r.G * r.Lq, r.D)
        raw = (q @ r.k.double().transpose(-1, -2)).view(r.B, r.Hq, r.Lq, r.Lk)
        logits = r.rule.logits(raw, None, None, r.Lq, r.Lk)
        lse = torch.logsumexp(logits, dim=-1) if r.Lk else logits.new_full((r.B, r.Hq, r.Lq), float("-inf"))
        weights = weights_from_lse(logits, lse)
        out = (weights.reshape(r.B, r.Hkv, r.G * r.Lq, r.Lk) @ r.v.double()).view(r.B, r.Hq, r.Lq, r.Dv)
        return Result(out.to(r.q.dtype), weights if r.return_weights else None, lse if r.return_lse else None)


FAST = Cost(
    work=lambda r: (r.Lq * r.Lk, 1e6, 0.0), read_gbps=1e6, call_seconds=1e-9, backward_factor=1.0, busy_factor=1.0
)
"""A cost record that makes it the fastest by far: "auto" takes it wherever it can serve."""


@pytest.fixture
def registered():
    backend = kernels.register(Float64())
    try:
        yield backend
    finally:
        kernels.BACKENDS.pop(backend.name)


def test_a_registered_backend_serves_by_name_and_is_listed(registered):
    q, k, v = make_inputs(1, 4, 2, 5, 7, 3, 2, dtype=torch.float32)
    kwargs = dict(causal=True, window=3, softcap=2.0)
    res = selfattn.attention(q, k, v, backend="float64", return_weights=True, return_lse=True, **kwargs)
    want_out, want_weights, want_lse = reference_of(q, k, v, **kwargs)
    torch.testing.assert_close(res.output.double().numpy(), want_out, atol=TOL["float32"], rtol=0)
    torch.testing.assert_close(res.weights.numpy(), want_weights, atol=TOL["float64"], rtol=0)
    torch.testing.assert_close(res.lse.numpy(), want_lse, atol=TOL["float64"], rtol=0)
    e = kernels.explain(dict(q=q, k=k, v=v, **kwargs))
    assert "float64" in e["backends"] and "float64" in kernels.render(e)
    assert kernels.auto_order()[-1] == "float64"


def test_without_a_cost_record_auto_passes_it_over_and_says_why(registered):
    q, k, v = make_inputs(1, 1, 1, 4, 4, 8, dtype=torch.float32)
    r = build_request(q, k, v, return_weights=True)
    e = kernels.explain(r)
    assert e["choice"] == "naive"
    assert e["backends"]["float64"]["reasons"] == [kernels.dispatch.NO_COST]
    assert kernels.explain(r, backend="float64")["choice"] == "float64"  # by name it serves
    with kernels.budget(10):  # naive over its budget: nothing auto may take, every reason named
        with pytest.raises(ValueError, match=r"no backend can serve.*float64: it has no cost record"):
            kernels.choose(r, "auto")


def test_with_a_cost_record_auto_chooses_it_where_it_can_serve(registered, monkeypatch):
    monkeypatch.setattr(registered, "cost", FAST)
    q, k, v = make_inputs(1, 2, 2, 6, 6, 4, dtype=torch.float32)
    assert kernels.choose(build_request(q, k, v, causal=True), "auto") is registered
    out = selfattn.attention(q, k, v, causal=True)  # through auto
    torch.testing.assert_close(out.double().numpy(), reference_of(q, k, v, causal=True)[0], atol=TOL["float32"], rtol=0)
    dropout = build_request(q, k, v, dropout_p=0.1)  # what it lacks: refused by its capabilities, by name
    assert kernels.BACKENDS["float64"].refuse(dropout) == "it has no dropout; use backend='naive'"
    assert kernels.choose(dropout, "auto").name != "float64"
    grad = build_request(q.requires_grad_(), k, v)
    assert "it has no backward pass" in kernels.explain(grad)["backends"]["float64"]["reasons"]


def test_register_refuses_what_is_not_a_backend(registered):
    with pytest.raises(ValueError, match="a backend called 'float64' is registered already"):
        kernels.register(Float64())
    with pytest.raises(TypeError, match="register needs a selfattn.kernels.Backend, got str"):
        kernels.register("float64")
    auto = type("Auto", (Float64,), {"name": "auto"})
    with pytest.raises(ValueError, match="a name other than 'auto'"):
        kernels.register(auto())
    bare = type("Bare", (Backend,), {"name": "bare"})
    with pytest.raises(TypeError, match="backend 'bare' declares no Capabilities"):
        kernels.register(bare())


@pytest.mark.parametrize("feature, words", [("sinks", "attention sinks"), ("alibi", "ALiBi"), ("segments", "segments")])
def test_a_backend_without_a_score_feature_refuses_it_by_name(feature, words):
    """sinks, ALiBi slopes and segments are Capabilities flags: a backend that does not declare one refuses
    a request that sets it, by name, and "auto" takes one that does."""
    q, k, v = make_inputs(1, 2, 2, 4, 4, 4, dtype=torch.float32)
    values = {"sinks": torch.zeros(2), "alibi": torch.zeros(2), "segments": torch.zeros(1, 4, dtype=torch.int64)}
    r = build_request(q, k, v, **{feature: values[feature]})
    plain = Capabilities(returns_weights=False, returns_lse=True, softcap=False, dropout=False)
    assert any(words in why for why in plain.not_supported_reasons(r))
    assert kernels.choose(r, "auto").name in ("naive", "tiled", "native", "sdpa")
    assert r.rule.as_dict()[feature] is not None and build_request(q, k, v).rule.as_dict()[feature] is None
