"""Word-level tokenizer: jieba cuts Chinese into words, a vocabulary maps words to ids.

    一只蓝色怪兽走进森林  ->  一只 / 蓝色 / 怪兽 / 走进 / 森林  ->  [<bos>, 17, 96, 54, 88, 70]

- jieba runs with its default dictionary plus the corpus's own words (the "user words",
  added with a high frequency so the corpus is always cut the way it was written), and
  without its HMM guesser, so the same text is always cut the same way.
- A word that is not in the vocabulary falls back to its characters; a character that is
  not in the vocabulary either becomes `<unk>`.
- `save(path)` writes one JSON file holding the vocabulary *and* the user words, so a
  loaded tokenizer cuts text exactly as the one that was saved.

jieba's dictionary is read once a process and shared with the explainer's part-of-speech tagger
(`selfattn.jieba_words`); each word list gets its own `jieba.Tokenizer` instance, never the global one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..files import read_json, write_atomic
from ..jieba_words import USER_WORD_FREQ, cache_dir, dictionary

__all__ = ["WordTokenizer", "SPECIAL_TOKENS", "USER_WORD_FREQ", "FORMAT", "cache_dir"]

SPECIAL_TOKENS = ("<pad>", "<unk>", "<bos>", "<eos>")
"""Ids 0, 1, 2, 3 in every vocabulary."""

FORMAT = "selfattn.word-tokenizer"
VERSION = 1


class WordTokenizer:
    """Text ↔ ids: jieba words, a fixed vocabulary, character fallback.

    tokens      the vocabulary in id order; starts with <pad> <unk> <bos> <eos>
    user_words  words added to jieba's dictionary so that they are never split
    """

    def __init__(self, tokens: Sequence[str], user_words: Sequence[str] = ()):
        tokens = list(tokens)
        if tuple(tokens[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
            raise ValueError(f"the vocabulary must start with {SPECIAL_TOKENS}, got {tuple(tokens[:4])}")
        for t in tokens:
            if not isinstance(t, str) or not t:
                raise TypeError(f"every token must be a non-empty str, got {t!r}")
        index: dict[str, int] = {}
        for i, t in enumerate(tokens):
            if t in index:
                raise ValueError(f"token {t!r} appears twice in the vocabulary (ids {index[t]} and {i})")
            index[t] = i
        user_words = list(user_words)
        for i, w in enumerate(user_words):
            if not isinstance(w, str) or not w:
                raise TypeError(f"user_words[{i}] must be a non-empty str, got {w!r}")
        self.tokens: list[str] = tokens
        self.user_words: tuple[str, ...] = tuple(sorted(set(user_words)))
        self._index = index

    # --- building -----------------------------------------------------------------------

    @classmethod
    def from_words(cls, sentences: Iterable[Sequence[str]], user_words: Sequence[str] = ()) -> WordTokenizer:
        """A vocabulary of every word in `sentences` (already cut) and every character in them.

        sentences   iterable of word lists, e.g. corpus `Sentence.words`
        user_words  extra words for jieba's dictionary (default: the words seen)
        """
        words: set[str] = set()
        for s in sentences:
            words.update(s)
        words.discard("")
        chars = {ch for w in words for ch in w} - words
        tokens = list(SPECIAL_TOKENS) + sorted(words - set(SPECIAL_TOKENS)) + sorted(chars)
        return cls(tokens, user_words or sorted(words))

    # --- ids ------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    pad_id, unk_id, bos_id, eos_id = range(len(SPECIAL_TOKENS))

    def id_of(self, token: str) -> int:
        """The id of a token that must be in the vocabulary (KeyError naming it otherwise)."""
        try:
            return self._index[token]
        except KeyError:
            raise KeyError(f"token {token!r} is not in the vocabulary of {self.vocab_size} tokens") from None

    def __contains__(self, token: str) -> bool:
        return token in self._index

    # --- text -----------------------------------------------------------------------------

    def segment(self, text: str) -> list[str]:
        """jieba's words for `text` (whitespace dropped), before any vocabulary lookup."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return [w for w in dictionary(self.user_words).cut(text, HMM=False) if w.strip()]

    def tokenize(self, text: str) -> list[str]:
        """Vocabulary tokens for `text`: words, else their characters, else <unk>."""
        out: list[str] = []
        for w in self.segment(text):
            if w in self._index:
                out.append(w)
            else:
                out.extend(ch if ch in self._index else "<unk>" for ch in w if not ch.isspace())
        return out

    def unknown(self, text: str) -> list[str]:
        """The characters of `text` this vocabulary reads as <unk>, in order (what `encode` gives unk_id)."""
        return [ch for w in self.segment(text) if w not in self._index for ch in w if ch not in self._index]

    def encode_words(self, words: Sequence[str], *, bos: bool = True, eos: bool = False) -> list[int]:
        """Ids of words already cut (unknown ones fall back to characters, then <unk>)."""
        ids = [self.bos_id] if bos else []
        for w in words:
            if w in self._index:
                ids.append(self._index[w])
            else:
                ids.extend(self._index.get(ch, self.unk_id) for ch in w)
        if eos:
            ids.append(self.eos_id)
        return ids

    def encode(self, text: str, *, bos: bool = True, eos: bool = False) -> list[int]:
        """text -> ids (L,), with <bos> first unless bos=False and <eos> last if eos=True."""
        return self.encode_words(self.segment(text), bos=bos, eos=eos)

    def decode(self, ids: Iterable[int], *, skip_special: bool = True) -> str:
        """ids -> text; special tokens are dropped unless skip_special=False."""
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} is outside the vocabulary [0, {self.vocab_size})")
            if skip_special and i < len(SPECIAL_TOKENS):
                continue
            out.append(self.tokens[i])
        return "".join(out)

    # --- files ----------------------------------------------------------------------------

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "special_tokens": list(SPECIAL_TOKENS),
            "user_word_freq": USER_WORD_FREQ,
            "hmm": False,
            "tokens": self.tokens,
            "user_words": list(self.user_words),
        }

    @classmethod
    def from_dict(cls, data: dict, *, source: str = "tokenizer") -> WordTokenizer:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else None
            raise ValueError(f"{source} is not a {FORMAT} file (format={found!r})")
        if data.get("version") != VERSION:
            raise ValueError(f"{source} has version {data.get('version')!r}; this selfattn reads version {VERSION}")
        for key in ("tokens", "user_words"):
            if not isinstance(data.get(key), list):
                raise ValueError(f"{source} has no list {key!r}")
        try:
            return cls(data["tokens"], data["user_words"])
        except TypeError as e:  # a wrong value in a file is a bad file, not a bad call
            raise ValueError(f"{source}: {e}") from None

    def save(self, path: str | os.PathLike, *, force: bool = False) -> Path:
        """Write the tokenizer as JSON (UTF-8, readable), atomically; an existing file only with force=True."""
        return write_atomic(path, json.dumps(self.to_dict(), ensure_ascii=False, indent=1) + "\n", force=force)

    @classmethod
    def load(cls, path: str | os.PathLike) -> WordTokenizer:
        """A tokenizer saved by `save` (the JSON read bounded by `selfattn.files.read_json`)."""
        return cls.from_dict(read_json(path, what="tokenizer file"), source=str(path))

    def __repr__(self) -> str:
        return f"WordTokenizer(vocab_size={self.vocab_size}, user_words={len(self.user_words)})"
