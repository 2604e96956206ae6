"""The package's import graph has no circle: data flows down, nothing below imports what is above it.

Every module of `src/selfattn` is parsed (ast: imports inside functions count too, since a lazy import
that dodges a circle is still a circle in the design), each import is resolved to the package's module
it names, and the graph is checked for a cycle — of modules, and of rooms (each subpackage such as
`selfattn.kernels` one node: the house's floors). A failure prints the cycle, node by node.
"""

from __future__ import annotations

import ast
from pathlib import Path

import selfattn

ROOT = Path(selfattn.__file__).parent
PACKAGE = "selfattn"


def module_names() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, for its __init__)."""
    names = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join([PACKAGE, *parts])] = path
    return names


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` statement reads from."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that `module` imports anywhere in its body (functions included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found = set()
    type_only = {id(n) for block in ast.walk(tree) if _is_type_checking(block) for n in ast.walk(block)}
    for node in ast.walk(tree):
        if id(node) in type_only:  # `if TYPE_CHECKING:` never runs: names for a type checker, not an import
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, is_package, node)
            # `from pkg import name`: the submodule pkg.name when there is one, else pkg itself
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.c` of a name inside a module
                target = target.rpartition(".")[0]
            if target and target != module and target.split(".")[0] == PACKAGE:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    names = module_names()
    known = set(names)
    return {module: imports_of(module, path, known) for module, path in names.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle [a, b, …, a] of `graph`, or None (an iterative depth-first search)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        colour[start] = GREY
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = BLACK
                stack.pop()
                path.pop()
            elif colour.get(child, BLACK) == GREY:
                return path[path.index(child) :] + [child]
            elif colour.get(child) == WHITE:
                colour[child] = GREY
                stack.append((child, iter(sorted(graph[child]))))
                path.append(child)
    return None


def room(module: str) -> str:
    """The room of a module: its subpackage (selfattn.kernels.tiled → selfattn.kernels), or itself."""
    return ".".join(module.split(".")[:2])


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for module, deps in graph.items():
        rooms.setdefault(room(module), set()).update(room(d) for d in deps if room(d) != room(module))
    return rooms


def test_the_import_graph_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " → ".join(cycle)


def test_the_rooms_import_each_other_without_a_cycle():
    rooms = room_graph(import_graph())
    cycle = find_cycle(rooms)
    assert cycle is None, "import cycle between rooms: " + " → ".join(cycle)


def test_the_graph_sees_lazy_imports_and_the_finder_finds_a_cycle():
    """The checker itself: an import inside a function is an edge, and a planted cycle is found."""
    graph = import_graph()
    assert "selfattn.bench.cases" in graph["selfattn.bench.memory"]  # imported inside child_main only
    assert {"selfattn.checks", "selfattn.scores"} <= graph["selfattn.request"]  # `from . import x`, `from .x import`
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_a_lazy_import_inside_a_function_is_an_edge(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from .functional import attention\n    import selfattn.masks\n")
    assert imports_of("selfattn.m", path, {"selfattn.functional", "selfattn.masks", "selfattn.m"}) == {
        "selfattn.functional",
        "selfattn.masks",
    }


def test_the_public_names_are_the_lazy_ones():
    """`selfattn.__all__` (written out for type checkers) names exactly what `__getattr__` loads."""
    assert set(selfattn.__all__) == {"__version__", *selfattn._LAZY}
    assert callable(selfattn.explain) and selfattn.explain.__module__ == "selfattn.explainer.api"


LOWER = ("selfattn.explainer.capture", "selfattn.explainer.analysis")
"""The explainer's rooms that views and the app read from: running the model, and the numbers' meaning."""
UPPER = ("selfattn.explainer.views", "selfattn.explainer.web")
"""The rooms that format and serve: they import the lower ones, never the reverse."""


def _inside(module: str, rooms: tuple[str, ...]) -> bool:
    return any(module == r or module.startswith(r + ".") for r in rooms)


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(module, what it imports) for every import of a LOWER module from an UPPER room."""
    return sorted((m, d) for m, deps in graph.items() if _inside(m, LOWER) for d in deps if _inside(d, UPPER))


