"""The tutorial's relations found on the words of any sentence, carried to pieces, and their control sentences."""

from __future__ import annotations

import pytest

from selfattn.explainer import pieces as P
from selfattn.explainer.analysis.roles import word_roles
from selfattn.explainer.analysis.word_relations import control, piece_links, word_links
from tests.explainer.source.test_pieces import _byte_level_bpe, _wordpiece

TUTORIAL = "一只蓝色怪兽走进森林"


def _named(words, links):
    return {(link.relation, words[link.query].text, tuple(words[k].text for k in link.keys)) for link in links}


def test_the_tutorial_sentence_holds_the_tutorials_links():
    words = word_roles(TUTORIAL)
    assert _named(words, word_links(words)) == {
        ("noun>qm+colour", "怪兽", ("一只", "蓝色")),
        ("verb>noun", "走进", ("怪兽",)),
        ("place>verb+noun", "森林", ("怪兽", "走进")),
    }


def test_links_stay_within_a_clause():
    words = word_roles("一只蓝色怪兽。走进森林")
    assert not any(words[link.query].text == "走进" for link in word_links(words))


def test_the_control_keeps_every_link_and_makes_none_adjacent():
    words = word_roles(TUTORIAL)
    c = control(words, TUTORIAL)
    assert c.text == "一只蓝色的怪兽慢慢地走进了森林"
    assert _named(c.words, word_links(c.words)) == _named(words, word_links(words))
    for link in word_links(c.words):
        assert link.query - 1 not in link.keys, (c.words[link.query].text, [c.words[k].text for k in link.keys])


def test_a_text_with_no_adjacent_link_is_its_own_control():
    text = "一只蓝色的怪兽慢慢地走进了森林"
    assert control(word_roles(text), text) is None


@pytest.mark.parametrize("make", [_byte_level_bpe, _wordpiece], ids=["bytelevel", "wordpiece"])
def test_piece_links_point_at_every_piece_of_the_key_words(make):
    p = P.from_tokenizer(make(), TUTORIAL)
    words = word_roles(TUTORIAL)
    links = piece_links(words, p.spans)
    assert {link.relation for link in links} == {"noun>qm+colour", "verb>noun", "place>verb+noun"}
    for link in links:
        query_word = next(w for w in words if w.start <= p.spans[link.query][0] < w.end)
        inside = [i for i, (a, b) in enumerate(p.spans) if b > a >= 0 and query_word.start <= a < query_word.end]
        assert link.query == inside[-1]  # the last piece of the query word
        key_words = {w.text for w in words for k in link.keys if w.start <= p.spans[k][0] < w.end}
        expected = [
            i
            for i, (a, b) in enumerate(p.spans)
            if b > a >= 0 and any(w.start <= a < w.end for w in words if w.text in key_words)
        ]
        assert sorted(link.keys) == expected
