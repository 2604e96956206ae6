"""Roles of any Chinese sentence's words (jieba's tagger), carried to the pieces of every tokenizer family."""

from __future__ import annotations

import pytest

from selfattn.explainer import pieces as P
from selfattn.explainer.analysis.roles import has_roles, piece_roles, word_roles
from tests.explainer.source.test_pieces import _byte_fallback_bpe, _byte_level_bpe, _wordpiece, smollm2_tokenizer  # noqa: F401

TUTORIAL = "一只蓝色怪兽走进森林"
NEVER_SHIPPED = "两条红色小狗跑进花园"  # no word of it is in the default corpus's grammar


def _roles(text):
    return [(w.text, w.role) for w in word_roles(text) if w.role]


def test_the_tutorial_sentence_has_the_tutorials_roles():
    expected = [("一只", "qm"), ("蓝色", "colour"), ("怪兽", "noun"), ("走进", "verb"), ("森林", "place")]
    assert _roles(TUTORIAL) == expected


def test_a_sentence_the_project_never_ships_gets_roles_too():
    roles = dict(_roles(NEVER_SHIPPED))
    assert roles["两条"] == "qm" and roles["红色"] == "colour" and roles["小狗"] == "noun" and roles["花园"] == "place"
    assert "verb" in roles.values()


def test_modifiers_have_no_role_and_places_after_prepositions_are_places():
    roles = dict(_roles("一只蓝色的怪兽慢慢地走进了森林"))
    assert "的" not in roles and "了" not in roles and roles["森林"] == "place" and roles["走进"] == "verb"
    assert dict(_roles("它在森林里睡觉"))["森林"] == "place"


def test_text_without_chinese_has_no_roles_and_says_so():
    words = word_roles("When Mary and John went to the store")
    assert words == [] and not has_roles(words)
    with pytest.raises(TypeError, match="text must be a str"):
        word_roles(b"abc")


def _piece_roles(tokenizer, text):
    p = P.from_tokenizer(tokenizer, text)
    return p, piece_roles(p.spans, word_roles(text))


@pytest.mark.parametrize(
    "make", [_byte_level_bpe, _byte_fallback_bpe, _wordpiece], ids=["bytelevel", "sentencepiece", "wordpiece"]
)
def test_every_piece_of_a_word_carries_its_role(make):
    p, roles = _piece_roles(make(), TUTORIAL)
    words = word_roles(TUTORIAL)
    for i, (start, end) in enumerate(p.spans):
        if start < 0 or end <= start:
            assert roles[i] is None  # a special token: no role
            continue
        word = next(w for w in words if w.start <= start < w.end)
        assert roles[i] == word.role, (p.labels[i], word)
    # 怪兽 cut into pieces (bytes, characters or subwords) still makes noun pieces, whatever the tokenizer
    assert "noun" in roles and "verb" in roles and "place" in roles


@pytest.mark.parametrize("text", [TUTORIAL, NEVER_SHIPPED])
def test_roles_and_links_on_the_real_smollm2_pieces(smollm2_tokenizer, text):  # noqa: F811
    """SmolLM2's byte-level pieces (怪 over two pieces …) carry the words' roles, and the tutorial's relations
    are found on them: the noun's measure word and colour, the verb's noun, the place's verb and noun."""
    from selfattn.explainer.analysis.word_relations import piece_links

    p, roles = _piece_roles(smollm2_tokenizer, text)
    assert {"qm", "colour", "noun", "verb", "place"} <= set(roles)
    links = piece_links(word_roles(text), p.spans)
    assert {link.relation for link in links} == {"noun>qm+colour", "verb>noun", "place>verb+noun"}
    for link in links:  # the query is the last piece of its word; every key piece lies before it
        assert roles[link.query] == link.relation.split(">")[0] and all(k < link.query for k in link.keys)
