"""The web app through FastAPI's TestClient: the same numbers as Python, interventions that
change them as `selfattn.reference` says, every bad request a 4xx with a message."""

from __future__ import annotations

import dataclasses
import json
import re
import threading

import numpy as np
import pytest
from fastapi.testclient import TestClient

from selfattn.explainer import pipeline, tracing
from selfattn.explainer.interventions import Intervention
from selfattn.explainer.session import MAX_CHARS
from selfattn.explainer.views import report
from selfattn.explainer.web import server
from tests.explainer import truth
from tests.explainer.documents import checked, explained
from tests.explainer.tiny import MAX_LEN, slash_explainer, tiny_explainer
from tests.tolerances import TOL

TEXT = "一只蓝色怪兽走进森林"
WEIGHT_ATOL = TOL["float32_model_weights"]
"""float32 model against the float64 reference, for attention weights (observed: < 1e-6)."""


@pytest.fixture(scope="module")
def explainer():
    return tiny_explainer()


@pytest.fixture(scope="module")
def client(explainer):
    return TestClient(server.create_app(explainer))


def post(client, **body):
    return client.post("/api/explain", json=body)


def test_page_is_the_explorer_in_live_mode(client):
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    policy = r.headers["content-security-policy"]
    assert "connect-src 'self'" in policy and "default-src 'none'" in policy
    data = json.loads(re.search(r'id="selfattn-data">(.*?)</script>', r.text, re.S).group(1))
    assert data["mode"] == "live" and data["doc"]["text"] == TEXT
    assert data["limits"] == {"max_chars": MAX_CHARS, "max_tokens": MAX_LEN}


def test_answer_is_the_export_dict_of_python(client, explainer):
    r = post(client, text=TEXT, layer=1, head=0)
    assert r.status_code == 200
    assert r.json() == checked(explainer, TEXT, layer=1, head=0)  # what `selfattn explain --json` prints
    assert r.json()["tokens"] == ["<bos>", "一只", "蓝色", "怪兽", "走进", "森林"]  # jieba's words


def test_packed_answer_holds_the_same_numbers(client, explainer):
    plain = post(client, text=TEXT, layer=1, head=1).json()
    packed = post(client, text=TEXT, layer=1, head=1, format="packed").json()  # the shown layer's arrays are held
    layer = tracing.trace_with_controls(explainer, TEXT)[0].layers[1]  # as explain traces the text: with its controls
    kv = layer.kv_head(1)
    for name, want in (("q", layer.q[1]), ("k", layer.k[kv]), ("v", layer.v[kv])):  # in float16, as the page holds
        got = report.unpack(packed["layers"][1]["heads"][1][name])
        np.testing.assert_array_equal(got, want.half().double().numpy())
    np.testing.assert_array_equal(report.unpack(packed["layers"][1]["heads"][1]["lse"]), layer.lse[1].numpy())
    assert packed["full_layers"] == [1] and "x" in packed["layers"][1]  # the shown layer's vectors whole
    assert packed["prediction"] == plain["prediction"] and packed["summaries"] == plain["summaries"]


@pytest.mark.parametrize(
    "intervention",
    [
        Intervention(scaling=False),
        Intervention(causal=False),
        Intervention(temperature=2.5),
        Intervention(scaling=False, causal=False, temperature=0.5),
    ],
    ids=["no-scaling", "no-causal", "temperature", "all"],
)
def test_interventions_change_weights_and_prediction_as_the_reference_says(client, explainer, intervention):
    applied = intervention.applied  # the flat fields: {scaling, causal, temperature}
    body = {"scaling": "no_scaling" not in applied, "causal": "no_causal" not in applied}
    body["temperature"] = applied.get("temperature", {"t": 1.0})["t"]
    base = post(client, text=TEXT, layers=[0]).json()
    doc = post(client, text=TEXT, layers=[0], **body).json()
    assert Intervention(**body) == intervention and "intervention" not in doc
    same = post(client, text=TEXT, layers=[0], interventions=intervention.as_applied()).json()  # the registry's
    assert same["layers"] == doc["layers"] and same["experiment"] == doc["experiment"]
    assert doc["experiment"]["applied"] == intervention.as_applied()
    _, ids, _ = explainer.tokenize(TEXT)
    for h in range(2):
        want = truth.stages(explainer.model, ids, 0, h, **body)["weights"]
        got = np.array(doc["layers"][0]["weights"][h])  # at 6 decimals
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL["json_weights"], err_msg=f"layer 0 head {h}")
        before = np.array(base["layers"][0]["weights"][h])
        assert np.abs(got - before).max() > TOL["must_differ_weights"], "the intervention did not change the weights"
    probs = {p["id"]: p["prob"] for p in doc["prediction"]}
    assert probs != {p["id"]: p["prob"] for p in base["prediction"]}
    assert doc["prediction"] == explained(explainer, TEXT, intervention=intervention)["prediction"]


