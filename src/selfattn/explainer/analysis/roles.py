"""Grammar roles of a text's words, from jieba's part-of-speech tagger: the tutorial's roles in any Chinese sentence.

    word_roles(text, user_words=())  -> [Word(start, end, text, tag, role)]: every word of the text, tagged
    given_roles(user_words)          -> {word: role | None}: user-given words (a list, or {word: role}), checked
    piece_roles(spans, words)        -> [role | None] per piece: the role of the word its character span lies in
    has_roles(words)                 -> whether the tagger found any role (False for a text without Chinese)

The roles are the walkthrough's meanings (数量 · 颜色 · 角色 · 动作 · 地点), read from jieba's tags
(`jieba.posseg`, offline, the ICTCLAS tag set) and from the word's place in its clause:

| role   | the word                                                          | jieba tags                  |
|--------|-------------------------------------------------------------------|-----------------------------|
| qm     | a numeral with its measure word (一只, 两条, 三个)                  | m, mq, q                    |
| colour | a colour (…色, or one colour character) or an adjective          | a, ad, an, ag; n ending 色  |
| noun   | a noun before the clause's first verb: the one that acts           | n, nr, nz, ng, nrt, r(他/它)  |
| verb   | a verb                                                            | v, vd, vi, vq, vg           |
| place  | a noun after a verb or 在/到/从 in its clause, or before 里/上 | s, ns, nt; n after v, p; n before f |

A clause ends at a punctuation mark (。，！？；、 and their ASCII forms). The tagger is a statistical
tagger: where it is wrong (jieba tags 大 in 蓝色的大怪兽 a noun), the role is wrong in the same way, and the
views show each word's tag so a reader can see why. Words the table does not name (的, 了, 慢慢地) have no
role. A text with no Chinese gets no roles at all (`has_roles`), and the views say so instead of guessing.

Roles live on words; a tokenizer's pieces (a byte-level BPE's 怪(1/3) 怪(2/3) …, SentencePiece's 怪 / 兽,
WordPiece, our jieba vocabulary) take the role of the word their span lies in (`piece_roles`), so a
relation is found whatever the tokenizer cuts.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "ROLES",
    "PRONOUNS",
    "Word",
    "word_roles",
    "in_dictionary",
    "given_roles",
    "piece_roles",
    "has_roles",
    "CLAUSE_ENDS",
]

ROLES = ("qm", "colour", "noun", "verb", "place")
"""Every role a word can have, in the walkthrough's order of meanings."""

CLAUSE_ENDS = frozenset("。，！？；、,.!?;")
"""Punctuation that ends a clause: a noun after it acts again before its own verb."""

_QM_TAGS = frozenset({"m", "mq", "q"})
_ADJECTIVE_TAGS = frozenset({"a", "ad", "an", "ag"})
_NOUN_TAGS = frozenset({"n", "nr", "nz", "ng", "nrt", "nrfg", "vn"})
_PLACE_TAGS = frozenset({"s", "ns", "nt"})
_VERB_TAGS = frozenset({"v", "vd", "vi", "vq", "vg"})
_PLACE_PREPOSITIONS = frozenset({"在", "到", "从", "向", "往", "进"})
PRONOUNS = frozenset({"他", "她", "它", "他们", "她们", "它们"})
_COLOUR_CHARS = frozenset("红橙黄绿青蓝紫黑白灰棕粉金银")
_CHINESE = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


@dataclass(frozen=True)
class Word:
    """One word of the text: its character span [start, end), its text, jieba's tag and its role (or None)."""

    start: int
    end: int
    text: str
    tag: str
    role: str | None


@functools.lru_cache(maxsize=8)
def _tagger(user_words: tuple[str, ...]):
    """A private jieba part-of-speech tagger that knows `user_words`: over the cutter the word tokenizer uses for
    the same words (`jieba_words.dictionary`: one dictionary in memory, read once), with jieba's tag table, read
    once."""
    tags = _word_tags()  # first: it may be what imports jieba.posseg
    import jieba.posseg

    from ...jieba_words import dictionary

    tagger = jieba.posseg.POSTokenizer.__new__(jieba.posseg.POSTokenizer)  # its __init__ reads the table again
    tagger.tokenizer = dictionary(user_words)
    tagger.word_tag_tab = tags  # read only: words are added without tags (`makesure_userdict_loaded`)
    return tagger


