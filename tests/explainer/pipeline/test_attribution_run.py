"""Attribution patching as the CLI and the API give it: `selfattn explain --patch … --attribution` prints the
estimates beside exact patching's shares (--json "attribution", and the terminal grid); `Explanation.attribution`
gives the same; --attribution without --patch is refused."""

from __future__ import annotations

import json

import pytest
import torch

import selfattn
from selfattn.cli import main
from selfattn.explainer import experiments
from selfattn.explainer.capture.attribution import rank_agreement
from selfattn.explainer.pipeline import Spec
from selfattn.explainer.session import DEFAULT_TEXT
from tests.tolerances import TOL

CORRUPTED = "一只红色怪兽走进森林"
PAIR = ["--target", "森林", "--foil", "大海"]


def test_cli_json_and_api_agree_and_sit_beside_patching(cli_on_bundled, bundled, capsys):
    assert main(["explain", DEFAULT_TEXT, "--patch", CORRUPTED, *PAIR, "--attribution", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    a = doc["attribution"]
    assert a["exact"]["heads"] == doc["patching"]["heads"]
    assert (a["target"], a["foil"]) == (doc["patching"]["target"], doc["patching"]["foil"])
    assert a["clean_ld"] == pytest.approx(doc["patching"]["clean_ld"])
    want = rank_agreement(torch.tensor(doc["patching"]["heads"]), torch.tensor(a["heads"]))
    assert a["exact"]["agreement"] == want
    e = selfattn.explain(DEFAULT_TEXT, bundled).run(patch=CORRUPTED, target="森林", foil="大海")
    assert json.loads(json.dumps(e.attribution(), ensure_ascii=False)) == a


def test_terminal_shows_the_grid_and_the_agreement(cli_on_bundled, capsys):
    assert main(["explain", DEFAULT_TEXT, "--patch", CORRUPTED, *PAIR, "--attribution", "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "attribution patching" in out and "Spearman rank correlation" in out and "→" in out


def test_attribution_needs_patch(cli_on_bundled, capsys):
    assert main(["explain", DEFAULT_TEXT, "--attribution"]) == 2
    assert "--attribution goes with --patch" in capsys.readouterr().err
    with pytest.raises(ValueError, match="attribution goes with patch"):
        Spec(DEFAULT_TEXT, attribution=True)
    with pytest.raises(TypeError, match="attribution must be"):
        Spec(DEFAULT_TEXT, attribution="yes")


def test_the_pipeline_runs_it_beside_the_patching_it_estimates(bundled):
    """Asked in the Spec (as --attribution, the app's "attribution" and run(attribution=True) ask it), the estimate
    is one of the Explanation's experiments: the same numbers as experiments.attribution called on its own, with
    the patching's exact shares beside; its JSON and its page carry it."""
    e = selfattn.explain(DEFAULT_TEXT, bundled).run(patch=CORRUPTED, target="森林", foil="大海", attribution=True)
    got = e.experiments.attribution
    p = e.experiments.patching
    alone = experiments.attribution(
        bundled, DEFAULT_TEXT, CORRUPTED, target=p["target"]["id"], foil=p["foil"]["id"], exact=dict(p)
    )
    assert json.dumps(got, ensure_ascii=False) == json.dumps(alone, ensure_ascii=False)
    assert got["exact"]["heads"] == p["heads"] and e.attribution() == got
    assert json.loads(e.to_json())["attribution"]["heads"] == got["heads"]
    assert e.doc["attribution"]["heads"] == got["heads"]  # the page's payload
    plain = selfattn.explain(DEFAULT_TEXT, bundled).run(patch=CORRUPTED, target="森林", foil="大海")
    assert plain.experiments.attribution is None and "attribution" not in plain.doc


def test_rank_agreement_is_spearman_on_the_top_heads():
    exact = torch.tensor([[0.9, 0.1, 0.5], [0.3, 0.7, 0.0]])
    same = rank_agreement(exact, exact * 2, top=4)
    assert same == {"top": 4, "spearman": pytest.approx(1.0, abs=TOL["float64"]), "shared": 4}
    # on exact's top 4 (0.9, 0.7, 0.5, 0.3) the estimate ranks them exactly backwards
    backwards = torch.tensor([[0.1, 5.0, 0.3], [0.4, 0.2, 9.0]])
    got = rank_agreement(exact, backwards, top=4)
    assert got["spearman"] == pytest.approx(-1.0, abs=TOL["float64"])
    assert got["shared"] == 2  # the estimate's top 4 (9.0, 5.0, 0.4, 0.3) hold two of them
