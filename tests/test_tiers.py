"""The tier tables of tests/tiers.py name files and tests that exist, and mark what they say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import conftest, tiers

TESTS = Path(__file__).resolve().parent
TABLES = {"real_model": tiers.REAL_MODEL, "slow": tiers.SLOW}


def _files(key: str) -> list[Path]:
    return [p for p in sorted(TESTS.rglob("*.py")) if tiers.in_file(p.as_posix(), key)]


@pytest.mark.parametrize("tier", list(TABLES))
def test_every_entry_names_one_file_and_tests_in_it(tier):
    for filename, parts in TABLES[tier].items():
        found = _files(filename)
        assert len(found) == 1, f"{tier}: {filename} is {len(found)} files under tests/ ({found}), not one"
        source = found[0].read_text()
        names = set(re.findall(r"def (test_\w+)", source))
        for part in parts:
            function = part.split("[")[0]  # a parametrized case: its function's name, then its parameters
            assert any(function in n for n in names) or part.startswith("["), (
                f"{tier}: no test of {filename} is named with {part!r}"
            )


def test_the_page_files_start_chromium_in_their_page_fixture():
    for filename in tiers.PAGE_FILES:
        (path,) = _files(filename)
        source = path.read_text()
        assert "def page(" in source and "chromium.launch" in source, filename


def test_a_test_is_marked_by_its_fixtures_and_its_name(monkeypatch):
    monkeypatch.setattr(tiers, "REAL_MODEL", {"test_schema.py": ("[minilm]",), "test_real.py": tiers.EVERY})
    monkeypatch.setattr(tiers, "SLOW", {"test_real.py": ("test_b",)})
    assert tiers.tiers_of("test_notebook.py", "test_head_view", ("watched", "browser")) == ["browser"]
    assert tiers.tiers_of("test_layers_page.py", "test_menu", ("page",)) == ["browser"]
    assert tiers.tiers_of("test_other.py", "test_menu", ("page",)) == []
    assert tiers.tiers_of("test_schema.py", "test_kinds[minilm]", ()) == ["real_model"]
    assert tiers.tiers_of("test_schema.py", "test_kinds[tiny]", ()) == []
    assert tiers.tiers_of("test_real.py", "test_a", ()) == ["real_model"]
    assert tiers.tiers_of("test_real.py", "test_b[2]", ()) == ["real_model", "slow"]


def test_the_conftest_marks_each_item_by_the_tables(monkeypatch):
    monkeypatch.setattr(tiers, "REAL_MODEL", {"test_schema.py": ("[minilm]",)})
    monkeypatch.setattr(tiers, "SLOW", {})

    class Item:
        def __init__(self, path: str, name: str, fixturenames: tuple[str, ...]):
            self.path, self.name, self.fixturenames, self.marks = Path(path), name, fixturenames, []

        def add_marker(self, mark: str) -> None:
            self.marks.append(mark)

    items = [
        Item("tests/explainer/views/test_schema.py", "test_every_model_kind_exports_what_the_schema_says[minilm]", ()),
        Item("tests/explainer/views/test_schema.py", "test_every_model_kind_exports_what_the_schema_says[tiny]", ()),
        Item("tests/explainer/views/test_notebook.py", "test_head_view_draws", ("watched", "browser", "e")),
    ]
    conftest.pytest_collection_modifyitems(items)
    assert [item.marks for item in items] == [["real_model"], [], ["browser"]]
