import json

import numpy as np
import pytest
import torch

import selfattn
from selfattn import reference
from selfattn.explainer import tracing
from selfattn.explainer.analysis import heads as heads_module
from selfattn.explainer.analysis import summary
from selfattn.explainer.capture.trace import capture
from selfattn.explainer.interventions import Intervention
from selfattn.explainer.views import checkable
from selfattn.explainer.views.codec import unpack
from tests.explainer.documents import both, explained, explanation, weights
from tests.tolerances import TOL

TEXT = "一只蓝色怪兽走进森林"


def test_stages_are_the_reference_computation(tiny):
    trace = tracing.trace(tiny, TEXT)
    assert trace.tokens == ["<bos>", "一只", "蓝色", "怪兽", "走进", "森林"]
    assert trace.n_layers == 2 and trace.n_heads == 4 and trace.logits.shape[0] == 6
    for layer in trace.layers:
        for h in range(layer.n_heads):
            st = layer.stages(h)
            kv = layer.kv_head(h)
            out, w, lse = reference.attention(
                layer.q[None, h : h + 1].numpy(),
                layer.k[None, kv : kv + 1].numpy(),
                layer.v[None, kv : kv + 1].numpy(),
                causal=True,
                scale=layer.scale,
            )
            np.testing.assert_allclose(st["weights"].numpy(), w[0, 0], atol=TOL["float32_weights"])
            np.testing.assert_allclose(st["weighted"].numpy(), out[0, 0], atol=TOL["float32"])
            np.testing.assert_allclose(
                st["scores"].numpy() * layer.scale, st["scaled"].numpy(), rtol=TOL["same_op_rel"]
            )
            assert np.isneginf(st["masked"].numpy()[~reference.causal_mask(6)]).all()
            assert (st["weights"].numpy()[~reference.causal_mask(6)] == 0).all()
            np.testing.assert_allclose(
                layer.stages(h, [2, 5])["weights"].numpy(), w[0, 0, [2, 5]], atol=TOL["float32_weights"]
            )


def test_layer_outputs_chain(tiny):
    trace = tracing.trace(tiny, TEXT)
    # the second layer's attention reads LN(first block's output)
    with torch.no_grad():
        assert torch.allclose(trace.layers[1].x, tiny.model.blocks[1].ln_1(trace.layers[0].output), atol=TOL["float32"])
        # and the last block's output, through the final LN and head, gives the logits
        logits = tiny.model.lm_head(tiny.model.ln_f(trace.layers[-1].output))
    assert torch.allclose(logits, trace.logits, atol=TOL["float32_logits"])


@pytest.mark.parametrize("change", [dict(scaling=False), dict(causal=False), dict(temperature=3.0)])
def test_interventions_change_the_computation_and_are_undone(tiny, change):
    base = tracing.trace(tiny, TEXT)
    other = tracing.trace(tiny, TEXT, Intervention(**change))
    assert not torch.allclose(base.logits, other.logits)
    layer = other.layers[0]
    if "scaling" in change:
        assert layer.scale == 1.0
    if "temperature" in change:
        assert layer.scale == pytest.approx(base.layers[0].scale / 3)
    if "causal" in change:
        assert bool(layer.visible.all()) and not layer.causal
        assert other.layers[0].stages(0)["weights"][0, 1:].sum() > 0  # the first token now sees the future
    again = tracing.trace(tiny, TEXT)  # the model is left as it was
    assert torch.equal(again.logits, base.logits)
    assert all(m.causal for m in (b.attn for b in tiny.model.blocks))


def test_intervention_values_are_checked():
    with pytest.raises(ValueError, match="temperature must be >= 0.01, got 0"):
        Intervention(temperature=0)
    with pytest.raises(ValueError, match="temperature must be >= 0.01, got 1e-300"):
        Intervention(temperature=1e-300)
    with pytest.raises(ValueError, match="temperature must be finite, got nan"):
        Intervention(temperature=float("nan"))
    with pytest.raises(TypeError, match="temperature must be a real number, got bool True"):
        Intervention(temperature=True)
    with pytest.raises(TypeError, match="scaling must be a bool"):
        Intervention(scaling="no")


