"""jieba_words.spans: jieba's cut, read without the dictionary where the text holds nothing it could join, checked
against jieba's own tokenize on the dictionary itself."""

import jieba
from hypothesis import example, given, settings
from hypothesis import strategies as st

from selfattn import jieba_words
from selfattn.jieba_words import JOINABLE, dictionary, spans

# every kind of character jieba's cut treats apart: its block characters (ASCII letters, digits, "._%-"), spaces of
# several kinds and "\r\n", other punctuation, Latin letters with accents, kana, hangul, full-width forms, emoji
UNJOINABLE = "aZ09._%-' ,;!?()\"\t\n\r\u3000\u00a0éüßあカ한ＡＴ１😀/\\:=@$^*~`|<>[]{}"


def _jieba(text: str) -> list[tuple[int, int]]:
    return [(start, end) for _, start, end in dictionary(()).tokenize(text, HMM=False)]


def test_the_patterns_are_jiebas():
    assert jieba.re_han_default.pattern == "([\u4e00-\u9fd5a-zA-Z0-9+#&\\._%\\-]+)"
    assert jieba.re_eng.pattern == "[a-zA-Z0-9]"
    assert jieba.re_skip_default.pattern == "(\r\n|\\s)"


def test_every_word_of_several_characters_holds_a_joinable_character():
    """The dictionary joins characters of jieba's blocks only: a word of several characters without a Han character
    is ASCII of its blocks, and holds "+", "#" or "&"."""
    tk = dictionary(())
    block = jieba.re_han_default
    for word, freq in tk.FREQ.items():
        if freq and len(word) > 1 and block.fullmatch(word):
            assert JOINABLE.search(word), word


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=UNJOINABLE, max_size=40))
@example("line one\r\nline two\n\r end")
@example("3.14_%-x-ray don't   e.g.")
def test_a_text_without_a_joinable_character_is_cut_as_jieba_cuts_it(text):
    assert spans(text) == _jieba(text)


def test_a_text_the_dictionary_can_join_is_cut_by_jieba():
    for text in ("一只蓝色怪兽走进森林", "I like C++ and AT&T", "c#", "a+b", "Mary 走进 the 森林"):
        assert spans(text) == _jieba(text)
    assert spans("I like C++") == _jieba("I like C++")
    assert (7, 10) in spans("I like C++")  # one word, as the dictionary has it


def test_an_english_text_does_not_read_the_dictionary():
    before = jieba_words._default_dictionary.cache_info()
    assert spans("When Mary and John went to the store, John gave a drink to") == [
        m.span() for m in jieba_words.UNJOINED.finditer("When Mary and John went to the store, John gave a drink to")
    ]
    after = jieba_words._default_dictionary.cache_info()
    assert (after.hits, after.misses) == (before.hits, before.misses)
