"""jieba's dictionary, read once a process and shared: the word tokenizer (`selfattn.model.tokenizer`) cuts with it,
the explainer's part-of-speech tagger (`selfattn.explainer.analysis.roles`) tags over it, the pieces' word spans
(`selfattn.explainer.pieces`) read it.

    dictionary(user_words=())  -> a private jieba.Tokenizer knowing `user_words` (one per word list; () is jieba's
                                  default dictionary itself, to which no one adds words)

jieba keeps a cache of its dictionary in `selfattn.dirs.cache_dir()` (on Linux `$XDG_CACHE_HOME/selfattn`, default
`~/.cache/selfattn`); jieba's global tokenizer is never used.
"""

from __future__ import annotations

import functools
import logging
import tempfile
from pathlib import Path

from .dirs import cache_dir as selfattn_cache_dir

__all__ = ["USER_WORD_FREQ", "cache_dir", "dictionary"]

USER_WORD_FREQ = 1_000_000
"""jieba frequency given to each user word: high enough that the corpus is always cut as written."""


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
