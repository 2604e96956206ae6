"""`selfattn explain --csv FILE` (`views.csv_table`): one row per head that the csv module reads back, holding
the numbers --json prints for the same run (summaries, the ablated heads, patching and attribution shares);
an existing file is kept without --force."""

from __future__ import annotations

import csv
import json

from selfattn.cli import main
from selfattn.explainer.session import DEFAULT_TEXT
from selfattn.explainer.views.csv_table import COLUMNS

CORRUPTED = "一只红色怪兽走进森林"  # the default text's length, one word changed
PAIR = ["--target", "森林", "--foil", "大海"]


def _read(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_one_row_per_head_with_what_json_prints(cli_on_bundled, bundled, capsys, tmp_path):
    path = tmp_path / "heads.csv"
    args = [
        "explain",
        DEFAULT_TEXT,
        "--ablate",
        "1.0,0.1",
        "--patch",
        CORRUPTED,
        *PAIR,
        "--attribution",
        "--csv",
        str(path),
    ]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = _read(path)
    n_layers, n_heads = bundled.shape()
    assert [(int(r["layer"]), int(r["head"])) for r in rows] == [
        (l, h) for l in range(n_layers) for h in range(n_heads)
    ]
    assert list(rows[0]) == list(COLUMNS)
    for r in rows:
        l, h = int(r["layer"]), int(r["head"])
        assert float(r["patching_recovered"]) == doc["patching"]["heads"][l][h]
        assert float(r["attribution_recovered"]) == doc["attribution"]["heads"][l][h]
        ablated = [l, h] in doc["ablation"]["heads"]
        assert r["ablated"] == str(int(ablated))
        assert r["ablation_kl_bits"] == (repr(doc["ablation"]["kl_bits"]) if ablated else "")
        assert 0 <= float(r["max_weight"]) <= 1 and r["kind"]


def test_columns_of_experiments_not_run_are_empty(cli_on_bundled, capsys, tmp_path):
    path = tmp_path / "heads.csv"
    assert main(["explain", DEFAULT_TEXT, "--csv", str(path), "--json"]) == 0
    rows = _read(path)
    assert rows and all(r[c] == "" for r in rows for c in ("ablated", "patching_recovered", "attribution_recovered"))


def test_an_existing_file_is_kept_without_force(cli_on_bundled, capsys, tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("my own table\n")
    assert main(["explain", DEFAULT_TEXT, "--csv", str(path), "--json"]) != 0
    assert path.read_text() == "my own table\n"
    assert str(path) in capsys.readouterr().err
    assert main(["explain", DEFAULT_TEXT, "--csv", str(path), "--force", "--json"]) == 0
    assert _read(path)[0]["layer"] == "0"
    capsys.readouterr()
    assert main(["explain", DEFAULT_TEXT, "--csv", str(tmp_path), "--force", "--json"]) != 0  # a folder: never
    assert "is a folder" in capsys.readouterr().err and tmp_path.is_dir()