@functools.lru_cache(maxsize=1)
def _word_tags() -> dict[str, str]:
    """jieba's part-of-speech tag of each word of its default dictionary (~0.5 s to read). Importing jieba.posseg
    reads it for jieba's global tagger: where that import is this one, the table is as read and is copied; else
    someone may have merged tags into it since (`makesure_userdict_loaded`), and it is read again."""
    pristine = "jieba.posseg" not in sys.modules
    import jieba.posseg

    if pristine:
        return dict(jieba.posseg.dt.word_tag_tab)
    from ...jieba_words import dictionary

    return jieba.posseg.POSTokenizer(dictionary(())).word_tag_tab


def in_dictionary(word: str, user_words: Sequence[str] | Mapping[str, str | None] = ()) -> bool:
    """Whether the tagger's dictionary (jieba's, with `user_words`) holds `word`, so that it keeps it whole where
    the text allows (jieba's holds 走进 and 潜入, not 跑进 or 游进: it cuts those into 跑 / 进)."""
    tk = _tagger(tuple(sorted(given_roles(user_words)))).tokenizer
    tk.check_initialized()
    return bool(tk.FREQ.get(word))


def _is_colour(word: str, tag: str) -> bool:
    return tag in _ADJECTIVE_TAGS or (len(word) >= 2 and word.endswith("色")) or word in _COLOUR_CHARS


def given_roles(user_words: Sequence[str] | Mapping[str, str | None] = ()) -> dict[str, str | None]:
    """{word: role | None} of user-given words: a list of words (no role: the tagger's), or {word: role} with
    each role one of ROLES or None; a TypeError / ValueError names a bad word or role."""
    if isinstance(user_words, str):
        raise TypeError(f"user_words must be a list of words or {{word: role}}, got the str {user_words!r}")
    items = list(user_words.items()) if isinstance(user_words, Mapping) else [(w, None) for w in user_words]
    out: dict[str, str | None] = {}
    for i, (w, role) in enumerate(items):
        if not isinstance(w, str) or not w.strip():
            raise TypeError(f"user_words[{i}] must be a non-empty str, got {w!r}")
        if role is not None and role not in ROLES:
            raise ValueError(f"the role of user word {w!r} must be one of {', '.join(ROLES)} or None, got {role!r}")
        out[w] = role
    return out


def word_roles(text: str, user_words: Sequence[str] | Mapping[str, str | None] = ()) -> list[Word]:
    """Every word of `text` with jieba's part-of-speech tag and its role (the module's table).

    user_words  words the tagger must keep whole (a model's own vocabulary: our corpus's 一只, 蓝色 …), a list
                or {word: role}: a given role wins over the tagger's (`given_roles`)"""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    given = given_roles(user_words)
    if not _CHINESE.search(text):
        return []  # the tagger reads Chinese: no guess for other text
    words: list[Word] = []
    cursor = 0
    seen_verb = after_preposition = False
    for pair in _tagger(tuple(sorted(given))).cut(text, HMM=True):
        word, tag = pair.word, pair.flag
        start = text.find(word, cursor)
        if start < 0 or not word.strip():
            cursor += len(word) if start < 0 else 0
            continue
        end = start + len(word)
        cursor = end
        if word in CLAUSE_ENDS:
            seen_verb = False
            words.append(Word(start, end, word, tag, None))
            continue
        role: str | None = None
        if given.get(word) is not None:  # the user's role wins over the tagger's
            role = given[word]
            seen_verb = seen_verb or role == "verb"
        elif tag in _QM_TAGS:
            role = "qm"
        elif _is_colour(word, tag):
            role = "colour"
        elif tag in _VERB_TAGS:
            role = "verb"
            seen_verb = True
        elif tag in _PLACE_TAGS or ((seen_verb or after_preposition) and tag in _NOUN_TAGS):
            role = "place"
        elif tag in _NOUN_TAGS or word in PRONOUNS:
            role = "noun"
        elif tag == "f" and words and words[-1].role == "noun":  # 森林 in 森林里: a place
            words[-1] = Word(words[-1].start, words[-1].end, words[-1].text, words[-1].tag, "place")
        after_preposition = tag == "p" and word in _PLACE_PREPOSITIONS
        words.append(Word(start, end, word, tag, role))
    return words


def has_roles(words: Sequence[Word]) -> bool:
    """Whether any word of the text has a role (False for a text the tagger cannot read)."""
    return any(w.role is not None for w in words)


def piece_roles(spans: Sequence[tuple[int, int]], words: Sequence[Word]) -> list[str | None]:
    """The role of each piece: that of the word its character span starts in (None for a special token,
    span (−1, −1) or empty, and for a piece in a word without a role)."""
    out: list[str | None] = []
    for start, end in spans:
        if start < 0 or end <= start:
            out.append(None)
            continue
        word = next((w for w in words if w.start <= start < w.end), None)
        out.append(word.role if word is not None else None)
    return out
