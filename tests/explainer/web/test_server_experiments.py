"""The app's experiment fields (web/body.py): `ablate`, `ablate_mode`, `patch`, `lens`. The answer carries the
export's own dicts (`experiments.run`, checked against plain hooks in test_experiments.py / test_real_heads.py),
results are kept so a repeated request runs nothing, the head shown is the one the experiment or the limited
intervention changed, and every bad value is a 4xx naming it, in the request's language."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

import selfattn
from selfattn.explainer import experiments
from selfattn.explainer.interventions import Intervention
from selfattn.explainer.pieces import shown_piece
from selfattn.explainer.session import MAX_CHARS
from selfattn.explainer.web import server
from selfattn.limits import MAX_ABLATED_HEADS, MAX_TOKEN_CHARS
from tests.explainer.documents import explained
from tests.explainer.tiny import tiny_explainer

TEXT = "一只蓝色怪兽走进森林"
CORRUPTED = "两条红色鱼游进大海"  # 6 tokens, as TEXT
ASKED = {"ablate": [[1, 0], [0, 1]], "patch": {"corrupted": CORRUPTED, "target": None, "foil": None}, "lens": True}


@pytest.fixture(scope="module")
def explainer():
    return tiny_explainer()


@pytest.fixture(scope="module")
def app(explainer):
    return server.create_app(explainer)


@pytest.fixture(scope="module")
def client(app):
    return TestClient(app)


def post(client, **body):
    return client.post("/api/explain", json={"text": TEXT} | body)


def plain(x):
    return json.loads(json.dumps(x))


def test_the_answer_carries_the_experiments_of_the_export(client, explainer):
    r = post(client, **ASKED)
    assert r.status_code == 200, r.text
    doc = r.json()
    want = experiments.run(
        explainer, TEXT, ablate=ASKED["ablate"], patch={"corrupted": CORRUPTED}, lens={"position": None}
    )
    for name in ("ablation", "patching", "lens"):
        assert doc[name] == plain(want[name]), name
    assert doc["lens"] == plain(experiments.logit_lens(explainer, TEXT))
    packed = post(client, format="packed", **ASKED).json()  # what the page reads: the same dicts
    assert {k: packed[k] for k in want} == {k: doc[k] for k in want}
    lensed = post(client, lens={"position": 2}, ablate=[[0, 0]], ablate_mode="mean").json()
    assert lensed["lens"] == plain(experiments.logit_lens(explainer, TEXT, position=2))
    assert lensed["ablation"] == plain(experiments.ablation(explainer, TEXT, [[0, 0]], "mean"))
    assert "patching" not in lensed and "lens" not in post(client, lens=False).json()


def test_attribution_is_asked_with_the_patching_and_refused_without_it(client, explainer):
    patch = {"corrupted": CORRUPTED, "target": None, "foil": None}
    doc = post(client, patch=patch, attribution=True).json()
    p = doc["patching"]
    want = experiments.attribution(
        explainer, TEXT, CORRUPTED, target=p["target"]["id"], foil=p["foil"]["id"], exact=doc["patching"]
    )
    assert doc["attribution"] == plain(want)
    r = post(client, attribution=True)
    assert r.status_code == 422 and "attribution goes with patch" in r.json()["detail"], r.text
    assert post(client, patch=patch, attribution="yes").status_code == 422


def test_a_repeated_experiment_is_read_back_not_recomputed(app, client):
    results, traces = app.state.results, app.state.traces
    post(client, **ASKED)
    before = (results.computed, traces.computed)
    assert post(client, **ASKED).status_code == 200
    assert (results.computed, traces.computed) == before  # nothing ran again
    t = {"temperature": {"t": 2.0}}
    doc = post(client, interventions=t, **ASKED).json()  # the lens reads the changed text; the others are kept
    assert results.computed == before[0] + 1
    assert doc["lens"]["layers"] != post(client, **ASKED).json()["lens"]["layers"]


def test_patching_runs_in_the_heavy_lane(client, monkeypatch):
    freed = []
    monkeypatch.setattr(server, "release_memory", lambda: freed.append(1))
    post(client, lens=True)
    assert freed == []  # a short text: the light lane
    post(client, patch={"corrupted": CORRUPTED})
    assert freed == [1]


def test_the_head_shown_is_the_one_the_experiment_or_the_intervention_changed(client, explainer):
    sel = post(client, ablate=[[1, 1], [0, 0]]).json()["selected"]
    assert sel == {"layer": 1, "head": 1, "rule": "ablated"}
    assert post(client, ablate=[[1, 1]], layer=0, head=0).json()["selected"] == {"layer": 0, "head": 0, "rule": None}
    scoped = {"temperature": {"t": 3.0}, "layer": 1, "head": 0}
    assert post(client, interventions=scoped).json()["selected"] == {"layer": 1, "head": 0, "rule": "intervened"}
    ablated = {"ablate": {"mean": False}, "layer": 0, "head": 1}
    assert post(client, interventions=ablated).json()["selected"] == {"layer": 0, "head": 1, "rule": "ablated"}
    # the Python API shows the same head (pipeline.explain: one path for the app, the API and the CLI)
    e = selfattn.explain(TEXT, model=explainer, temperature={"t": 3.0}, scope={"layer": 1, "head": 0})
    assert tuple(e.shown) == (1, 0) and e.shown.rule == e.doc["selected"]["rule"] == "intervened"
    doc = explained(explainer, TEXT, intervention=Intervention(temperature=3.0, layer=1))
    assert doc["selected"]["layer"] == 1 and doc["selected"]["rule"] == "within layer"


BAD = [
    ({"ablate": "1.0"}, 422, "ablate: Input should be a valid list"),
    ({"ablate": [[0]]}, 422, "ablate.0.1: Field required"),
    ({"ablate": [[0, 1, 2]]}, 422, "ablate.0: Tuple should have at most 2 items"),
    ({"ablate": [[-1, 0]]}, 422, "ablate.0.0: Input should be greater than or equal to 0"),
    ({"ablate": [[0, "1"]]}, 422, "ablate.0.1: Input should be a valid integer"),
    ({"ablate": [[0, True]]}, 422, "ablate.0.1: Input should be a valid integer"),
    ({"ablate": [[0, 1.0]]}, 422, "ablate.0.1: Input should be a valid integer"),
    ({"ablate": [[[0, 0]]]}, 422, "ablate.0.0: Input should be a valid integer"),
    ({"ablate": [{"layer": 0}]}, 422, "ablate.0"),
    ({"ablate": [[2, 0]]}, 422, "layer must be in [0, 1], got 2 (head 2.0)"),
    ({"ablate": [[0, 2]]}, 422, "head must be in [0, 1], got 2 (head 0.2)"),
    ({"ablate": [[0, 0], [0, 0]]}, 422, "head 0.0 is given twice"),
    ({"ablate": []}, 422, "ablate: List should have at least 1 item"),
    ({"ablate": [[0, 0]] * (MAX_ABLATED_HEADS + 1)}, 422, f"ablate: List should have at most {MAX_ABLATED_HEADS}"),
    ({"ablate": [[0, 0]], "ablate_mode": "max"}, 422, "ablate_mode: Input should be 'zero' or 'mean'"),
    ({"ablate_mode": "mean"}, 422, "ablate_mode goes with ablate: give both"),
    ({"ablate_target": "森林", "ablate_foil": "大海"}, 422, "ablate_target goes with ablate: give both"),
    ({"reference": ["一只红色怪兽"]}, 422, "reference goes with ablate: give both"),
    ({"ablate": [[0, 0]], "reference": ["一只红色怪兽"]}, 422, "reference goes with ablate_mode 'mean'"),
    ({"ablate": [[0, 0]], "ablate_mode": "mean", "reference": []}, 422, "reference: List should have at least 1"),
    ({"ablate": [[0, 0]], "ablate_target": "森林"}, 422, "ablate_target and ablate_foil go together"),
    ({"prepend_bos": 1}, 422, "prepend_bos: Input should be a valid boolean"),
    ({"patch": CORRUPTED}, 422, "patch: Input should be a valid dictionary"),
    ({"patch": {}}, 422, "patch.corrupted: Field required"),
    ({"patch": {"corrupted": 5}}, 422, "patch.corrupted: Input should be a valid string"),
    ({"patch": {"corrupted": CORRUPTED, "colour": 1}}, 422, "patch.colour: Extra inputs are not permitted"),
    ({"patch": {"corrupted": "两条"}}, 422, "same token length: the clean text has 6 tokens"),
    ({"patch": {"corrupted": "一" * (MAX_CHARS + 1)}}, 422, f"patch.corrupted: String should have at most {MAX_CHARS}"),
    ({"patch": {"corrupted": "一只\x00怪兽走进森林"}}, 422, "control character"),
    ({"patch": {"corrupted": "一只\u202e怪兽走进森林"}}, 422, "bidirectional control U+202E"),
    ({"patch": {"corrupted": " "}}, 422, "text is empty"),
    ({"patch": {"corrupted": CORRUPTED, "target": "森林大海"}}, 422, "is 2 tokens"),
    ({"patch": {"corrupted": CORRUPTED, "target": ""}}, 422, "patch.target.text: String should have at least 1"),
    ({"patch": {"corrupted": CORRUPTED, "target": "x" * (MAX_TOKEN_CHARS + 1)}}, 422, "patch.target.text"),
    (
        {"patch": {"corrupted": CORRUPTED, "foil": -1}},
        422,
        "patch.foil.id: Input should be greater than or equal to 0",
    ),
    ({"patch": {"corrupted": CORRUPTED, "foil": 10**9}}, 422, "token id 1000000000 is not in the vocabulary"),
    ({"patch": {"corrupted": CORRUPTED, "target": "森林", "foil": "森林"}}, 422, "the same token '森林'"),
    ({"patch": {"corrupted": CORRUPTED, "target": [1]}}, 422, "patch.target"),
    ({"lens": "yes"}, 422, "lens.switch: Input should be a valid boolean"),
    ({"lens": 1}, 422, "lens.switch: Input should be a valid boolean"),
    ({"lens": {"position": -1}}, 422, "lens.at.position: Input should be greater than or equal to 0"),
    ({"lens": {"position": 99}}, 422, "position must be in [0, 5] (the text's tokens), got 99"),
    ({"lens": {"position": 1.5}}, 422, "lens.at.position: Input should be a valid integer"),
    ({"lens": {"position": 2**70}}, 422, "position must be in [0, 5]"),
    ({"lens": {"where": 1}}, 422, "lens.at.where: Extra inputs are not permitted"),
]


@pytest.mark.parametrize("body, status, message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_experiment_fields_get_a_4xx_naming_them(client, body, status, message):
    r = post(client, **body)
    assert r.status_code == status, r.text
    got = r.json()
    assert message in got["detail"], got["detail"]
    assert set(got["messages"]) == {"zh", "en"} and got["messages"]["en"] == got["detail"]


@pytest.mark.parametrize(
    "body, zh",
    [
        ({"ablate_mode": "mean"}, "ablate_mode 需要和 ablate 一起给"),
        ({"patch": {"corrupted": "两条"}}, "无法做这个实验：patching needs a clean and a corrupted text"),
        ({"ablate": [[2, 0]]}, "无法做这个实验：layer must be in [0, 1], got 2"),
        ({"lens": {"position": -1}}, "请求无效：lens.at.position"),
    ],
)
def test_refusals_speak_the_language_asked(client, body, zh):
    r = post(client, lang="zh", **body)
    assert r.status_code == 422 and r.json()["detail"].startswith(zh), r.json()["detail"]
    assert not r.json()["messages"]["en"].startswith(("无法", "请求"))


def test_non_finite_numbers_and_huge_bodies_are_refused(client):
    for junk in ("NaN", "Infinity", "-Infinity", "1e999"):
        raw = f'{{"text": "{TEXT}", "lens": {{"position": {junk}}}, "ablate": [[0, {junk}]]}}'.encode()
        r = client.post("/api/explain", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 422 and "ablate.0.1" in r.json()["detail"], (junk, r.text)
    huge = json.dumps({"text": TEXT, "patch": {"corrupted": "森林" * (5 << 20)}}).encode()  # 10 M characters
    r = client.post("/api/explain", content=huge, headers={"content-type": "application/json"})
    assert r.status_code == 413 and str(server.MAX_BODY_BYTES) in r.json()["detail"]


def test_patching_is_bounded_in_tokens_before_any_pass(client, monkeypatch):
    monkeypatch.setattr(experiments, "MAX_PATCH_TOKENS", 3)
    calls = []
    real = experiments._patching.patch_heads
    monkeypatch.setattr(experiments._patching, "patch_heads", lambda *a, **k: calls.append(1) or real(*a, **k))
    r = post(client, patch={"corrupted": CORRUPTED, "target": "森林", "foil": "大海"})
    assert r.status_code == 422 and "at most 3 tokens" in r.json()["detail"] and calls == []


def test_a_shown_token_writes_out_what_cannot_be_seen(explainer):
    assert shown_piece("\xa0a\n\tb c\u200b") == "⟨U+00A0⟩a↵⇥b c⟨U+200B⟩" and shown_piece("  x") == "␣␣x"
    doc = post(TestClient(server.create_app(explainer)), lens=True).json()
    shown = [p["shown"] for row in doc["lens"]["layers"] for p in row["top"]]
    assert shown and not any((c.isspace() and c != " ") or not c.isprintable() for s in shown for c in s), shown


def test_the_python_api_runs_the_same_experiments(explainer):
    e = selfattn.explain(TEXT, model=explainer).run(ablate="1.0,0.1", patch=CORRUPTED, lens=2)
    want = experiments.run(
        explainer, TEXT, ablate=[(1, 0), (0, 1)], patch={"corrupted": CORRUPTED}, lens={"position": 2}
    )
    assert {k: e.doc[k] for k in want} == want
    assert 'id="selfattn-data"' in e.html() and json.loads(e.to_json())["lens"] == plain(want["lens"])
    with pytest.raises(ValueError, match="target and foil go with patch or ablate"):
        selfattn.explain(TEXT, model=explainer).run(target="森林")
