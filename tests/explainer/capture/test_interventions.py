"""Interventions as data: the registry, and its proof — `block`, one query → key link cut — in the
library, the CLI and the HTTP API, checked against `selfattn.reference` on the model's weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from selfattn.cli import main
from selfattn.explainer import tracing
from selfattn.explainer.interventions import Intervention, as_data
from selfattn.explainer.web import server
from selfattn.limits import TEMPERATURE_RANGE
from tests.explainer import truth
from tests.explainer.documents import both, checked, explained, explanation, weights
from tests.explainer.tiny import tiny_explainer
from tests.tolerances import TOL

TEXT = "一只蓝色怪兽走进森林"  # <bos> 一只 蓝色 怪兽 走进 森林
VERB, NOUN = 4, 3  # 走进 → 怪兽: the verb looks back at the noun that moves
BLOCK = {"block": {"query": VERB, "key": NOUN}}
WEIGHT_ATOL = TOL["float32_model_weights"]
"""float32 model against the float64 reference, for attention weights (as in test_server)."""


def test_the_registry_is_data_the_export_carries(tiny):
    doc = explained(tiny, TEXT)
    assert doc["interventions"] == json.loads(json.dumps(as_data(), ensure_ascii=False))  # JSON as it is
    assert [e["name"] for e in doc["interventions"]] == ["no_scaling", "no_causal", "temperature", "block", "ablate"]
    for e in doc["interventions"]:
        assert set(e["label"]) == {"zh", "en"} and e["label"]["zh"] != e["label"]["en"]
        assert e["needs_baseline"] is True
        for p in e["params"]:
            assert set(p) == {"name", "type", "min", "max", "default", "label"} and p["type"] in (
                "bool",
                "int",
                "float",
            )
    (t,) = doc["interventions"][2]["params"]
    assert (t["min"], t["max"], t["default"]) == (*TEMPERATURE_RANGE, 1.0)
    assert doc["experiment"] == {"applied": {"layer": None, "head": None}}


def test_intervention_shapes_agree():
    iv = Intervention({"temperature": {"t": 2.0}, "block": {"query": 4, "key": 3}}, layer=1, head=0)
    applied = iv.as_applied()
    assert applied == {"temperature": {"t": 2.0}, "block": {"query": 4, "key": 3}, "layer": 1, "head": 0}
    assert Intervention.of(applied) == iv and hash(Intervention.of(applied)) == hash(iv)
    with pytest.raises(ValueError, match="intervention temperature is given twice"):
        Intervention({"temperature": {"t": 2.0}}, temperature=2.0)
    assert Intervention(scaling=False, temperature=0.5) == Intervention({"no_scaling": {}, "temperature": {"t": 0.5}})
    assert Intervention({"temperature": {"t": 1.0}}) == Intervention() and not Intervention(temperature=1)
    assert iv.words("en") == ["softmax temperature T = 2", "link 4 → 3 blocked"]


@pytest.mark.parametrize(
    "applied, error, match",
    [
        ({"nope": {}}, ValueError, "unknown intervention 'nope'; the interventions are no_scaling, no_causal"),
        ({"block": {"query": 1, "kee": 0}}, ValueError, r"intervention block has no parameter 'kee' \(it takes key"),
        ({"block": {"query": -1, "key": 0}}, ValueError, "block query must be >= 0, got -1"),
        ({"block": {"query": True, "key": 0}}, TypeError, "block query must be an int, got bool True"),
        ({"temperature": {"t": 0}}, ValueError, "temperature must be >= 0.01, got 0"),
        ({"no_scaling": 1}, TypeError, r"intervention no_scaling takes \{param: value\}, got int"),
    ],
)
def test_bad_values_are_refused_by_name(applied, error, match):
    with pytest.raises(error, match=match):
        Intervention(applied)


def test_block_cuts_one_link_as_the_reference_says(tiny):
    """Every head of layer 0: the weights are the reference's with (走进, 怪兽) hidden, which is the
    baseline's row renormalised without that key; nothing else of the layer's weights moves."""
    _, ids, _ = tiny.tokenize(TEXT)
    changed, doc = both(tiny, TEXT, intervention=Intervention(BLOCK))
    base, base_doc = both(tiny, TEXT)
    cut = []
    for h in range(doc["model"]["n_heads"]):
        want = truth.stages(tiny.model, ids, 0, h, blocked=(VERB, NOUN))["weights"]
        got = weights(changed, 0, h)
        np.testing.assert_allclose(got, want, rtol=0, atol=WEIGHT_ATOL, err_msg=f"head {h}")
        before = truth.stages(tiny.model, ids, 0, h)["weights"]
        renormalised = np.delete(before[VERB], NOUN) / (1 - before[VERB, NOUN])
        np.testing.assert_allclose(np.delete(got[VERB], NOUN), renormalised, rtol=0, atol=WEIGHT_ATOL)
        assert got[VERB, NOUN] == 0
        cut.append(before[VERB, NOUN])
        other = np.arange(len(ids)) != VERB
        np.testing.assert_allclose(got[other], weights(base, 0, h)[other], rtol=0, atol=TOL["float64"])
    assert max(cut) > 0.1  # a link some head used
    assert not changed.trace.layers[0].visible[VERB, NOUN] and base.trace.layers[0].visible[VERB, NOUN]
    assert doc["prediction"] != base_doc["prediction"]  # the layers above read the changed row
    e = doc["experiment"]
    assert e["applied"] == BLOCK | {"layer": None, "head": None} and e["layer"] == doc["selected"]["layer"]


def test_block_on_one_head_leaves_the_others(tiny):
    changed, doc = both(tiny, TEXT, layer=1, head=2, intervention=Intervention(BLOCK, layer=1, head=2))
    base = explanation(tiny, TEXT, layer=1, head=2)
    for h in range(4):
        same = np.allclose(weights(changed, 1, h), weights(base, 1, h), atol=TOL["float32_weights"])
        assert same == (h != 2)
    assert weights(changed, 1, 2)[VERB, NOUN] == 0
    layer = changed.trace.layers[1]
    assert not layer.changed[2].visible[VERB, NOUN] and layer.visible[VERB, NOUN]
    assert doc["experiment"]["same_x"] and doc["experiment"]["scope"] == "layer"


@pytest.mark.parametrize(
    "values, match",
    [
        ({"query": 2, "key": 4}, "query 2 cannot look at key 4 already"),  # the future, in a decoder
        ({"query": 9, "key": 0}, r"block query 9 is not a position of the text \(0 … 5\)"),
        ({"query": 1, "key": 6}, r"block key 6 is not a position of the text \(0 … 5\)"),
    ],
)
def test_block_refuses_a_link_that_is_not_there(tiny, values, match):
    with pytest.raises(ValueError, match=match):
        tracing.trace(tiny, TEXT, Intervention({"block": values}))


def test_block_of_a_future_key_works_once_the_causal_rule_is_lifted(tiny):
    trace = tracing.trace(tiny, TEXT, Intervention({"no_causal": {}, "block": {"query": 2, "key": 4}}))
    w = trace.layers[0].stages(0)["weights"]
    assert float(w[2, 4]) == 0 and float(w[2, 5]) > 0  # applied in registry order: no_causal, then block


def test_a_row_whose_only_key_is_cut_sees_nothing(tiny):
    trace = tracing.trace(tiny, TEXT, Intervention({"block": {"query": 0, "key": 0}}))
    w = trace.layers[0].stages(1)["weights"]
    assert float(w[0].abs().sum()) == 0 and torch.isinf(trace.layers[0].lse[1, 0])
    assert torch.isfinite(trace.logits).all()


def test_block_from_the_command_line(capsys, tiny, tiny_checkpoint):
    args = ["explain", TEXT, "--model", str(tiny_checkpoint), "--block", str(VERB), str(NOUN)]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == checked(tiny, TEXT, intervention=Intervention(BLOCK))
    assert doc["experiment"]["applied"] == BLOCK | {"layer": None, "head": None}
    assert "intervention" not in doc  # one shape of an intervention: `as_applied`
    assert main([*args, "--only-layer", "1", "--lang", "en"]) == 0
    assert f"Intervention: link {VERB} → {NOUN} blocked, only in layer 1" in capsys.readouterr().out
    assert main([*args]) == 0
    assert f"干预：切断 {VERB} → {NOUN}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--block", "4"], "argument --block: expected 2 arguments"),
        (["--block", "x", "3"], "argument --block: expected an integer >= 0, got 'x'"),
        (["--block", "4", "-1"], "argument --block: expected an integer >= 0, got '-1'"),
        (["--temperature", "1e-300"], "argument --temperature: expected a temperature in [0.01, 100], got '1e-300'"),
        (["--only-head", "1"], "--only-head limit an intervention to one layer / head; give one too (--no-scaling"),
        (["--only-layer", "0", "--only-head", "1"], "--only-layer and --only-head limit an intervention"),
    ],
)
def test_cli_refuses_bad_intervention_flags_before_loading(capsys, monkeypatch, args, message):
    from selfattn.explainer.session import Explainer

    def loaded(*_, **__):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(Explainer, "load", loaded)
    try:
        code = main(["explain", *args])
    except SystemExit as exc:  # argparse's own refusals exit from inside the parser
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and err.startswith("selfattn explain: error: ")


# --- HTTP ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def explainer():
    return tiny_explainer()


@pytest.fixture
def client(explainer):
    return TestClient(server.create_app(explainer))


def post(client, **body):
    return client.post("/api/explain", json=body)


def test_block_over_http_is_the_library_answer(client, explainer):
    got = post(client, text=TEXT, interventions=BLOCK | {"layer": 0}).json()
    want = checked(explainer, TEXT, intervention=Intervention(BLOCK, layer=0))
    assert got["layers"] == want["layers"] and got["stages"] == want["stages"]
    assert got["experiment"] == want["experiment"]
    assert got["experiment"]["applied"] == BLOCK | {"layer": 0, "head": None}


@pytest.mark.parametrize(
    "body, message",
    [
        ({"interventions": {"block": {"query": -1, "key": 0}}}, "interventions.block.query: Input should be greater"),
        ({"interventions": {"block": {"query": "4", "key": 0}}}, "interventions.block.query: Input should be a valid"),
        ({"interventions": {"nope": {}}}, "interventions.nope: Extra inputs are not permitted"),
        ({"interventions": {"temperature": {"t": 1000}}}, "interventions.temperature.t: Input should be less than"),
        ({"interventions": {"no_causal": {"on": True}}}, "interventions.no_causal.on: Extra inputs"),
        ({"interventions": {"no_causal": {}}, "causal": False}, "give the interventions as `interventions` or as"),
        ({"interventions": {"block": {"query": 2, "key": 4}}}, "query 2 cannot look at key 4 already"),
    ],
)
def test_bad_interventions_over_http_are_a_422_naming_the_field(client, body, message):
    r = post(client, text=TEXT, **body)
    assert r.status_code == 422 and message in r.json()["detail"]


def test_a_scope_with_nothing_to_apply_changes_nothing(client):
    plain = post(client, text=TEXT).json()
    doc = post(client, text=TEXT, only_head=1).json()
    assert doc["layers"] == plain["layers"] and doc["prediction"] == plain["prediction"]
    assert doc["experiment"] == {"applied": {"layer": None, "head": 1}}  # nothing compared: nothing changed
    for body in ({"only_head": 9}, {"interventions": {"head": 9}}):
        r = post(client, text=TEXT, **body)
        assert r.status_code == 422 and "intervention head must be in [0, 1], got 9" in r.json()["detail"]


def test_one_forward_pass_per_change(explainer):
    """The page shows a text, then changes the intervention twice: each change costs ONE pass, the changed text
    and its control and contrast sentences in one batch (analysis.held: the tutorial's relations measured where
    they are not adjacent, under the same change; `tracing.trace_with_controls`), no more (the experiment's
    baseline is never rerun); the first text also costs the induction
    probe's pass (`probe`: the model as it is, kept in the server's cache, so no later request reruns it); the
    page's own requests for its baseline, another layer's arrays and a head search cost none."""
    passes = []
    hook = explainer.model.register_forward_hook(lambda *_: passes.append(1))
    try:
        client = TestClient(server.create_app(explainer))
        asks = [
            ({}, 2),  # the text shown with its controls (one batch), and the induction probe (once per cache)
            ({"interventions": {"no_causal": {}}}, 1),  # a change: the changed text with its controls; baseline kept
            ({}, 0),  # the page's baseline
            ({"interventions": {"no_causal": {}}, "layers": [1]}, 0),  # another layer of the changed text
            ({"layers": [1]}, 0),  # and of its baseline
            ({"interventions": BLOCK}, 1),  # the next change
            ({"find": [VERB, NOUN], "layers": []}, 0),  # a head search on the shown text
        ]
        for body, cost in asks:
            before = len(passes)
            r = post(client, text=TEXT, format="packed", **body)
            assert r.status_code == 200, r.text
            assert len(passes) - before == cost, body
    finally:
        hook.remove()


def test_head_search_over_http_is_heads_search(client, explainer):
    doc = post(client, text=TEXT, find=[VERB, NOUN], layers=[]).json()
    assert doc["search"] == explained(explainer, TEXT, find=(VERB, NOUN))["search"]
    assert not any(layer["held"] or "weights" in layer for layer in doc["layers"])  # no array was asked for
