"""Claims against chance: every head's words give the share and what uniform attention over the visible keys
gives the same keys; a link or a type is credited only clearly above chance; a sink head says so first.
The weights are recomputed with `selfattn.reference` (NumPy float64) on the default model's layer 0."""

from __future__ import annotations

import pytest

from selfattn.cli import main
from selfattn.explainer.analysis import head_types, heads, relations
from selfattn.explainer.interventions import Intervention
from selfattn.explainer.session import Explainer
from selfattn.model import checkpoint, corpus
from tests.explainer import truth
from tests.explainer.documents import explained
from tests.tolerances import TOL

TEXT = "一只蓝色怪兽走进森林"  # <bos> 一只 蓝色 怪兽 走进 森林
LONG = "一只蓝色怪兽走进森林。它在森林里睡觉。这只怪兽很开心。"
VERB, NOUN = 4, 3


@pytest.fixture(scope="module")
def default():
    return Explainer.load()


def rule(score: float, chance: float) -> bool:
    """The credit rule, written out: at least 30 %, and twice the chance or missing at most half of what it misses."""
    return score >= 0.3 and (score >= 2 * chance or 1 - score <= (1 - chance) / 2)


def test_the_default_sentence_gives_the_link_and_its_chance(default):
    doc = explained(default, TEXT)
    sel = doc["selected"]
    d = doc["descriptions"][sel["layer"]][sel["head"]]
    assert (sel["layer"], sel["head"]) == (0, 3) and d["kind"] == "relation" and d["link_credited"]
    model, tokenizer = checkpoint.load_default()[:2]
    ids = tokenizer.encode(TEXT, bos=True)
    w = truth.stages(model, ids, 0, 3)["weights"]
    assert round(100 * w[VERB, NOUN]) == 86
    assert d["pair_chance"] == pytest.approx(1 / 5)  # 走进 sees <bos> 一只 蓝色 怪兽 走进
    assert "走进→怪兽 86%，均匀注意力 20%" in d["text"]["zh"]
    assert "走进→怪兽 86%, uniform attention 20%" in d["text"]["en"]


def test_layer_zero_claims_equal_the_reference(default):
    """Each layer-0 head's link share, its chance and its head types, from the reference weights."""
    model, tokenizer = checkpoint.load_default()[:2]
    ids = tokenizer.encode(TEXT, bos=True)
    doc = explained(default, TEXT)
    for h in range(4):
        w = truth.stages(model, ids, 0, h)["weights"]
        d = doc["descriptions"][0][h]
        types = head_types.measure(w, ids, causal=True)[0]
        for t, m in types.items():
            if m["score"] is not None:
                assert d["scores"][t]["score"] == pytest.approx(m["score"], abs=TOL["float32_weight_mean"]), (h, t)
                assert d["scores"][t]["chance"] == pytest.approx(m["chance"], abs=TOL["float64"])
        if "relation" in d:  # the link the words name: its keys together, against |keys| / |visible|
            (link,) = [
                k for k in relations.links(doc["tokens"], corpus.grammar()) if k.relation == d["relation"]
            ]  # one each here
            assert d["mean"] == pytest.approx(sum(w[link.query, k] for k in link.keys), abs=TOL["float32_weight_mean"])
            assert d["mean_chance"] == pytest.approx(len(link.keys) / (link.query + 1))
            assert d["pair_weight"] == pytest.approx(
                max(w[link.query, k] for k in link.keys), abs=TOL["float32_weight_mean"]
            )
            assert d["link_credited"] == rule(d["mean"], d["mean_chance"])
    # the case: layer 0 · head 1 gives 怪兽 → 一只 + 蓝色 50 %, which uniform attention gives too
    assert not doc["descriptions"][0][1].get("link_credited")


@pytest.mark.parametrize("text", [TEXT, LONG])
def test_temperature_10_credits_no_head_with_a_link(default, text):
    doc = explained(default, text, intervention=Intervention(temperature=10.0))
    model, tokenizer = checkpoint.load_default()[:2]
    ids = tokenizer.encode(text, bos=True)
    for l, row in enumerate(doc["descriptions"]):
        for h, d in enumerate(row):
            assert d["kind"] != "relation" and not d.get("link_credited"), (l, h, d["text"]["en"])
            if "mean" in d:
                assert not rule(d["mean"], d["mean_chance"])
    for h in range(4):  # near uniform indeed: the reference's weights at T = 10, layer 0
        w = truth.stages(model, ids, 0, h, temperature=10.0)["weights"]
        assert w[VERB, NOUN] < 0.3
    plain = explained(default, text)
    link = f"{plain['token_names'][VERB]}→{plain['token_names'][NOUN]}"  # 走进→怪兽, 走进→怪兽@3 where 怪兽 repeats
    said = plain["descriptions"][0][3]["text"]["zh"]
    if text == TEXT:
        assert link.startswith("走进→怪兽") and f"{link} 86%，均匀注意力 20%" in said
    else:  # the tagger finds two more verbs (睡觉→它, 开心→怪兽): the relation is the mean over its 3 links
        assert link.startswith("走进→怪兽") and f"最强的教程链接 {link}（3 处平均）" in said


