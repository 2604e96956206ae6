"""Issue 27 item 3: a tutorial relation is a statistic like any head type. It is credited only on MIN_ROWS rows or
more where its key is not the previous word (the text's own links apart from it, and every link of its control and
contrast sentences, `word_relations.contrasts`), by the test against uniform attention, and only above what a
previous-word, self, first-token or fixed-distance head would give the same keys. Every number is recomputed
here from `selfattn.reference` (NumPy float64) weights (`truth.stages`), the p-value by the normal approximation
written out below, never from the explainer's path."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from selfattn.explainer import tracing
from selfattn.explainer.analysis import head_types, held
from selfattn.explainer.analysis.roles import word_roles
from selfattn.explainer.analysis.word_relations import MAX_CONTRASTS, contrasts, word_links
from selfattn.explainer.session import Explainer
from selfattn.model import checkpoint, corpus
from tests.explainer import truth
from tests.explainer.documents import explained
from tests.explainer.planted import plant
from tests.explainer.tiny import tiny_explainer
from tests.tolerances import TOL

TEXT = "一只蓝色怪兽走进森林"
NEW = "一条黑色小狗跑进花园"
"""A sentence the project never ships (小狗, 跑进 and 花园 are in no text of the corpus's tutorial)."""


@pytest.fixture(scope="module")
def default():
    return Explainer.load()


def _relations(words) -> Counter:
    return Counter(link.relation for link in word_links(words))


@pytest.mark.parametrize("text", [TEXT, NEW, "两只红色小鸟飞过天空，它们很开心。"])
def test_contrast_sentences_keep_the_shape_and_put_every_key_apart(text):
    words = word_roles(text)
    got = contrasts(words, text, scenes=corpus.scenes())
    assert 2 <= len(got) <= MAX_CONTRASTS
    assert len({c.text for c in got} | {text}) == len(got) + 1  # each a sentence of its own
    want = _relations(words)
    rows = Counter({r: sum(lk.query - 1 not in lk.keys for lk in word_links(words) if lk.relation == r) for r in want})
    for c in got:
        again = word_roles(c.text)  # tagged again, from nothing but the sentence's text
        assert _relations(again) == want, c.text
        assert all(lk.query - 1 not in lk.keys for lk in word_links(again)), c.text  # no key is the previous word
        rows.update(_relations(again))
    assert all(n >= head_types.MIN_ROWS for n in rows.values()) or len(got) == MAX_CONTRASTS, rows


def test_a_text_without_roles_has_no_contrast_sentence():
    text = "When Mary and John went to the store"
    assert contrasts(word_roles(text), text) == []


def _p_value(w: np.ndarray, targets: list[list[int]], seen: list[int]) -> float:
    """One-sided p of the mean share on the targets under random targets among each row's visible keys (the first
    seen[r] keys): the sampling-without-replacement variance, the normal approximation."""
    share, mean, var = [], [], []
    for r, (keys, m) in enumerate(zip(targets, seen, strict=True)):
        row = w[r, :m]
        k = len(keys)
        share.append(row[keys].sum())
        mean.append(k / m)
        sigma2 = ((row - 1 / m) ** 2).mean()
        var.append(k * (m - k) / (m - 1) * sigma2)
    n = len(share)
    z = (np.mean(share) - np.mean(mean)) / math.sqrt(sum(var) / n**2)
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_the_tutorial_relation_is_credited_on_eight_rows_recomputed_from_the_reference(default):
    doc = explained(default, TEXT)
    d = doc["descriptions"][0][3]
    (credited,) = [r for r in d["verdict"]["relations"] if r["relation"] == "verb>noun"]
    t = credited["tested"]
    assert t["rows"] >= head_types.MIN_ROWS and t["sentences"] == MAX_CONTRASTS  # the text's one link is adjacent
    model, tokenizer = checkpoint.load_default()[:2]
    others = tracing.control_texts(default, tracing.trace(default, TEXT).pieces)
    assert len(others) == MAX_CONTRASTS
    weights, targets, seen, previous = [], [], [], []
    for text in others:
        ids = tokenizer.encode(text, bos=True)
        tokens = [tokenizer.tokens[i] for i in ids]
        words = word_roles(text, default.user_words)
        nouns = [w.text for w in words if w.role == "noun"]
        verbs = [w.text for w in words if w.role == "verb"]
        assert len(nouns) == len(verbs) == 1, text
        q, k = tokens.index(verbs[0]), tokens.index(nouns[0])
        assert q - k == 2  # a filler between them: the previous token is not the noun
        w = truth.stages(model, ids, 0, 3)["weights"]
        weights.append(np.pad(w[q], (0, 32 - len(w[q]))))
        targets.append([k])
        seen.append(q + 1)
        previous.append(w[q, q - 1])
    w = np.array(weights)
    share = [w[r, keys].sum() for r, keys in enumerate(targets)]
    assert t["weight"] == pytest.approx(np.mean(share), abs=TOL["float32_weight_mean"])
    assert t["chance"] == pytest.approx(np.mean([1 / m for m in seen]), abs=TOL["float64"])
    assert t["p"] == pytest.approx(_p_value(w, targets, seen), rel=TOL["p_value_rel"], abs=TOL["p_value_floor"])
    assert t["p"] < 1e-3 and np.mean(share) > max(np.mean(previous), 0.3)
    assert "8 rows of 8 sentences where the key is not the previous word" in d["text"]["en"]
    assert f"在 8 句话里键不紧挨着的 8 行上，平均 {round(100 * np.mean(share))}%" in d["text"]["zh"]


def test_a_relation_on_fewer_than_eight_rows_is_not_measurable_and_never_credited():
    ex = tiny_explainer()  # its vocabulary holds no other scene: the control is the one sentence beside the text
    trace, controls = tracing.trace_with_controls(ex, TEXT)
    assert len(controls) == 1
    found = held.held(trace, controls, ex.user_words)
    strong = 0
    for row in found:
        for per_head in row:
            for r in per_head["relations"].values():
                assert not r["held"] and not r["measurable"] and r["test"]["rows"] < head_types.MIN_ROWS
                strong += head_types.above_chance(r["weight"], r["chance"])
    assert strong  # some head looks like a relation head on the text: without the rows it is not called one


def test_a_planted_two_back_head_is_not_sold_as_a_relation(default):
    """A head that looks two tokens back meets every relation of the control sentences (一只蓝色<unk>怪兽在走进这个
    森林: 怪兽→蓝色, 走进→怪兽, 森林→走进 are each two back) and beats the previous word there; the same distance
    back on the other rows explains it."""
    ex = Explainer.load()
    plant(ex.model, back=2)  # L0H0: key i − 2, whatever the tokens
    trace, controls = tracing.trace_with_controls(ex, TEXT)
    assert len(controls) == MAX_CONTRASTS
    found = held.held(trace, controls, ex.user_words)[0][0]
    model, tokenizer = ex.model, checkpoint.load_default()[1]
    ids = tokenizer.encode(controls[0].pieces.text, bos=True)
    w = truth.stages(model, ids, 0, 0)["weights"]
    assert all(w[i, i - 2] > 0.99 for i in range(2, len(ids)))  # the planted head, in float64
    for name, r in found["relations"].items():
        t = r["test"]
        assert t["rows"] >= head_types.MIN_ROWS and t["weight"] > max(t["previous"], t["self"]), name
        assert t["offset"] > 0.95 and not r["held"], name  # …but two back explains it
