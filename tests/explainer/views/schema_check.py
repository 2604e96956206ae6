"""Checking a dict against the page document's schema (`selfattn.explainer.views.schema`), and the field paths it
names: a test's tool (the package never validates its own output at run time; the tests hold it to the schema).

validate(doc)            [] or every problem: "doc.model.n_heads: expected int, got str '4'"
check(doc)               the same, raised as one ValueError
paths()                  {"layers[].heads[].q": True (packed: what is read of it is the decoder's), "model.n_heads": …}
"""

import types
import typing
from typing import Any, Literal, Union

from selfattn.explainer.views.schema import EXTRA, OPAQUE, Doc

__all__ = ["validate", "check", "paths"]


def validate(doc, schema=Doc) -> list[str]:
    """Every way `doc` differs from `schema` (a TypedDict): a missing or unknown key, a value of the wrong
    type, at any depth (every element of every list); [] when it follows the schema."""
    problems: list[str] = []
    _check(doc, schema, "doc", problems)
    return problems


def check(doc, schema=Doc) -> None:
    """`validate`, raised: a ValueError naming the first problems."""
    problems = validate(doc, schema)
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ValueError("the export does not follow its schema: " + "; ".join(problems[:5]) + more)


def _hints(td) -> dict[str, Any]:
    return typing.get_type_hints(td)


def _is_typeddict(t) -> bool:
    return isinstance(t, type) and issubclass(t, dict) and hasattr(t, "__required_keys__")


def _check(value, t, where: str, problems: list[str]) -> None:
    if t is Any:
        return
    if _is_typeddict(t):
        if not isinstance(value, dict):
            problems.append(f"{where}: expected {t.__name__} (a dict), got {type(value).__name__}")
            return
        hints = _hints(t)
        for key in t.__required_keys__ - value.keys():
            problems.append(f"{where}: lacks {key!r} ({t.__name__})")
        extra = getattr(t, EXTRA, None)
        for key, v in value.items():
            if key in hints:
                _check(v, hints[key], f"{where}.{key}", problems)
            elif extra is not None:
                _check(v, extra, f"{where}.{key}", problems)
            else:
                problems.append(f"{where}: unknown key {key!r} ({t.__name__} has {', '.join(hints)})")
        return
    origin = typing.get_origin(t)
    if origin in (Union, types.UnionType):
        options = typing.get_args(t)
        for option in options:
            trial: list[str] = []
            _check(value, option, where, trial)
            if not trial:
                return
        problems.append(f"{where}: expected {_name(t)}, got {_shown(value)}")
        return
    if origin is Literal:
        if not any(value == a and type(value) is type(a) for a in typing.get_args(t)):
            problems.append(f"{where}: expected one of {typing.get_args(t)}, got {_shown(value)}")
        return
    if origin is list:
        if not isinstance(value, list):
            problems.append(f"{where}: expected list, got {type(value).__name__}")
            return
        (item,) = typing.get_args(t)
        for i, v in enumerate(value):
            _check(v, item, f"{where}[{i}]", problems)
        return
    if origin is dict:
        if not isinstance(value, dict):
            problems.append(f"{where}: expected dict, got {type(value).__name__}")
            return
        key_type, item = typing.get_args(t)
        for k, v in value.items():
            if not isinstance(k, key_type):
                problems.append(f"{where}: key {k!r} is not a {key_type.__name__}")
            _check(v, item, f"{where}.{k}", problems)
        return
    if t is type(None):
        if value is not None:
            problems.append(f"{where}: expected None, got {_shown(value)}")
        return
    if t in (int, float) and isinstance(value, bool) or not isinstance(value, t):
        problems.append(f"{where}: expected {t.__name__}, got {_shown(value)}")


def _name(t) -> str:
    return getattr(t, "__name__", None) or str(t).replace("typing.", "")


def _shown(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'…' if len(text) > 40 else ''}"


def paths(schema=Doc, prefix: str = "") -> dict[str, bool]:
    """Every field path the schema names, list levels written "[]": "layers[].heads[].q", "model.n_heads",
    a map's items "head_types.colours.*" (what the page's JS may read; tests/explainer/views/test_schema.py);
    each mapped to whether it is OPAQUE (a packed array: what is read from it is the decoder's)."""
    out: dict[str, bool] = {}
    _paths(schema, prefix, out)
    return out


def _paths(t, prefix: str, out: dict[str, bool]) -> None:
    if t in OPAQUE:
        out[prefix] = True
        return
    out.setdefault(prefix, False)
    if _is_typeddict(t):
        for key, hint in _hints(t).items():
            _paths(hint, f"{prefix}.{key}" if prefix else key, out)
        if hasattr(t, EXTRA):
            _paths(getattr(t, EXTRA), f"{prefix}.*", out)
        return
    origin = typing.get_origin(t)
    if origin in (Union, types.UnionType):
        for option in typing.get_args(t):
            _paths(option, prefix, out)
    elif origin is list:
        _paths(typing.get_args(t)[0], prefix + "[]", out)
    elif origin is dict:
        _paths(typing.get_args(t)[1], prefix + ".*", out)
    elif t is Any:
        out[prefix + ".*"] = True
