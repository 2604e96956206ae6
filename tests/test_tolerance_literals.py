"""Every tolerance a test uses is a named entry of tests/tolerances.py, never a number written in place.

The scan reads every Python file under tests/ (but tests/tolerances.py itself and the folders of
TEMPORARILY_EXEMPT) and reports a *tolerance literal*: a number other than 0 written in one of
these places (0 is an exact comparison, not a tolerance):

1. the value of a keyword argument `atol=`, `rtol=`, `abs=` or `rel=` of any call;
2. a tolerance passed by position: the third and fourth arguments of `allclose`, `isclose`,
   `assert_close` and `assert_allclose` (torch, torch.testing, NumPy, numpy.testing), the second
   and third of `pytest.approx`;
3. the bound of a comparison of two sides (`a < b`, `<=`, `>`, `>=`; not a chain `a < b < c`, which
   states an order) whose other side takes an absolute value or an error: a call of `abs`, `.abs()`,
   `np.abs`, `torch.abs`, `max_error` or `lse_error`, or a name with "err" in it (`err`, `rel_err`);
4. the value assigned to a name that says it is a tolerance (`tol`, `atol`, `WEIGHT_ATOL`, ...).

"Written in" means anywhere inside that expression but inside a subscript's index, so
`TOL["x"] * 100` counts (a scaled tolerance gets a name of its own) and `TOL["x"]` does not.
Statistical claims (`p < 1e-6`) and sizes are not tolerances and are not looked at.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
TABLE = TESTS / "tolerances.py"

TEMPORARILY_EXEMPT: tuple[str, ...] = ("adversarial",)
"""Folders of tests/ the scan skips until their tolerances move into the table (relative paths)."""

TOLERANCE_KEYWORDS = frozenset({"atol", "rtol", "abs", "rel"})
CLOSENESS_CALLS = {"allclose": 2, "isclose": 2, "assert_close": 2, "assert_allclose": 2, "approx": 1}
"""Function name -> index of its first positional tolerance."""
ERROR_CALLS = frozenset({"abs", "max_error", "lse_error"})
ORDERINGS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _is_number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value != 0


def _numbers(node: ast.AST) -> list[ast.Constant]:
    """The nonzero numeric literals of an expression, but those inside a subscript's index."""
    if _is_number(node):
        return [node]  # type: ignore[list-item]
    if isinstance(node, ast.Subscript):
        return _numbers(node.value)
    return [n for child in ast.iter_child_nodes(node) for n in _numbers(child)]


def _name(func: ast.AST) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _takes_error(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Call) and _name(n.func) in ERROR_CALLS) or (isinstance(n, ast.Name) and "err" in n.id)
        for n in ast.walk(node)
    )


def _names_a_tolerance(target: ast.AST) -> bool:
    return isinstance(target, ast.Name) and "tol" in target.id.lower()


def tolerance_literals(source: str, filename: str = "<test>") -> list[str]:
    """'file:line: what' for each tolerance literal of the source (the rule: the module docstring)."""
    found: list[tuple[int, str]] = []

    def report(numbers: list[ast.Constant], where: str) -> None:
        found.extend((n.lineno, f"{n.value!r} as {where}") for n in numbers)

    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg in TOLERANCE_KEYWORDS:
                    report(_numbers(kw.value), f"{kw.arg}=")
            first = CLOSENESS_CALLS.get(_name(node.func) or "")
            if first is not None:
                for arg in node.args[first:]:
                    report(_numbers(arg), f"a positional tolerance of {_name(node.func)}")
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ORDERINGS):
            sides = (node.left, node.comparators[0])
            for side, other in (sides, sides[::-1]):
                if _takes_error(other) and not _takes_error(side):
                    report(_numbers(side), "the bound of an error's comparison")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and any(_names_a_tolerance(t) for t in targets):
                report(_numbers(node.value), "a tolerance's value")
    return [f"{filename}:{line}: {what}" for line, what in sorted(found)]


def _scanned() -> list[Path]:
    exempt = [TESTS / folder for folder in TEMPORARILY_EXEMPT]
    return [
        p for p in sorted(TESTS.rglob("*.py")) if p != TABLE and not any(p.is_relative_to(folder) for folder in exempt)
    ]


def test_no_tolerance_literal_outside_the_table():
    found = [hit for p in _scanned() for hit in tolerance_literals(p.read_text(), str(p.relative_to(TESTS)))]
    assert not found, "tolerances written in place; name them in tests/tolerances.py:\n" + "\n".join(found)


def test_the_scan_reads_the_test_tree():
    scanned = _scanned()
    assert Path(__file__).resolve() in scanned and len(scanned) > 100


@pytest.mark.parametrize(
    "line",
    [
        "torch.testing.assert_close(a, b, atol=1e-5, rtol=0)",
        "np.testing.assert_allclose(a, b, rtol=1e-7)",
        "assert x == pytest.approx(y, abs=0.05 + TOL['page_number'])",
        "torch.allclose(a, b, atol=TOL['float32'] * 100)",
        "torch.allclose(a, b, 1e-5, 1e-8)",
        "assert x == pytest.approx(y, 1e-3)",
        "assert abs(x - y) < 1e-9",
        "assert 1e-9 >= (a - b).abs().max()",
        "assert max_error(a, b) <= 2e-5",
        "if not err <= 1e-12: failures.append(name)",
        "WEIGHT_ATOL = 1e-5",
        "tol: float = 3e-3",
    ],
)
def test_a_written_tolerance_is_found(line):
    assert len(tolerance_literals(line)) >= 1


@pytest.mark.parametrize(
    "line",
    [
        "torch.testing.assert_close(a, b, atol=TOL['float32'], rtol=0)",
        "np.testing.assert_allclose(a, b, rtol=0, atol=0)",
        "assert x == pytest.approx(y)",
        "assert max_error(a, b) <= tolerance(dtype, naive)",
        "assert e['p'] < 1e-6",  # a p-value's bound is a claim about the data, not a tolerance
        "assert abs(x - y) <= TOL['page_data']",
        "eps = 1e-5",
        "assert 0.8 > gram[1] > 0.5 > abs(gram[4])",  # a chain states an order, not a tolerance
        "assert x.shape[0] < 3",
    ],
)
def test_a_named_tolerance_is_not_found(line):
    assert tolerance_literals(line) == []
