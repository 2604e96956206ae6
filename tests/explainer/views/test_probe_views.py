"""One verdict per head in every view (issue 27): the explain sentences and the model view read the induction probe
as `Explanation.heads()` and `selfattn heads` do, so a head typed only by the probe (induction) is labelled alike
everywhere. A head planted to attend to i − (n − 1) is an induction head on the probe of n random tokens twice
(BOS first): its weights are checked there against `selfattn.reference` (NumPy float64), not the explainer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from selfattn.explainer import induction_probe as probe
from selfattn.explainer import tracing
from selfattn.explainer.capture.cache import TraceCache
from selfattn.explainer.pipeline import Session, Spec
from selfattn.explainer.session import Explainer
from tests.explainer import truth
from tests.explainer.documents import explained
from tests.explainer.planted import PLANTED_TOL, plant
from tests.explainer.tiny import tiny_explainer
from tests.tolerances import TOL

TEXT = "一只蓝色怪兽走进森林"


def _induction_keys(ids: list[int]) -> dict[int, int]:
    """query → the token after the earlier occurrence of the query's token (written out: one earlier occurrence)."""
    out = {}
    for i in range(len(ids)):
        before = [j for j in range(i - 1) if ids[j] == ids[i]]
        if before:
            out[i] = before[-1] + 1
    return out


@pytest.fixture(scope="module")
def planted():
    ex = tiny_explainer()
    ids = probe.probe_ids(ex)
    n = (len(ids) - 1) // 2  # <bos> + r + r
    assert ids[1 : 1 + n] == ids[1 + n :] and len(set(ids[1 : 1 + n])) == n
    plant(ex.model, back=n - 1)  # L0H0: query i → key i − (n − 1), the induction key of the second copy
    return ex, ids


def _labels(doc: dict) -> list[list[str | None]]:
    return [[d["verdict"]["type"] for d in row] for row in doc["descriptions"]]


def test_the_planted_head_is_an_induction_head_on_the_probe_by_float64_weights(planted):
    ex, ids = planted
    w = truth.stages(ex.model, ids, 0, 0)["weights"]
    keys = _induction_keys(ids)
    assert len(keys) >= 8
    share = np.mean([w[q, k] for q, k in keys.items()])
    assert share > 1 - PLANTED_TOL
    measured = tracing.probe(ex)[0][0]["induction"]
    assert measured["rows"] == len(keys) and measured["score"] == pytest.approx(share, abs=PLANTED_TOL)
    chance = np.mean([1 / (q + 1) for q in keys])  # one key of the q + 1 a causal query sees
    assert measured["chance"] == pytest.approx(chance, abs=TOL["float64_short_sum"])


def test_a_probe_only_type_is_the_same_label_in_every_view(planted, monkeypatch, capsys):
    ex, _ = planted
    from selfattn.cli import main

    doc = explained(ex, TEXT)
    d = doc["descriptions"][0][0]
    assert d["verdict"]["type"] == "induction"
    on = {e["type"]: e["on"] for e in d["verdict"]["types"]}
    assert on["induction"] == "probe"
    assert "在随机 token 重复两遍的探针上" in d["text"]["zh"] and "on the probe" in d["text"]["en"]
    labels = _labels(doc)
    packed = doc
    assert [layer["types"] for layer in packed["layers"]] == labels  # the model view
    heads = Session(ex).explain(Spec(TEXT)).heads()
    assert [[r["type"] for r in heads if r["layer"] == l] for l in range(len(labels))] == labels
    monkeypatch.setattr(Explainer, "load", classmethod(lambda cls, path=None, dtype=None: ex))
    assert main(["heads", TEXT, "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert [[c["type"] for c in row] for row in table["heads"]] == labels
    assert [[c["types"] for c in row] for row in table["heads"]] == [
        [dd["verdict"]["types"] for dd in row] for row in doc["descriptions"]
    ]


def test_the_probe_runs_once_per_cache_whatever_the_text(planted):
    ex, _ = planted
    other = "两条红色鱼游进大海"
    control = tracing.controls(
        ex, tracing.trace(ex, other)
    )  # whether it has control sentences, before passes are counted
    passes = []
    hook = ex.model.register_forward_hook(lambda *_: passes.append(1))
    try:
        cache = TraceCache(max_bytes=64 << 20)
        explained(ex, TEXT, cache=cache)
        first = len(passes)
        explained(ex, TEXT, cache=cache)
        assert len(passes) == first  # the text, its control and the probe all read back
        explained(ex, other, cache=cache)
        assert control and len(passes) - first == 1  # the new text with its controls, one batch; no probe
        without = len(passes)
        explained(ex, TEXT)  # no cache: the text, its control and the probe again
        assert len(passes) - without == first
    finally:
        hook.remove()


def test_a_model_without_a_probe_still_explains(monkeypatch):
    ex = tiny_explainer()

    def refuse(*_a, **_k):
        raise probe.NoProbe("reads too few tokens")

    monkeypatch.setattr(probe, "probe_ids", refuse)
    doc = explained(ex, TEXT)
    assert all(e["on"] != "probe" for row in doc["descriptions"] for d in row for e in d["verdict"]["types"])


def test_heads_on_a_text_states_each_relations_baseline(monkeypatch, capsys):
    """`selfattn heads TEXT`: every relation line says what the other words give the same keys beside its query
    word, the numbers of the JSON's relation (`held`'s baseline, which credits it)."""
    from rich.cells import cell_len

    from selfattn.cli import main
    from selfattn.explainer.views.head_words import p_words, percent

    text = "一只蓝色怪兽走进森林。这只怪兽在森林里睡觉。"
    bundled = Explainer.load()
    monkeypatch.setattr(Explainer, "load", classmethod(lambda cls, path=None, dtype=None: bundled))
    assert main(["heads", text, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    held = [r for row in doc["heads"] for c in row for r in c.get("relations", ())]
    assert held, "the default model holds a tutorial relation on this text"
    for lang, words in (("en", "other words give the same keys"), ("zh", "其他词给同样的键")):
        assert main(["heads", text, "--lang", lang]) == 0
        out = capsys.readouterr().out
        flat = "".join(out.split()) if lang == "zh" else " ".join(out.split())
        assert max(cell_len(line) for line in out.splitlines()) <= 80
        for r in held:
            b = r["baseline"]
            said = f"{percent(b['weight'])}" + ("，这个查询词 " if lang == "zh" else " on average, its query word ")
            said += percent(b["query"])
            assert ("".join(said.split()) if lang == "zh" else said) in flat, (lang, said)
            assert ("".join(p_words(b["p"], lang).split()) if lang == "zh" else p_words(b["p"], lang)) in flat
        assert ("".join(words.split()) if lang == "zh" else words) in flat
