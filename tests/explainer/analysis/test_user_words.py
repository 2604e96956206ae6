"""User-given words win over the tagger (issue 27): a word of `user_words` is never split, and a role given with it
is used whatever jieba tags it, in `roles.word_roles`, `held.words_of` and so in every relation the explainer
measures; a model's own tokenizer words are its explainer's user words."""

from __future__ import annotations

import pytest

import selfattn
from selfattn.explainer import tracing
from selfattn.explainer.analysis import held
from selfattn.explainer.analysis.roles import given_roles, word_roles
from selfattn.explainer.session import Explainer
from tests.explainer.tiny import tiny_explainer

TEXT = "一条黑色小狗跑进花园"
"""jieba cuts 跑进 into 跑 / 进 by default."""


def _cut(text, user_words=()):
    return [(w.text, w.role) for w in word_roles(text, user_words)]


def test_jieba_splits_the_word_by_default():
    words = [w for w, _ in _cut(TEXT)]
    assert "跑进" not in words and "跑" in words and "进" in words


def test_a_listed_user_word_is_never_split():
    cut = _cut(TEXT, ["跑进"])
    assert [w for w, _ in cut] == ["一条", "黑色", "小狗", "跑进", "花园"]


def test_a_given_role_wins_over_the_tagger():
    assert dict(_cut("一只小蓝怪走进森林"))["小"] == "colour"  # jieba: 小 / 蓝 / 怪 (怪 tagged a verb)
    cut = dict(_cut("一只小蓝怪走进森林", {"小蓝怪": "noun"}))
    assert cut["小蓝怪"] == "noun" and cut["走进"] == "verb" and cut["森林"] == "place"
    cut = dict(_cut(TEXT, {"跑进": "verb", "花园": "place"}))
    assert cut["跑进"] == "verb" and cut["花园"] == "place" and cut["小狗"] == "noun"


def test_bad_user_words_are_refused_by_name():
    with pytest.raises(ValueError, match="'跑进'.*'animal'"):
        given_roles({"跑进": "animal"})
    with pytest.raises(TypeError, match=r"user_words\[1\]"):
        given_roles(["跑进", ""])
    with pytest.raises(TypeError, match="the str"):
        given_roles("跑进")


def test_the_explainer_reads_its_user_words_before_the_tagger():
    ex = tiny_explainer().with_words({"跑进": "verb"})
    trace = tracing.trace(ex, TEXT)
    words = held.words_of(trace, ex.user_words)
    assert [(w.text, w.role) for w in words][3] == ("跑进", "verb")
    ctrl = tracing.controls(ex, trace)
    assert ctrl and "跑进" in [w.text for w in held.control_of(trace, ex.user_words).words]
    doc = selfattn.explain(TEXT, model=tiny_explainer(), user_words={"跑进": "verb"})
    assert doc.explainer.user_words == {"跑进": "verb"}
    # the relations measured are the user's words': verb → noun reads 跑进's query, the last piece of 跑进
    links = held.text_links(trace, words)
    verb = [lk for lk in links if lk.relation == "verb>noun"]
    assert verb and trace.pieces.spans[verb[0].query][1] == TEXT.index("跑进") + 2


def test_our_models_tokenizer_words_are_the_explainers_user_words(tiny_checkpoint):
    from selfattn.model.checkpoint import load_checkpoint

    ex = Explainer.load(tiny_checkpoint)
    tokenizer = load_checkpoint(tiny_checkpoint)[1]
    assert set(ex.user_words) == set(tokenizer.user_words) and all(r is None for r in ex.user_words.values())
    assert ex.with_words({"跑进": "verb"}).user_words["跑进"] == "verb" and "跑进" not in ex.user_words
