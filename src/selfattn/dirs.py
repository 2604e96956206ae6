"""Where selfattn keeps what it builds once and reuses (the native kernel, jieba's dictionary cache).

    cache_dir()   platformdirs' user cache folder for "selfattn": on Linux $XDG_CACHE_HOME/selfattn,
                  else ~/.cache/selfattn; macOS ~/Library/Caches/selfattn; Windows %LOCALAPPDATA%\\selfattn\\Cache

Read on every call (not at import), so a changed $XDG_CACHE_HOME is followed.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """The user's cache folder for selfattn (not created here)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("selfattn", appauthor=False))
