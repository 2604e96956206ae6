"""jieba's dictionary, read once a process and shared: the word tokenizer (`selfattn.model.tokenizer`) cuts with it,
the explainer's part-of-speech tagger (`selfattn.explainer.analysis.roles`) tags over it, the pieces' word spans
(`selfattn.explainer.pieces`) read it.

    dictionary(user_words=())  -> a private jieba.Tokenizer knowing `user_words` (one per word list; () is jieba's
                                  default dictionary itself, to which no one adds words)
    spans(text)                -> jieba's cut of `text` by the default dictionary, without HMM, as (start, end) spans;
                                  the dictionary is read only where the text holds a character it could join

jieba keeps a cache of its dictionary in `selfattn.dirs.cache_dir()` (on Linux `$XDG_CACHE_HOME/selfattn`, default
`~/.cache/selfattn`); jieba's global tokenizer is never used.
"""

from __future__ import annotations

import functools
import logging
import re
import tempfile
from pathlib import Path

from .dirs import cache_dir as selfattn_cache_dir

__all__ = ["USER_WORD_FREQ", "cache_dir", "dictionary", "spans"]

USER_WORD_FREQ = 1_000_000
"""jieba frequency given to each user word: high enough that the corpus is always cut as written."""


JOINABLE = re.compile("[\u4e00-\u9fd5+#&]")
"""A character that jieba's default dictionary can join into a word of several characters: the Han characters of
its blocks (jieba's `re_han_default`), and "+", "#", "&", the only other characters of its multi-character words
(AT&T, C#, C++: tests/test_jieba_words.py reads the dictionary to hold this)."""

UNJOINED = re.compile(r"[a-zA-Z0-9]+|\r\n|.", re.DOTALL)
"""jieba's cut of a text without a JOINABLE character: a run of ASCII letters and digits is one word (its `re_eng`
buffer), "\\r\\n" one, every other character its own."""


def spans(text: str) -> list[tuple[int, int]]:
    """jieba's `tokenize(text, HMM=False)` by the default dictionary as (start, end) spans (it keeps Latin words and
    numbers whole). A text without a JOINABLE character is cut by UNJOINED, which gives the same spans without
    reading the dictionary (~0.5 s a process)."""
    if JOINABLE.search(text) is None:
        return [m.span() for m in UNJOINED.finditer(text)]
    return [(start, end) for _, start, end in dictionary(()).tokenize(text, HMM=False)]


def cache_dir() -> Path:
    """Where jieba's dictionary cache lives: `selfattn.dirs.cache_dir()` (created), or a temporary folder."""
    path = selfattn_cache_dir()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        path = Path(tempfile.gettempdir()) / "selfattn-cache"
        path.mkdir(parents=True, exist_ok=True)
    return path


@functools.lru_cache(maxsize=8)
def dictionary(user_words: tuple[str, ...]):
    """A private jieba.Tokenizer that knows `user_words` (built once per word list; () is the default dictionary
    itself, which no one adds words to)."""
    if not user_words:
        return _default_dictionary()
    tk = _copy_of_default()
    for w in user_words:
        tk.add_word(w, freq=USER_WORD_FREQ)
    return tk


@functools.lru_cache(maxsize=1)
def _default_dictionary():
    """jieba's default dictionary in a private Tokenizer, loaded once: reading it (its cache in ours) takes ~1 s,
    which every further Tokenizer would spend again."""
    import jieba

    jieba.setLogLevel(logging.WARNING)  # its "Building prefix dict" chatter goes to stderr otherwise
    tk = jieba.Tokenizer()
    tk.tmp_dir = str(cache_dir())
    tk.check_initialized()
    return tk


def _copy_of_default():
    """A new private Tokenizer holding a copy of the default dictionary (what `initialize` would read again, a
    dict copy instead of ~1 s), for words to be added to."""
    import jieba

    base = _default_dictionary()
    tk = jieba.Tokenizer()
    tk.tmp_dir = base.tmp_dir
    with base.lock:
        tk.FREQ, tk.total = dict(base.FREQ), base.total
    tk.initialized = True
    return tk
