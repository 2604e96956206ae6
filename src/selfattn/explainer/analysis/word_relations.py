"""The tutorial's relations on the words of any Chinese sentence, on any tokenizer's pieces, and their controls.

    word_links(words)            -> [WordLink(relation, query, keys)]: word indices (`roles.word_roles`)
    piece_links(words, spans)    -> [Link(relation, query, keys)]: the same on pieces (query: the last piece of
                                    the query word, which has read all of it; keys: every piece of the key words)
    control(words, text, user_words=(), known=None)
                                 -> Control(text, words, moved, unknown): the sentence with a modifier inserted
                                    before each query word whose key is the word just before it (FILLERS: the
                                    first the model knows, `known(word) -> bool`)
    contrasts(words, text, user_words=(), known=None, need=MIN_ROWS, scenes=())
                                 -> [Control]: the control first (where a link is adjacent), then sentences of
                                    the same shape with other words of each role (`Scenes`) and the same
                                    fillers, until every relation has `need` rows where its key is not the
                                    previous word (at most MAX_CONTRASTS sentences)

Why controls: in 一只蓝色怪兽走进森林 every link the tutorial draws (蓝色←怪兽, 怪兽←走进, 走进←森林) is also
"the previous word", so a head that only ever looks one word back would seem to know grammar. The control
sentence keeps the words and their relations but puts a word between each adjacent pair (蓝色的怪兽,
怪兽慢慢地走进, 走进了森林): a previous-word head now looks at the modifier, a relation head still at the
key. A relation is credited to a head only where it holds on the control too (`heads` says which).

Why more than one control: a relation is a statistic like any head type, so it is tested on at least MIN_ROWS
rows (`held`). One sentence holds one or two links of each relation; the contrast sentences (一条红色的金鱼慢慢地
游进了大海 …) keep the sentence's shape and relations with other words of the same roles, so the rows are other
prefixes, not the same row again.

The relations (`relations.RELATIONS`' claims): noun → its measure word and colour, verb → the noun that
acts, place → the verb and the noun; each key is the nearest earlier word of that role in the same clause.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .chance import MIN_ROWS
from .relations import RELATIONS, Link
from .roles import CLAUSE_ENDS, PRONOUNS, Word, in_dictionary, word_roles

__all__ = [
    "WordLink",
    "Control",
    "word_links",
    "word_pieces",
    "piece_links",
    "control",
    "contrasts",
    "FILLERS",
    "Scenes",
    "MAX_CONTRASTS",
]

FILLERS = {
    "noun": ("的",),
    "verb": ("慢慢地", "悄悄地", "正在", "在"),
    "place": ("了", "这片", "这个"),
}
"""The words that may be inserted before a query word of each role whose key is adjacent, in the order they are
tried: each changes no relation (的 joins a modifier to its noun; 慢慢地, 悄悄地 are adverbs of the verb and 正在,
在 mark it going on; 了 marks the verb done, 这片, 这个 point at the place). `control` takes the first one the
model's tokenizer knows that the tagger gives no role in the sentence (a role would make it a key itself), else
the first, and says which fillers the model does not know (`Control.unknown`)."""


Scenes = Sequence[Mapping[str, Sequence[str]]]
"""The words a contrast sentence puts in place of a text's words of each role: one scene per entry, {role: words}
(一只 蓝色 猫 走进 城堡, 两只 红色 兔子 …, 一条 … 鱼 游进 大海), so a measure word fits its noun and a verb its place
(a text's second verb takes the scene's second, …). Data given by the explainer (`Explainer.scenes`: the default
model's grammar's, `model.corpus.scenes`); a real model reads them as any Chinese. `contrasts` keeps a sentence only
where the tagger gives it the same relations again, every substitute a word of its own (without the default model's
words jieba cuts 游进 into 游 / 进: that scene is left out)."""

MAX_CONTRASTS = 8
"""Most sentences run beside the text to measure its relations (`contrasts`): with one link of a relation per
sentence, the control and seven more give MIN_ROWS rows."""


@dataclass(frozen=True)
class WordLink:
    """query word index → the key word indices it should look at, by `relation` (a key of RELATIONS)."""

    relation: str
    query: int
    keys: tuple[int, ...]


@dataclass(frozen=True)
class Control:
    """The control sentence: its text, its words (tagged again), and the query words given a modifier
    (their indices in the original sentence's words)."""

    text: str
    words: list[Word]
    moved: tuple[int, ...]
    unknown: tuple[str, ...] = ()
    """The fillers the model's tokenizer does not know (`control`'s `known`): it reads them as <unk>."""


def _clause_relations():
    return [(name, rel) for name, rel in RELATIONS.items() if name != "clause2>clause1"]


def word_links(words: Sequence[Word]) -> list[WordLink]:
    """For each word of a relation's query role, the nearest earlier word of each target role within its
    clause (a clause ends at `roles.CLAUSE_ENDS`; a measure word starts a new noun phrase)."""
    out: list[WordLink] = []
    start = 0
    for i, w in enumerate(words):
        if w.text in CLAUSE_ENDS:
            start = i + 1
            continue
        if w.role is None:
            continue
        for name, rel in _clause_relations():
            if rel["query"] != w.role:
                continue
            keys = []
            for target in rel["targets"]:
                k = next((j for j in range(i - 1, start - 1, -1) if words[j].role == target), None)
                if k is not None:
                    keys.append(k)
            if keys:
                out.append(WordLink(name, i, tuple(sorted(keys))))
    return out


def word_pieces(words: Sequence[Word], spans: Sequence[tuple[int, int]]) -> list[list[int]]:
    """The pieces whose span starts inside each word (special tokens belong to none)."""
    out: list[list[int]] = [[] for _ in words]
    for p, (start, end) in enumerate(spans):
        if start < 0 or end <= start:
            continue
        for i, w in enumerate(words):
            if w.start <= start < w.end:
                out[i].append(p)
                break
    return out


def piece_links(words: Sequence[Word], spans: Sequence[tuple[int, int]]) -> list[Link]:
    """`word_links` on a tokenizer's pieces: the query is the last piece of the query word, the keys every
    piece of the key words (a link whose words have no piece is left out)."""
    pieces = word_pieces(words, spans)
    out: list[Link] = []
    for link in word_links(words):
        if not pieces[link.query]:
            continue
        keys = tuple(p for k in link.keys for p in pieces[k])
        if keys:
            out.append(Link(link.relation, pieces[link.query][-1], keys))
    return out


def _build(words: Sequence[Word], text: str, moved: Sequence[int], chosen: Mapping[str, str]):
    """(the text with chosen[role] inserted before each moved word, [(start, end, role)] of each inserted filler)."""
    parts: list[str] = []
    spans: list[tuple[int, int, str]] = []
    cursor = at = 0
    for i in moved:
        w = words[i]
        filler = chosen.get(w.role or "", "")
        before = text[cursor : w.start]
        at += len(before)
        parts += [before, filler]
        if filler:
            spans.append((at, at + len(filler), w.role or ""))
        at += len(filler)
        cursor = w.start
    parts.append(text[cursor:])
    return "".join(parts), spans


def _roleless(text: str, spans, role: str, user_words) -> bool:
    """Whether the tagger gives every word of the fillers inserted for `role` no role (so none becomes a key)."""
    tagged = word_roles(text, user_words)
    return all(w.role is None for s, e, r in spans if r == role for w in tagged if w.start < e and s < w.end)


def control(
    words: Sequence[Word],
    text: str,
    user_words: Sequence[str] | Mapping[str, str | None] = (),
    known: Callable[[str], bool] | None = None,
) -> Control | None:
    """The control sentence of `text` (its `words`): a filler inserted before each query word whose key is the
    word just before it. None when no link is adjacent (the text is its own control).

    known  whether the model's tokenizer knows a word (None: every filler counts as known): per role, the first
           of FILLERS it knows whose words the tagger leaves without a role; where none is, the first, named in
           `Control.unknown`"""
    moved = sorted({link.query for link in word_links(words) if link.query - 1 in link.keys})
    if not moved:
        return None
    roles = [r for r in dict.fromkeys(words[i].role for i in moved) if r in FILLERS]
    chosen = {r: FILLERS[r][0] for r in roles}
    if known is not None:
        for r in roles:
            for candidate in FILLERS[r]:
                if not known(candidate):
                    continue
                trial = chosen | {r: candidate}
                trial_text, spans = _build(words, text, moved, trial)
                if _roleless(trial_text, spans, r, user_words):
                    chosen = trial
                    break
    new_text, _ = _build(words, text, moved, chosen)
    unknown = tuple(f for f in chosen.values() if known is not None and not known(f))
    return Control(new_text, word_roles(new_text, user_words), tuple(moved), unknown)


def _relations(words: Sequence[Word]) -> Counter:
    """How many links of each relation the words hold, and (relation, "apart") how many of them have no key
    that is the word just before the query."""
    out: Counter = Counter()
    for link in word_links(words):
        out[link.relation] += 1
        out[link.relation, "apart"] += link.query - 1 not in link.keys
    return out


def _substituted(
    words: Sequence[Word],
    text: str,
    scene: Mapping[str, Sequence[str]],
    known: Callable[[str], bool] | None,
    user_words=(),
) -> tuple[str, list[str]] | None:
    """(the text with each word of a role, pronouns aside, replaced by `scene`'s (`Scenes`) word of that role,
    the n-th word of the role taking the scene's n-th of those the tagger's dictionary holds (`in_dictionary`: it
    would cut the others), the words put in); None where one is a word the tokenizer does not know, or a role of
    the scene has no word in the dictionary."""
    parts: list[str] = []
    put: list[str] = []
    cursor, seen = 0, Counter[str]()
    for w in words:
        if w.role is None or w.text in PRONOUNS:
            continue
        bank = [b for b in scene.get(w.role, ()) if in_dictionary(b, user_words)]
        if not bank:
            return None
        new = bank[seen[w.role] % len(bank)]
        seen[w.role] += 1
        if known is not None and not known(new):
            return None
        parts += [text[cursor : w.start], new]
        put.append(new)
        cursor = w.end
    return "".join(parts) + text[cursor:], put


def contrasts(
    words: Sequence[Word],
    text: str,
    user_words: Sequence[str] | Mapping[str, str | None] = (),
    known: Callable[[str], bool] | None = None,
    need: int = MIN_ROWS,
    scenes: Scenes = (),
) -> list[Control]:
    """The sentences a relation of `text` is measured on beside the text itself: the control (`control`, where a
    link is adjacent), then the text with other words of each role (`_substituted`: each of `scenes` in turn) and
    the same fillers, each
    kept only where the tagger finds the same relations with no key the previous word of its query; as many as
    make every relation's rows apart from the previous word (the text's own included) reach `need`, at most
    MAX_CONTRASTS. [] where the text has no relation."""
    have = _relations(words)
    names = [r for r in have if isinstance(r, str)]
    if not names:
        return []
    rows = Counter({r: have[r, "apart"] for r in names})
    out: list[Control] = []

    def add(c: Control) -> None:
        out.append(c)
        got = _relations(c.words)
        rows.update({r: got[r, "apart"] for r in names})

    first = control(words, text, user_words, known)
    if first is not None:
        add(first)
    for scene in scenes:
        if all(rows[r] >= need for r in names) or len(out) >= MAX_CONTRASTS:
            break
        made = _substituted(words, text, scene, known, user_words)
        if made is None:
            continue
        other, put = made
        o_words = word_roles(other, user_words)
        c = control(o_words, other, user_words, known) or Control(other, o_words, ())
        got = _relations(c.words)
        same = {r: n for r, n in got.items() if isinstance(r, str)} == {r: have[r] for r in names}
        whole = Counter(put) <= Counter(w.text for w in c.words)  # no substitute cut or joined by the tagger
        fresh = c.text != text and all(c.text != o.text for o in out)
        if same and whole and fresh and all(got[r, "apart"] == got[r] for r in names):
            add(c)
    return out
