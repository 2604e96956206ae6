"""Heads that teach: the tutorial's links found in a text, each head described by them, the default
view on the default model verified against the probe, the head search, the controlled experiment."""

import numpy as np
import pytest

from selfattn.explainer.analysis import relations
from selfattn.explainer.catalogue import TEXTS
from selfattn.explainer.interventions import Intervention
from selfattn.explainer.session import Explainer
from selfattn.explainer.views import head_sentences as heads
from selfattn.model import checkpoint, corpus
from selfattn.model.corpus import CREATURES, Sentence
from selfattn.model.tutorial_probe import attention_probe
from tests.explainer.documents import both, explained, weights
from tests.tolerances import TOL

TEXT = "一只蓝色怪兽走进森林"


@pytest.fixture(scope="module")
def default():
    return Explainer.load()


def test_links_follow_the_probe_claims_and_clause_two():
    tokens = "<bos> 一只 蓝色 怪兽 走进 森林 。 它 在 森林 里 睡觉 。 这只 怪兽 很 开心 。".split()
    found = {(link.relation, link.query, link.keys) for link in relations.links(tokens, corpus.grammar())}
    assert found == {
        ("noun>qm+colour", 3, (1, 2)),
        ("verb>noun", 4, (3,)),
        ("place>verb+noun", 5, (4, 3)),
        ("clause2>clause1", 7, (3,)),
        ("clause2>clause1", 9, (5,)),
        ("clause2>clause1", 14, (3,)),
    }
    assert relations.links(["<bos>", "hello", "world"], corpus.grammar()) == []


def test_default_view_names_a_tutorial_link_that_the_probe_confirms(default):
    doc = explained(default, TEXT)
    sel = doc["selected"]
    d = doc["descriptions"][sel["layer"]][sel["head"]]
    assert d["kind"] == "relation" and sel["rule"] == "auto"
    name = relations.RELATIONS[d["relation"]]
    words = TEXTS[relations.WORDS[d["relation"]]]
    assert d["text"]["zh"].startswith(words["zh"]) and d["text"]["en"].startswith(words["en"])
    pair = f"{doc['tokens'][d['query']]}→{doc['tokens'][d['key']]} {heads.percent(d['weight'])}"
    assert pair in d["text"]["zh"] and pair in d["text"]["en"]
    # the probe, on the same clause, measures the same weight for that claim and head
    model, tokenizer = checkpoint.load_default()[:2]
    monster = next(c for c in CREATURES if c.noun == "怪兽")
    sentence = Sentence(
        ("一只", "蓝色", "怪兽", "走进", "森林", "。", "它", "很", "开心", "。"),
        ("qm", "colour", "noun", "verb", "place", "punct", "ref", "hen", "feeling", "punct"),
        "一",
        monster,
        "蓝色",
        "走进",
        "森林",
    )
    probe = attention_probe(model, tokenizer, [sentence])
    claim = next(c for c in probe["claims"] if c["query"] == name["query"] and tuple(c["targets"]) == name["targets"])
    row = next(h for h in claim["heads"] if (h["layer"], h["head"]) == (sel["layer"], sel["head"]))
    assert row["mean_weight"] == pytest.approx(d["mean"], abs=TOL["float32"])
    assert row["hit_rate"] == 1.0  # its strongest weight lands on a claimed key
    # and no other head shows that link more
    best = max(h["mean_weight"] for h in claim["heads"])
    assert row["mean_weight"] == pytest.approx(best, abs=TOL["float32"])


def test_search_ranks_heads_by_the_weight(default):
    e, doc = both(default, TEXT, find=("走进", "怪兽"))
    s = doc["search"]
    assert (s["query"], s["key"]) == (4, 3)
    expected = sorted(
        ((weights(e, l, h)[4, 3], l, h) for l in range(2) for h in range(4)),
        key=lambda x: (-x[0], x[1], x[2]),
    )
    assert [(r["layer"], r["head"]) for r in s["heads"]] == [(l, h) for _, l, h in expected]
    assert np.allclose([r["weight"] for r in s["heads"]], [w for w, _, _ in expected], atol=TOL["float32_weights"])
    with pytest.raises(ValueError, match="key '森林' is not among the tokens the query may look at"):
        explained(default, TEXT, find=("走进", "森林"))
    with pytest.raises(TypeError, match="query must be a token string or a position"):
        explained(default, TEXT, find=(1.5, "怪兽"))


def test_one_head_experiment_changes_only_that_step(default):
    iv = Intervention(causal=False, layer=0, head=3)
    changed, doc = both(default, TEXT, layer=0, head=3, intervention=iv)
    base_e, base = both(default, TEXT, layer=0, head=3)
    e = doc["experiment"]
    assert e["same_x"] and e["scope"] == "layer"
    for h in range(4):  # the other heads of the layer: unchanged
        same = np.allclose(weights(changed, 0, h), weights(base_e, 0, h), atol=TOL["float32_weights"])
        assert same == (h != 3)
    w1 = weights(changed, 0, 3)
    future = np.triu(np.ones_like(w1, dtype=bool), 1)
    assert e["future"][1] == pytest.approx((w1 * future).sum(1).mean(), abs=TOL["float32_weights"])
    assert e["future"][0] == pytest.approx(0.0, abs=TOL["float64"])
    row = int(np.argmax((w1 * future).sum(1)))
    assert e["future_row"]["query"] == row
    assert e["entropy"] == pytest.approx([base["summaries"][0][3]["entropy"], doc["summaries"][0][3]["entropy"]])
    assert heads.percent(e["future_row"]["weight"]) in e["text"]["zh"]
    assert f"{e['entropy'][0]:.2f} → {e['entropy'][1]:.2f}" in e["text"]["en"]
    assert base["experiment"] == {"applied": {"layer": None, "head": None}}  # nothing applied, nothing compared
    assert e["applied"] == {"no_causal": {}, "layer": 0, "head": 3}


def test_layers_selection_leaves_the_others_out(default):
    doc = explained(default, TEXT, layers=[1])
    assert doc["layers"][0]["omitted"] and "heads" in doc["layers"][1]
    with pytest.raises(ValueError, match=r"layers must hold indices in \[0, 1\], got 5"):
        explained(default, TEXT, layers=[5])
