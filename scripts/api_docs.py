"""docs/api.md, the API reference, generated from the package's own docstrings and signatures.

    python scripts/api_docs.py           write docs/api.md (atomically: a temporary name, then renamed)
    python scripts/api_docs.py --check   exit 1, naming the file, where docs/api.md is not what this would write

Every public name: each module of MODULES is read through its `__all__` (a module that does not exist in this tree
is left out, so a public subpackage appears as soon as it is added), and every name gets its signature (arguments and
defaults, from `inspect.signature`) and its docstring, which holds the shapes, dtypes and errors. A class gets its
public methods and properties too (those its own body defines). A constant gets its type, its value where that is
short and plain, and the string literal written under its assignment (the package's way of documenting a constant),
found with `ast` in the module that defines it. tests/test_api_docs.py regenerates the text in memory and compares.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import os
import re
import sys
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "docs" / "api.md"

MODULES = (
    "selfattn",
    "selfattn.kernels",
    "selfattn.kernels.native_build",
    "selfattn.modules",
    "selfattn.reference",
    "selfattn.masks",
    "selfattn.hf",
    "selfattn.distributed",
    "selfattn.explainer.api",
    "selfattn.model",
    "selfattn.compat",
)
"""The public modules, in the reference's order: the package, then each public subpackage (its `__all__`)."""

PLAIN = (str, int, float, bool, type(None))
"""Values shown whole when their repr is short (SHORT characters); others by type."""

SHORT = 100

ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
"""An object's address in a repr (a sentinel default): removed, so the text is the same on every run."""


def _public_modules() -> list[ModuleType]:
    modules = []
    for name in MODULES:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as error:
            if error.name != name:  # the module exists and something it imports is missing: say so
                raise
    return modules


def _attribute_docstring(module_name: str, name: str, seen: frozenset[str] = frozenset()) -> str | None:
    """The string literal under `name = ...` in `module_name`'s source, following `from .x import name` to the
    module that defines it; None where there is none."""
    if module_name in seen:
        return None
    module = sys.modules.get(module_name) or importlib.import_module(module_name)
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return None
    body = tree.body
    for i, node in enumerate(body):
        targets = []
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        if name in targets:
            after = body[i + 1] if i + 1 < len(body) else None
            if (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                return inspect.cleandoc(after.value.value)
            return None
    for node in body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    package = module_name if hasattr(module, "__path__") else module_name.rpartition(".")[0]
                    source = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                    return _attribute_docstring(source, alias.name, seen | {module_name})
    return None


class _Sorted:
    """A set default shown with its items sorted: a set's own repr follows its hashes, which change between runs."""

    def __init__(self, items) -> None:
        inside = f"{{{', '.join(sorted(map(repr, items)))}}}" if items else ""
        self.text = f"{type(items).__name__}({inside})"

    def __repr__(self) -> str:
        return self.text


def _signature(obj) -> str:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    parameters = [
        p.replace(default=_Sorted(p.default)) if isinstance(p.default, (set, frozenset)) else p
        for p in signature.parameters.values()
    ]
    return ADDRESS.sub("", str(signature.replace(parameters=parameters)))


def _fence(text: str, language: str = "text") -> list[str]:
    return [f"```{language}", text.rstrip(), "```", ""]


def _value_line(value) -> str:
    kind = type(value).__name__
    if isinstance(value, PLAIN) or (isinstance(value, tuple) and all(isinstance(v, PLAIN) for v in value)):
        text = repr(value)
        if len(text) <= SHORT:
            return f"`{kind}` = `{text}`"
    if isinstance(value, dict):
        return f"`{kind}` of {len(value)} entries: {', '.join(f'`{k}`' for k in list(value)[:12])}"
    return f"`{kind}`"


def _members(cls: type) -> list[tuple[str, object]]:
    """The public methods and properties `cls`'s own body defines, in its order."""
    out = []
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if inspect.isfunction(member) or isinstance(member, property):
            out.append((name, member))
    return out


def _entry(module: ModuleType, name: str) -> list[str]:
    qualified = f"{module.__name__}.{name}"
    obj = getattr(module, name)
    lines = [f"### `{qualified}`", ""]
    if inspect.ismodule(obj):
        lines += [f"module `{obj.__name__}`", ""]
        doc = inspect.getdoc(obj)
    elif inspect.isclass(obj):
        lines += _fence(f"class {name}{_signature(obj)}", "python")
        doc = inspect.getdoc(obj)
    elif callable(obj) and (inspect.isroutine(obj) or hasattr(obj, "__wrapped__")):
        lines += _fence(f"{name}{_signature(obj)}", "python")
        doc = inspect.getdoc(obj)
    else:
        lines += [_value_line(obj), ""]
        doc = _attribute_docstring(module.__name__, name)
    lines += _fence(doc) if doc else ["(no docstring)", ""]
    if inspect.isclass(obj):
        for member_name, member in _members(obj):
            if isinstance(member, property):
                lines += [f"#### `{qualified}.{member_name}` (property)", ""]
                member_doc = inspect.getdoc(member)
            else:
                lines += [f"#### `{qualified}.{member_name}`", ""]
                lines += _fence(f"{member_name}{_signature(member)}", "python")
                member_doc = inspect.getdoc(member)
            lines += _fence(member_doc) if member_doc else []
    return lines


def render() -> str:
    """The whole text of docs/api.md for the package importable here."""
    modules = _public_modules()
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings and signatures by `python scripts/api_docs.py`; do not edit by hand "
        "(tests/test_api_docs.py fails when this file is not what the script writes). Every name of each public "
        "module's `__all__`.",
        "",
    ]
    for module in modules:
        anchor = module.__name__.replace(".", "")
        lines.append(f"- [`{module.__name__}`](#{anchor})")
    lines.append("")
    for module in modules:
        lines += [f"## {module.__name__}", ""]
        doc = inspect.getdoc(module)
        lines += _fence(doc) if doc else []
        for name in module.__all__:
            lines += _entry(module, name)
    return "\n".join(lines).rstrip() + "\n"


def write(text: str, target: Path = TARGET) -> None:
    """`text` into `target` atomically: a temporary file beside it, then renamed over it."""
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 where docs/api.md is stale; write nothing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = TARGET.read_text(encoding="utf-8") if TARGET.is_file() else None
        if current != text:
            print(f"{TARGET} is stale: run python scripts/api_docs.py", file=sys.stderr)
            return 1
        return 0
    write(text)
    print(f"wrote {TARGET} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