@pytest.mark.parametrize("options", [{}, {"intervention": Intervention(temperature=10.0)}, {"text": LONG}])
def test_every_description_gives_its_chance_and_a_sink_says_so_first(default, options):
    doc = explained(default, options.get("text", TEXT), intervention=options.get("intervention"))
    for l, row in enumerate(doc["descriptions"]):
        for h, d in enumerate(row):
            zh, en = d["text"]["zh"], d["text"]["en"]
            assert "均匀注意力" in zh or "1 = 均匀" in zh, zh
            assert "uniform attention" in en or "1 = uniform" in en, en
            if doc["summaries"][l][h]["first_token"] >= 0.5:  # the grid's "*"
                assert d["kind"] == "first"
                assert zh.startswith("把注意力停在第一个 token <bos> 上") and en.startswith("parks its attention")
            else:
                assert not zh.startswith("把注意力停在")


def test_chance_follows_the_heads_own_visibility(default):
    """Without the causal rule 走进 sees all 6 tokens: uniform attention gives 怪兽 1/6."""
    doc = explained(default, TEXT, intervention=Intervention(causal=False))
    for row in doc["descriptions"]:
        for d in row:
            if d.get("relation") == "verb>noun":
                assert d["pair_chance"] == pytest.approx(1 / 6)


def _head(first=0.1, self_=0.1, entropy=1.0):
    return {"rows": 5, "first_token": first, "self": self_, "entropy": entropy}


def _words(types=(), score=0.0, link=None):
    scores = {t: {"score": score, "chance": 0.1} for t in types}
    d = {"kind": "spread", "types": list(types), "scores": scores}
    if link is not None:
        d |= {"link_credited": True, "mean": link}
    return d


def test_pick_prefers_a_link_then_a_clear_type_then_concentration():
    table = [[_head(entropy=0.2), _head(entropy=1.0), _head(first=0.9, entropy=0.1), _head(entropy=0.9)]]
    plain = [[_words(), _words(), _words(), _words()]]
    assert heads.pick(table, plain) == (0, 0)  # nothing credited: the most concentrated allowed head
    typed = [[_words(), _words(["previous"], 0.6), _words(["induction"], 0.99), _words(["self"], 0.9)]]
    assert heads.pick(table, typed) == (0, 1)  # a sink (head 2) is left out; self is not a teaching type
    linked = [[_words(), _words(["previous"], 0.6), _words(), _words(link=0.5)]]
    assert heads.pick(table, linked) == (0, 3)


def test_stage_two_says_divided_by_t(capsys):
    assert main(["explain", TEXT, "--temperature", "10"]) == 0
    assert "② ÷√d_k ÷T（T = 10，乘以 0.0204）" in capsys.readouterr().out
    assert main(["explain", TEXT, "--temperature", "10", "--no-scaling", "--lang", "en"]) == 0
    assert "(2) no ÷√d_k, ÷T (T = 10, times 0.1000)" in capsys.readouterr().out
    assert main(["explain", TEXT, "--temperature", "10", "--only-layer", "1", "--layer", "0", "--head", "0"]) == 0
    assert "② ÷√d_k（乘以 0.2041）" in capsys.readouterr().out  # the temperature is in layer 1 only


def test_a_limited_intervention_is_shown_and_described(capsys):
    assert main(["explain", TEXT, "--only-layer", "1", "--only-head", "2", "--no-causal"]) == 0
    out = capsys.readouterr().out
    assert "显示：层 1 · head 2（干预作用的 head）" in out and "干预：关闭因果 mask，只在层 1 · head 2" in out
    assert main(["explain", TEXT, "--only-head", "2", "--no-causal"]) == 0
    assert "干预：关闭因果 mask，只在 head 2" in capsys.readouterr().out
