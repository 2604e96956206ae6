"""One codec: no module of the package but views/codec.py writes or reads base64, and no page module but data.js
decodes it, so every array the page carries is encoded by `codec` and decoded by data.js's one `unpack`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import selfattn
from selfattn.explainer.views import codec, report

PACKAGE = Path(selfattn.__file__).resolve().parent
CODEC = Path(codec.__file__).resolve()
BASE64_MODULES = {"base64", "binascii"}
"""The standard library's base64 writers: `base64`, and `binascii` beneath it (b2a_base64)."""
BASE64_CALLS = {
    "b64encode",
    "b64decode",
    "standard_b64encode",
    "standard_b64decode",
    "urlsafe_b64encode",
    "urlsafe_b64decode",
    "encodebytes",
    "decodebytes",
    "b2a_base64",
    "a2b_base64",
}


def base64_uses(path: Path) -> list[str]:
    """Where a module imports a base64 module or calls a base64 function (by name or attribute): "file:line what"."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    where = path.relative_to(PACKAGE.parent)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [(node.module or "").split(".")[0]] if node.level == 0 else []
        elif isinstance(node, ast.Call):
            f = node.func
            names = [f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""]
            names = [n for n in names if n in BASE64_CALLS]
            found += [f"{where}:{node.lineno} calls {n}" for n in names]
            continue
        else:
            continue
        found += [f"{where}:{node.lineno} imports {n}" for n in names if n in BASE64_MODULES]
    return found


def test_only_the_codec_module_writes_base64():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert CODEC in modules and len(modules) > 50  # the walk sees the package
    assert base64_uses(CODEC)  # and would see a use where there is one
    others = [use for path in modules if path != CODEC for use in base64_uses(path)]
    assert not others, f"base64 outside {CODEC.relative_to(PACKAGE.parent)}: {others}"


def test_only_data_js_decodes_base64_and_it_has_one_unpack():
    static = report.STATIC_DIR
    scripts = sorted(static.rglob("*.js"))
    assert static / "data.js" in scripts
    decoding = [p.name for p in scripts if re.search(r"\b(atob|btoa|DecompressionStream)\b", p.read_text("utf-8"))]
    assert decoding == ["data.js"], decoding
    data = (static / "data.js").read_text("utf-8")
    assert len(re.findall(r"\batob\(", data)) == 1 and len(re.findall(r"new DecompressionStream\(", data)) == 1
    exported = re.findall(r"^export (?:async )?function (\w+)", data, flags=re.M)
    assert "unpack" in exported and "halves" not in exported, exported