def test_capture_refuses_bad_input(tiny):
    with pytest.raises(ValueError, match="2 token strings for 3 token ids"):
        capture(tiny.model, torch.tensor([2, 4, 5]), ["a", "b"])
    with pytest.raises(ValueError, match="one input at a time, got a batch of 2"):
        capture(tiny.model, torch.zeros(2, 3, dtype=torch.long), ["a", "b", "c"])
    with pytest.raises(ValueError, match="has no MultiHeadSelfAttention"):
        capture(torch.nn.Linear(2, 2), torch.zeros(3, dtype=torch.long), ["a", "b", "c"])
    with pytest.raises(ValueError, match="row 9 is out of range for Lq=6"):
        tracing.trace(tiny, TEXT).layers[0].stages(0, [9])


def test_export_is_standard_json_and_consistent(tiny):
    e, doc = both(tiny, TEXT)
    text = json.dumps(doc, allow_nan=False, ensure_ascii=False)  # every array packed: standard JSON
    assert json.loads(text)["tokens"] == doc["tokens"]
    assert doc["model"]["kind"] == "decoder" and doc["model"]["n_kv_heads"] == 2
    assert doc["selfattn_version"] == selfattn.__version__
    for l, layer in enumerate(doc["layers"]):
        for h, head in enumerate(layer["heads"]):  # the page's weights: the captured ones at 0.01 %
            np.testing.assert_allclose(
                unpack(head["weights"]), weights(e, l, h), rtol=0, atol=TOL["rounded_to_4_decimals"]
            )
    assert sum(p["prob"] for p in doc["prediction"]) <= 1 + TOL["float64_short_sum"]
    assert len(doc["prediction"]) == 5
    arrays = checkable.npz_arrays(e)
    assert arrays["layer1/weights"].shape == (4, 6, 6) and str(arrays["model_name"]) == "tiny"


def test_long_input_keeps_qkv_not_stages(tiny):
    e, doc = both(tiny, "森林" * 900, layers=[0, 1])  # both held, whatever a page could hold (layers="auto")
    assert len(doc["tokens"]) == 901
    assert set(doc["layers"][0]["heads"][0]) >= {"q", "k", "v", "lse", "weights"}
    w = weights(e, 1, 2)
    assert w.shape == (901, 901) and np.allclose(w.sum(1), 1, atol=TOL["float32_long_row_sum"])
    np.testing.assert_allclose(
        unpack(doc["layers"][1]["heads"][2]["weights"]), w, rtol=0, atol=TOL["rounded_to_4_decimals"]
    )


def test_pick_rule_is_the_documented_one(tiny):
    doc = explained(tiny, TEXT)
    table, described = doc["summaries"], doc["descriptions"]
    allowed = [
        (l, h)
        for l, heads in enumerate(table)
        for h, s in enumerate(heads)
        if s["first_token"] < summary.SINK_LIMIT and s["self"] < heads_module.SELF_LIMIT
    ] or [(l, h) for l, heads in enumerate(table) for h in range(len(heads))]
    teaching = [(described[l][h]["mean"], l, h) for l, h in allowed if described[l][h]["kind"] == "relation"]
    if teaching:
        best = max(w for w, _, _ in teaching)
        l, h = next((l, h) for w, l, h in teaching if w == best)
    else:
        _, l, h = min((table[l][h]["entropy"], l, h) for l, h in allowed)
    assert (doc["selected"]["layer"], doc["selected"]["head"]) == (l, h) and doc["selected"]["rule"] == "auto"
    w = weights(explanation(tiny, TEXT), l, h)[1:]  # rows that see >= 2 tokens (row 0 sees only <bos>)
    ent = -np.sum(np.where(w > 0, w * np.log2(np.where(w > 0, w, 1)), 0), axis=1).mean()
    assert ent == pytest.approx(table[l][h]["entropy"], abs=TOL["float32_weights"])
    assert np.diag(w[:, 1:]).mean() == pytest.approx(table[l][h]["self"], abs=TOL["float32_weights"])
    assert explained(tiny, TEXT, layer=1, head=0)["selected"] == {"layer": 1, "head": 0, "rule": None}
    with pytest.raises(ValueError, match=r"head must be in \[0, 3\], got 7"):
        explained(tiny, TEXT, head=7)


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "text is empty"),
        ("a\x00b", "control character"),
        ("森" * 5000, "5000 characters"),
        (3, "text must be a str"),
    ],
)
def test_bad_text_is_refused(tiny, text, match):
    with pytest.raises((ValueError, TypeError), match=match):
        explained(tiny, text)
