"""One run path (`explainer.run`): the same request through the CLI (`selfattn explain … --json`), the app
(POST /api/explain through FastAPI's TestClient) and the Python API (`selfattn.explain`, `Explanation.run`)
gives the same export, compared as JSON text: on the bundled default model for the default text, a head
asked for, every intervention of the registry (and a scoped one), both ablations, patching with a target
and a foil, the logit lens with and without a position; on a tiny transformers llama for the experiments.

And `Explanation.heads()` types the heads as `selfattn heads` does (`experiments.taxonomy`)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

import selfattn
from selfattn.cli import main
from selfattn.explainer.interventions import REGISTRY
from selfattn.explainer.session import DEFAULT_TEXT, Explainer
from selfattn.explainer.web import server
from tests.hf import models

CORRUPTED = "一只红色怪兽走进森林"  # the default text's length, one word changed
HF_TEXT = "a blue monster walks into the forest"
HF_CORRUPTED = "a red monster walks into the forest"

VALUES = {"no_scaling": {}, "no_causal": {}, "temperature": {"t": 2.0}, "block": {"query": 4, "key": 3}}
"""One value per registry entry the CLI has a flag for (the ablate entry is the app's and the API's only)."""
FLAGS = {"no_scaling": [], "no_causal": [], "temperature": ["2.0"], "block": ["4", "3"]}


def canonical(text: str) -> str:
    """The JSON text re-written one way (the CLI escapes some characters, the app writes no spaces)."""
    return json.dumps(json.loads(text), ensure_ascii=False, allow_nan=False)


def cli(capsys, *args) -> str:
    assert main(["explain", *args, "--json"]) == 0
    return canonical(capsys.readouterr().out)


def app(client, **body) -> str:
    r = client.post("/api/explain", json=body)
    assert r.status_code == 200, r.text
    return canonical(r.text)


def api(explanation) -> str:
    return canonical(explanation.to_json())


@pytest.fixture(scope="module")
def default():
    return Explainer.load()


@pytest.fixture(scope="module")
def client(default):
    return TestClient(server.create_app(default))


def test_the_registry_has_a_value_here_for_each_cli_entry():
    assert set(VALUES) == {name for name, entry in REGISTRY.items() if entry.cli}


@pytest.mark.parametrize(
    "flags, body, call, run",
    [
        ([], {}, {}, None),
        (["--layer", "1", "--head", "0"], {"layer": 1, "head": 0}, {"layer": 1, "head": 0}, None),
        (["--find", "走进", "怪兽"], {"find": ["走进", "怪兽"]}, {"find": ("走进", "怪兽")}, None),
        (["--ablate", "1.0"], {"ablate": [[1, 0]]}, {}, {"ablate": [(1, 0)]}),
        (
            ["--ablate", "1.0,0.1", "--ablate-mode", "mean", "--layer", "0"],
            {"ablate": [[1, 0], [0, 1]], "ablate_mode": "mean", "layer": 0},
            {"layer": 0},
            {"ablate": "1.0,0.1", "ablate_mode": "mean"},
        ),
        (
            ["--patch", CORRUPTED, "--target", "森林", "--foil", "大海"],
            {"patch": {"corrupted": CORRUPTED, "target": "森林", "foil": "大海"}},
            {},
            {"patch": CORRUPTED, "target": "森林", "foil": "大海"},
        ),
        (["--logit-lens"], {"lens": True}, {}, {"lens": True}),
        (["--logit-lens", "--position", "2"], {"lens": {"position": 2}}, {}, {"lens": 2}),
    ],
    ids=["default", "head", "find", "ablate", "ablate-mean", "patch", "lens", "lens-at"],
)
def test_cli_app_and_api_give_one_export(capsys, client, default, flags, body, call, run):
    want = cli(capsys, *flags)
    assert app(client, text=DEFAULT_TEXT, **body) == want
    e = selfattn.explain(DEFAULT_TEXT, model=default, **call)
    assert api(e if run is None else e.run(**run)) == want


@pytest.mark.parametrize("name", sorted(VALUES))
def test_every_intervention_gives_one_export(capsys, client, default, name):
    flag = "--" + name.replace("_", "-")
    want = cli(capsys, flag, *FLAGS[name])
    assert app(client, text=DEFAULT_TEXT, interventions={name: VALUES[name]}) == want
    assert api(selfattn.explain(DEFAULT_TEXT, model=default, **{name: VALUES[name]})) == want


def test_a_scoped_intervention_gives_one_export(capsys, client, default):
    want = cli(capsys, "--temperature", "2.0", "--only-layer", "1", "--only-head", "0")
    doc = json.loads(want)
    assert (doc["selected"]["layer"], doc["selected"]["head"], doc["selected"]["rule"]) == (1, 0, "intervened")
    body = {"interventions": {"temperature": {"t": 2.0}, "layer": 1, "head": 0}}
    assert app(client, text=DEFAULT_TEXT, **body) == want
    scope = {"layer": 1, "head": 0}
    assert api(selfattn.explain(DEFAULT_TEXT, model=default, temperature={"t": 2.0}, scope=scope)) == want


def test_the_ablate_entry_gives_one_export_in_the_app_and_the_api(client, default):
    """The ablate intervention has no CLI flag of its own (--ablate is the experiment): app and API agree."""
    body = {"interventions": {"ablate": {"mean": True}, "layer": 1, "head": 0}}
    got = app(client, text=DEFAULT_TEXT, **body)
    assert json.loads(got)["selected"]["rule"] == "ablated"
    e = selfattn.explain(DEFAULT_TEXT, model=default, ablate={"mean": True}, scope={"layer": 1, "head": 0})
    assert api(e) == got


def test_the_api_opens_an_ablation_on_the_head_the_cli_opens(default):
    """The issue: the API opened layer 0 · head 3 ("auto") where `--ablate 1.0` opens layer 1 · head 0."""
    selected = selfattn.explain(DEFAULT_TEXT, model=default).run(ablate=[(1, 0)]).doc["selected"]
    assert selected == {"layer": 1, "head": 0, "rule": "ablated"}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return models.save("llama", tmp_path_factory.mktemp("run_path") / "llama")


@pytest.fixture(scope="module")
def llama_client(llama):
    return TestClient(server.create_app(Explainer.load(llama)))


@pytest.mark.parametrize(
    "flags, body, run",
    [
        ([], {}, None),
        (["--ablate", "1.2"], {"ablate": [[1, 2]]}, {"ablate": [(1, 2)]}),
        (
            ["--ablate", "0.1", "--ablate-mode", "mean"],
            {"ablate": [[0, 1]], "ablate_mode": "mean"},
            {"ablate": "0.1", "ablate_mode": "mean"},
        ),
        (
            ["--patch", HF_CORRUPTED, "--target", "blue", "--foil", "red"],
            {"patch": {"corrupted": HF_CORRUPTED, "target": "blue", "foil": "red"}},
            {"patch": HF_CORRUPTED, "target": "blue", "foil": "red"},
        ),
        (
            ["--ablate", "1.2", "--target", "blue", "--foil", "red"],
            {"ablate": [[1, 2]], "ablate_target": "blue", "ablate_foil": "red"},
            {"ablate": [(1, 2)], "target": "blue", "foil": "red"},
        ),
        (["--logit-lens"], {"lens": True}, {"lens": True}),
        (["--logit-lens", "--position", "3"], {"lens": {"position": 3}}, {"lens": 3}),
    ],
    ids=["default", "ablate", "ablate-mean", "patch", "ablate-target", "lens", "lens-at"],
)
def test_one_export_on_a_transformers_model(capsys, llama, llama_client, flags, body, run):
    want = cli(capsys, HF_TEXT, "--model", str(llama), *flags)
    assert app(llama_client, text=HF_TEXT, **body) == want
    e = selfattn.explain(HF_TEXT, model=str(llama))
    assert api(e if run is None else e.run(**run)) == want


def test_heads_types_are_those_of_selfattn_heads(capsys, llama):
    """`Explanation.heads()` and `selfattn heads` read one analysis (`experiments.taxonomy`): the same types."""
    assert main(["heads", HF_TEXT, "--model", str(llama), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    want = [(l, h, head["type"]) for l, row in enumerate(table["heads"]) for h, head in enumerate(row)]
    got = [(row["layer"], row["head"], row["type"]) for row in selfattn.explain(HF_TEXT, model=str(llama)).heads()]
    assert got == want
    assert any(t is not None for _, _, t in want)  # the tiny model's heads do get types: a test that can fail


REFERENCE = ["the cat sleeps in the house", "two red fish swim into the sea"]


@pytest.mark.parametrize("bos", [None, True, False])
def test_a_mean_ablation_over_a_reference_set_and_the_bos_give_one_export(capsys, tmp_path, llama, llama_client, bos):
    """--reference FILE (one text per line) = the app's reference = `Explanation.run(reference=…)`; --prepend-bos /
    --no-prepend-bos = prepend_bos in the body = `selfattn.explain(prepend_bos=…)`, said in the card."""
    refs = tmp_path / "refs.txt"
    refs.write_text("\n".join(REFERENCE) + "\n\n", encoding="utf-8")  # a blank line is no text
    flags = ["--ablate", "0.1", "--ablate-mode", "mean", "--reference", str(refs), "--target", "blue", "--foil", "red"]
    flags += [] if bos is None else ["--prepend-bos" if bos else "--no-prepend-bos"]
    want = cli(capsys, HF_TEXT, "--model", str(llama), *flags)
    body = {"ablate": [[0, 1]], "ablate_mode": "mean", "reference": REFERENCE, "ablate_target": "blue"}
    body |= {"ablate_foil": "red", "prepend_bos": bos}
    assert app(llama_client, text=HF_TEXT, **body) == want
    e = selfattn.explain(HF_TEXT, model=str(llama), prepend_bos=bos)
    run = {"ablate": "0.1", "ablate_mode": "mean", "reference": REFERENCE, "target": "blue", "foil": "red"}
    assert api(e.run(**run)) == want
    doc = json.loads(want)
    assert doc["ablation"]["reference"] == {"texts": 2, "positions": 7 + 8}  # [CLS] and the words
    assert doc["model"]["bos"]["prepend_bos"] is (bos is not False)
