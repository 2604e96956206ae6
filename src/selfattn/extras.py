"""The optional parts of selfattn and the one sentence for a missing one.

A core install (`pip install selfattn`) is the engine: `selfattn.attention`, the modules, ring attention
and the console script. The explainer and the bundled model need the `[explain]` extra, the web app the
`[serve]` extra:

    require("explain", "selfattn explain")   # MissingExtra: "selfattn explain needs the [explain] extra
                                             #  (transformers is not installed): pip install 'selfattn[explain]'"

`MissingExtra` is an ImportError (what a missing package is) and a ValueError (what the CLI reports in one
line, exit status 1).
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "MissingExtra", "missing", "require"]

EXTRAS: dict[str, tuple[str, ...]] = {
    "explain": (
        "jieba",
        "safetensors",
        "matplotlib",
        "tokenizers",
        "transformers",
        "huggingface_hub",
        "gguf",
        "accelerate",
        "isal",
    ),
    "serve": ("fastapi", "starlette", "pydantic", "uvicorn"),
}
"""Each extra of pyproject.toml and the modules it installs (import names); tests/test_package.py checks
that the two agree."""


class MissingExtra(ImportError, ValueError):
    """A part of selfattn was used whose extra is not installed."""


def missing(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here (found without importing them)."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}: one of {sorted(EXTRAS)}")
    return [name for name in EXTRAS[extra] if not _importable(name)]


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError, AttributeError):  # a module blocked in sys.modules (None), a broken one
        return False


def require(extra: str, feature: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise MissingExtra, naming the extra to install, if any module of `extra` is missing (or, with `modules`,
    any of those: the ones `feature` imports, each a module of the extra)."""
    absent = missing(extra)
    if modules is not None:
        unknown = [m for m in modules if m not in EXTRAS[extra]]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not a module of the [{extra}] extra: one of {EXTRAS[extra]}")
        absent = [m for m in absent if m in modules]
    if absent:
        verb = "is" if len(absent) == 1 else "are"
        raise MissingExtra(
            f"{feature} needs the [{extra}] extra ({', '.join(absent)} {verb} not installed): "
            f"pip install 'selfattn[{extra}]'",
            name=absent[0],
        )