LONG = "森林" * (MAX_LEN + 10)


@pytest.mark.parametrize(
    "body, status, message",
    [
        ({}, 422, "text: Field required"),
        ({"text": ""}, 422, "empty"),
        ({"text": "   "}, 422, "empty"),
        ({"text": "一" * (MAX_CHARS + 1)}, 422, f"at most {MAX_CHARS} characters"),
        ({"text": LONG}, 422, f"reads at most {MAX_LEN}"),
        ({"text": "一只\x00怪兽"}, 422, "control character"),
        ({"text": "一只\x1b[31m怪兽"}, 422, "control character"),
        ({"text": 5}, 422, "text: Input should be a valid string"),
        ({"text": TEXT, "temperature": 0}, 422, "temperature"),
        ({"text": TEXT, "temperature": -1}, 422, "temperature"),
        ({"text": TEXT, "temperature": 1e9}, 422, "temperature"),
        ({"text": TEXT, "temperature": "hot"}, 422, "temperature"),
        ({"text": TEXT, "layer": 7}, 422, "layer must be in [0, 1], got 7"),
        ({"text": TEXT, "head": 2}, 422, "head must be in [0, 1], got 2"),
        ({"text": TEXT, "head": -1}, 422, "head"),
        ({"text": TEXT, "layer": "0"}, 422, "layer"),
        ({"text": TEXT, "layer": 1.5}, 422, "layer"),
        ({"text": TEXT, "scaling": "no"}, 422, "scaling"),
        ({"text": TEXT, "causal": 0}, 422, "causal"),
        ({"text": TEXT, "format": "xml"}, 422, "format"),
        ({"text": TEXT, "colour": "blue"}, 422, "colour: Extra inputs are not permitted"),
        ([TEXT], 422, "body"),
    ],
)
def test_bad_requests_get_a_4xx_with_a_message(client, body, status, message):
    r = client.post("/api/explain", json=body)
    assert r.status_code == status, r.text
    assert isinstance(r.json()["detail"], str) and message in r.json()["detail"]