def test_analysis_and_capture_never_import_views_or_web():
    bad = upward_imports(import_graph())
    assert not bad, "imports upward: " + "; ".join(f"{m} imports {d}" for m, d in bad)


def test_the_upward_check_finds_a_planted_import(tmp_path):
    """The checker itself: a lazy `from ..views import texts` in an analysis module is found."""
    names = set(module_names())
    planted = "selfattn.explainer.analysis.planted"
    path = tmp_path / "planted.py"
    path.write_text("def words():\n    from ..views import texts\n    from ..capture import trace\n")
    graph = import_graph() | {planted: imports_of(planted, path, names | {planted})}
    assert upward_imports(graph) == [(planted, "selfattn.explainer.views.texts")]
    assert upward_imports({"selfattn.explainer.views.tables": {"selfattn.explainer.analysis.summary"}}) == []


def imports_from(
    graph: dict[str, set[str]], rooms: tuple[str, ...], forbidden: tuple[str, ...]
) -> list[tuple[str, str]]:
    """(module, what it imports) for every import of a `forbidden` room's module by a module of `rooms`."""
    return sorted((m, d) for m, deps in graph.items() if _inside(m, rooms) for d in deps if _inside(d, forbidden))


def test_analysis_reads_no_model_module():
    """The analysis reads what it is given: the default model's grammar comes as data (`Explainer.grammar`), never by
    importing `selfattn.model` (its corpus, its probe)."""
    bad = imports_from(import_graph(), ("selfattn.explainer.analysis",), ("selfattn.model",))
    assert not bad, "; ".join(f"{m} imports {d}" for m, d in bad)


def test_the_tutorial_relations_are_the_probes_claims():
    """`analysis.relations.RELATIONS` writes the tutorial's claims out (it imports no model): the default model's probe
    measures the same ones."""
    from selfattn.explainer.analysis.relations import RELATIONS
    from selfattn.model.tutorial_probe import CLAIMS

    written = [(r["query"], r["targets"]) for name, r in RELATIONS.items() if name != "clause2>clause1"]
    assert written == list(CLAIMS)


def test_views_import_neither_capture_nor_the_model():
    """Views serialize an Explanation: they read its types (`trace_types`, `stages`, `interventions`: the registry as
    data), never the capture that made it or a model module."""
    bad = imports_from(import_graph(), ("selfattn.explainer.views",), ("selfattn.explainer.capture", "selfattn.model"))
    assert not bad, "; ".join(f"{m} imports {d}" for m, d in bad)


CAPTURE_ENTRIES = ("capture", "capture_batch")
"""The capture point's functions (`capture.trace`): a forward pass recorded."""


def callers_of(names: tuple[str, ...], module: str) -> set[str]:
    """The package's modules (outside `module` itself) that import one of `names` from `module` or call
    `<module's last part>.<name>(…)`."""
    last = module.rsplit(".", 1)[-1]
    found = set()
    for name, path in module_names().items():
        if name == module:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _resolve(name, is_package, node)
                if source == module and any(a.name in names for a in node.names):
                    found.add(name)
            elif isinstance(node, ast.Attribute) and node.attr in names:
                if isinstance(node.value, ast.Name) and node.value.id == last:
                    found.add(name)
    return found


def test_only_the_explainers_runner_calls_the_capture_point():
    """One place runs a model to record it: `tracing.traced` (tracing.py), which the pipeline's traces, the
    controls' batch and the induction probe all go through."""
    assert callers_of(CAPTURE_ENTRIES, "selfattn.explainer.capture.trace") == {"selfattn.explainer.tracing"}


def test_one_basename_one_meaning():
    """A module's file name says its room's job once: no two modules of the package share a base name (a package's
    `__init__` and `__main__` aside), so `probe.py` or `heads.py` never means two things."""
    seen: dict[str, list[str]] = {}
    for name, path in module_names().items():
        if path.name not in ("__init__.py", "__main__.py"):
            seen.setdefault(path.name, []).append(name)
    twice = {base: names for base, names in seen.items() if len(names) > 1}
    assert not twice, twice
