"""The page's ES modules as one classic script, for a self-contained HTML file.

    bundle(folder, "main.js") -> str     # the modules that main.js reaches, dependencies first

Why a bundle and not the modules themselves: a page that must open from a file, from the app and inside
an `<iframe srcdoc>` (notebooks), with a policy that runs only scripts it knows by hash, cannot load
modules — a `file://` page may not import files, an import map of `data:` URLs needs `script-src data:`
(which would run any `data:` script), and an imported module is never matched against a hash. One
inline script is matched by its SHA-256 and runs the same everywhere.

Each module becomes a function scope that returns its exports, called once, in dependency order; its
imports become reads of those returned objects:

    import { a, b as c } from "./x.js";   →   const { a, b: c } = __x;
    export function f() {…}                →   function f() {…}          (and `return { f, … };` at its end)

The forms accepted are exactly these: single-line `import { … } from "./relative.js";` at the start of
a line, and `export` before `function`, `async function`, `class` or `const` (a `let` export would be
read once, not live, so it is refused). Anything else that starts a line with `import` or `export`, a
dynamic `import(`, a cycle, a missing file or an imported name the module does not export is a
ValueError naming the file and the line.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

__all__ = ["bundle", "modules"]

_IMPORT = re.compile(r'^import \{([^}]*)\} from "(\.{1,2}/[^"]+\.js)";\s*$')
_EXPORT = re.compile(r"^export (?:async function\*? |function\*? |class |const )([A-Za-z_$][\w$]*)")
_STARTS = re.compile(r"^(import|export)\b")
_DYNAMIC = re.compile(r"\bimport\s*\(")
_NAME = re.compile(r"^[A-Za-z_$][\w$]*$")


def modules(folder: str | Path, entry: str) -> list[str]:
    """The module paths (relative to folder, POSIX) that `entry` reaches, each after those it imports."""
    return [name for name, _ in _ordered(Path(folder), entry)]


def bundle(folder: str | Path, entry: str) -> str:
    """One strict-mode script that runs `entry` with everything it imports (see the module doc)."""
    parts = ['"use strict";', "(() => {"]
    ordered = _ordered(Path(folder), entry)
    names = [_var(name) for name, _ in ordered]
    if len(set(names)) != len(names):
        shared = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"two of the page's modules would share one variable: {shared}")
    for name, mod in ordered:
        parts.append(f"// ---- {name}")
        parts.append(f"const {_var(name)} = (() => {{")
        parts.append(mod["body"].rstrip("\n"))
        parts.append(f"return {{ {', '.join(mod['exports'])} }};")
        parts.append("})();")
    parts.append("})();")
    return "\n".join(parts) + "\n"


def _ordered(folder: Path, entry: str) -> list[tuple[str, dict]]:
    order: list[tuple[str, dict]] = []
    done: dict[str, dict] = {}

    def visit(name: str, path: tuple[str, ...]):
        if name in path:
            raise ValueError(f"the page's modules import each other in a circle: {' → '.join(path + (name,))}")
        if name in done:
            return done[name]
        mod = _parse(folder, name)
        for target, names, line in mod["imports"]:
            exports = visit(target, path + (name,))["exports"]
            missing = [n for n in names if n not in exports]
            if missing:
                raise ValueError(f"{name}:{line}: {target} does not export {', '.join(missing)}")
        done[name] = mod
        order.append((name, mod))
        return mod

    visit(str(PurePosixPath(entry)), ())
    return order


def _parse(folder: Path, name: str) -> dict:
    """{body, exports, imports [(target, names, line)]} of one module; refuses the forms bundle cannot keep."""
    file = folder / name
    if not file.is_file():
        raise ValueError(f"the page's module {name} does not exist in {folder}")
    lines, exports, imports = [], [], []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        where = f"{name}:{number}"
        if _DYNAMIC.search(line):
            raise ValueError(f"{where}: a dynamic import( cannot be bundled")
        m = _IMPORT.match(line)
        if m:
            target = _normal(str(PurePosixPath(name).parent / m.group(2)), where)
            pairs = [_pair(p, where) for p in m.group(1).split(",") if p.strip()]
            imports.append((target, [src for src, _ in pairs], number))
            names = ", ".join(src if src == dst else f"{src}: {dst}" for src, dst in pairs)
            lines.append(f"const {{ {names} }} = {_var(target)};")
            continue
        m = _EXPORT.match(line)
        if m:
            exports.append(m.group(1))
            lines.append(line[len("export ") :])
            continue
        if _STARTS.match(line):
            raise ValueError(
                f'{where}: only `import {{ … }} from "./x.js";` and `export function/class/const` are bundled'
            )
        lines.append(line)
    return {"body": "\n".join(lines) + "\n", "exports": exports, "imports": imports}


def _pair(part: str, where: str) -> tuple[str, str]:
    words = part.split()
    if len(words) == 1 and _NAME.match(words[0]):
        return words[0], words[0]
    if len(words) == 3 and words[1] == "as" and _NAME.match(words[0]) and _NAME.match(words[2]):
        return words[0], words[2]
    raise ValueError(f"{where}: cannot read the imported name {part.strip()!r}")


def _normal(path: str, where: str) -> str:
    parts: list[str] = []
    for p in path.split("/"):
        if p in ("", "."):
            continue
        if p == "..":
            if not parts:
                raise ValueError(f"{where}: the import leaves the page's folder")
            parts.pop()
        else:
            parts.append(p)
    return "/".join(parts)


def _var(name: str) -> str:
    """The variable holding a module's exports: `render/heatmap.js` → `__render$heatmap`."""
    return "__" + re.sub(r"[^\w$]", "$", name[: -len(".js")].replace("/", "$"))