def test_broken_and_oversized_bodies_are_refused(client):
    r = client.post("/api/explain", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and "JSON" in r.json()["detail"]
    r = client.post(
        "/api/explain",
        content=json.dumps({"text": "一" * 70_000}).encode(),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413 and str(server.MAX_BODY_BYTES) in r.json()["detail"]
    assert client.get("/api/explain").status_code == 405


def test_script_token_is_data_never_markup():
    client = TestClient(server.create_app(slash_explainer()))
    evil = "<script>window.__pwned=1</script>"
    doc = client.post("/api/explain", json={"text": f"一只 / {evil} / 森林"}).json()
    assert doc["tokens"] == ["<bos>", "一只", evil, "森林"]
    page = client.get("/", params={"text": f"一只 / {evil} / <img src=x onerror=alert(1)>"}).text
    assert page.count("<script") == 2 and "<img src=x" not in page
    data = json.loads(re.search(r'id="selfattn-data">(.*?)</script>', page, re.S).group(1))
    assert data["doc"]["tokens"][2] == evil and data["error"] is None


def test_page_with_a_refused_text_shows_the_default_and_why(client):
    r = client.get("/", params={"text": "一只\x07怪兽"})
    assert r.status_code == 200
    data = json.loads(re.search(r'id="selfattn-data">(.*?)</script>', r.text, re.S).group(1))
    assert "control character" in data["error"] and data["doc"]["text"] == TEXT


def test_concurrent_requests_do_not_mix_interventions(client):
    """The interventions are set on the model's modules during a pass: requests must not overlap."""
    bodies = [{"text": TEXT, "scaling": s, "causal": c} for s in (True, False) for c in (True, False)] * 2
    want = {json.dumps(b): post(client, **b).json()["prediction"] for b in bodies[:4]}
    results = {}

    def ask(i, body):
        results[i] = (body, post(client, **body).json()["prediction"])

    threads = [threading.Thread(target=ask, args=(i, b)) for i, b in enumerate(bodies)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for body, prediction in results.values():
        assert prediction == want[json.dumps(body)], body


def test_serve_checks_its_port():
    with pytest.raises(ValueError, match="port"):
        server.serve(tiny_explainer(), port=70000)
    with pytest.raises(TypeError, match="Explainer"):
        server.create_app(object())


def test_page_when_even_the_default_text_is_refused():
    ex = tiny_explainer()
    ex.card = dataclasses.replace(ex.card, max_len=3)  # 一只蓝色怪兽走进森林 is 6 tokens
    r = TestClient(server.create_app(ex)).get("/")
    assert r.status_code == 200
    data = json.loads(re.search(r'id="selfattn-data">(.*?)</script>', r.text, re.S).group(1))
    assert data["doc"] is None and "reads at most 3" in data["error"]


def test_answers_are_sized_by_the_view(client, explainer, monkeypatch):
    text = "一只蓝色怪兽走进森林"
    packed = client.post("/api/explain", json={"text": text, "format": "packed"}).json()
    shown = packed["selected"]["layer"]
    assert [bool(layer.get("omitted")) for layer in packed["layers"]] == [l != shown for l in range(2)]
    assert len(packed["descriptions"]) == 2 and len(packed["summaries"]) == 2  # every layer, in words
    one = client.post("/api/explain", json={"text": text, "format": "packed", "layers": [1 - shown]}).json()
    assert "heads" in one["layers"][1 - shown] and one["layers"][shown]["omitted"]
    found = client.post("/api/explain", json={"text": text, "find": [4, "怪兽"], "layers": [0]}).json()["search"]
    assert found == explained(explainer, text, find=(4, 3))["search"]
    monkeypatch.setattr(server, "MAX_RESPONSE_BYTES", 1_000)  # the JSON's weights and stages: 4,500 bytes
    r = client.post("/api/explain", json={"text": text})
    assert r.status_code == 422 and "over the" in r.json()["detail"] and "layers" in r.json()["detail"]
    r = client.post("/api/explain", json={"text": text, "layers": [7]})
    assert r.status_code == 422 and "layers must hold indices in [0, 1], got 7" in r.json()["detail"]
    r = client.post("/api/explain", json={"text": text, "find": ["走进"]})
    assert r.status_code == 422


def test_long_texts_take_the_heavy_lane_and_short_ones_never_wait_behind_them(explainer, monkeypatch):
    """issue 11: ten clients asking for long texts made ten explanations at once (+0.5-1 GB) and short
    requests waited behind them. Long texts now run HEAVY_SLOTS at a time; short ones have their own lane."""
    import dataclasses

    started, release, running, most = threading.Event(), threading.Event(), [0], [0]
    lock = threading.Lock()
    real = pipeline.explain

    def explain(ex, spec, **kw):
        if ex is blocking and len(spec.text) > server.LIGHT_CHARS:
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
                if running[0] == server.HEAVY_SLOTS:
                    started.set()
            release.wait(timeout=60)
            with lock:
                running[0] -= 1
            spec = dataclasses.replace(spec, text=spec.text[:5])
        return real(ex, spec, **kw)

    blocking = dataclasses.replace(explainer)
    monkeypatch.setattr(pipeline, "explain", explain)
    client = TestClient(server.create_app(blocking))
    long_text = "a" * (server.LIGHT_CHARS + 1)
    answers = []
    threads = [
        threading.Thread(target=lambda: answers.append(post(client, text=long_text).status_code))
        for _ in range(server.HEAVY_SLOTS + 2)
    ]
    for t in threads:
        t.start()
    assert started.wait(timeout=60)
    assert post(client, text="ab").status_code == 200  # answered while the heavy lane is full
    release.set()
    for t in threads:
        t.join(timeout=60)
    assert most[0] == server.HEAVY_SLOTS and answers == [200] * (server.HEAVY_SLOTS + 2)
