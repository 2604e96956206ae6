"""Datasets of prompts (`explainer.dataset`, `selfattn.explain_dataset` / `heads_dataset`, `selfattn explain|heads
--dataset`): each prompt's numbers are its single run's, the means and intervals are numpy's and a t-table's, a rerun
resumes (and refuses a changed dataset or another run's file), bad rows are refused by line and field, the CSV holds
one row per head per prompt."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re

import numpy as np
import pytest

import selfattn
from selfattn.cli import main
from selfattn.explainer import experiments, pipeline
from selfattn.explainer.analysis.head_types import REGISTRY
from selfattn.explainer.dataset import rows as dataset_rows
from selfattn.explainer.dataset import stats, table
from selfattn.explainer.dataset.running import EXPLAIN_NUMBERS, heads_numbers
from selfattn.explainer.views import csv_table
from tests.explainer.tiny import tiny_explainer
from tests.tolerances import TOL

SUBJECTS = ("一只蓝色怪兽", "两只红色狐狸", "一条金色金鱼", "三头灰色大象", "一位白色骑士")
PLACES = (("森林", "大海"), ("花园", "草原"), ("城堡", "山洞"), ("村庄", "池塘"))
"""IOI-style pairs from the bundled model's words: the place said once and asked for again after “它在”; the
corrupted prompt names another place, and the logit difference is the clean place − the other."""

T_TABLE_975 = {1: 12.706204736174694, 4: 2.7764451051977934, 19: 2.0930240544083087, 30: 2.0422724563012378}
"""Student's t, 0.975 quantile, by degrees of freedom: a printed t-table's 12.706, 2.776, 2.093, 2.042, here with the
digits SciPy 1.17's t.ppf gives (copied once, so the test needs no SciPy)."""


def ioi_rows() -> list[dict]:
    return [
        {"text": f"{s}走进{a}。它在", "corrupted": f"{s}走进{b}。它在", "target": a, "foil": b}
        for s in SUBJECTS
        for a, b in PLACES
    ]


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


# --- the t quantile and the interval -------------------------------------------------------------------------


@pytest.mark.parametrize("df", sorted(T_TABLE_975))
def test_t_quantile_is_the_t_table(df):
    assert stats.t_quantile(0.975, df) == pytest.approx(T_TABLE_975[df], rel=TOL["float64_rel"])


@pytest.mark.slow
def test_t_quantile_is_scipys():
    scipy_stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 7, 19, 99, 1000):
        for p in (0.6, 0.9, 0.975, 0.995, 0.9995):
            assert stats.t_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=TOL["float64_rel"])


def test_mean_ci_is_numpys_t_interval():
    xs = np.random.default_rng(0).normal(0.3, 0.2, 20)
    got = stats.mean_ci(list(xs))
    half = T_TABLE_975[19] * xs.std(ddof=1) / math.sqrt(len(xs))
    assert (got.n, got.level) == (20, 0.95)
    assert got.mean == pytest.approx(xs.mean(), abs=TOL["float64"])
    assert got.sd == pytest.approx(xs.std(ddof=1), abs=TOL["float64"])
    assert (got.low, got.high) == pytest.approx((xs.mean() - half, xs.mean() + half), abs=TOL["float64"])
    one = stats.mean_ci([0.5, None])
    assert (one.mean, one.low, one.high, one.n) == (0.5, None, None, 1)
    assert stats.mean_ci([None]).mean is None


# --- 20 IOI-style prompts: each the single run's numbers, the means numpy's ----------------------------------


@pytest.mark.slow
def test_twenty_prompts_equal_twenty_single_runs(bundled):
    rows = ioi_rows()
    assert len(rows) == 20
    got = selfattn.explain_dataset(rows, bundled, ablate="1.0", attribution=True)
    assert got.n == 20 and got.what == "explain"
    n_layers, n_heads = bundled.shape()
    per_number: dict[str, list[list[float | None]]] = {name: [] for name in EXPLAIN_NUMBERS}
    for p, row in zip(got.prompts, rows, strict=True):
        e = selfattn.explain(row["text"], bundled).run(
            ablate="1.0", patch=row["corrupted"], target=row["target"], foil=row["foil"]
        )
        alone = e.attribution()
        patching, ablation = e.experiments.patching, e.experiments.ablation
        assert p.scalars["patching_clean_ld"] == pytest.approx(patching["clean_ld"], abs=TOL["float32_same_model"])
        assert p.scalars["ablation_kl_bits"] == pytest.approx(ablation["kl_bits"], abs=TOL["float32_same_model"])
        ld = ablation["logit_diff"]
        assert p.scalars["ablation_ld_change"] == pytest.approx(ld["after"] - ld["before"], abs=TOL["float64"])
        for k, h in enumerate(p.heads):
            layer, head = divmod(k, n_heads)
            assert (h["layer"], h["head"]) == (layer, head)
            summary = e.answers.summaries[layer][head]
            want = {name: summary[name] for name in ("entropy", "max_weight", "first_token", "previous", "self")}
            want |= {"patching_recovered": patching["heads"][layer][head]}
            want |= {"attribution_recovered": alone["heads"][layer][head]}
            for name, value in want.items():
                assert h[name] == pytest.approx(value, abs=TOL["float32_same_model"]), (p.index, name, layer, head)
                per_number[name].append(h[name])
            assert h["types"] == ";".join(str(t) for t in e.answers.describe(layer, head)["types"])
            assert h["kind"] == e.answers.describe(layer, head)["kind"]
    for name, values in per_number.items():  # [prompt · head] → (prompt, head): numpy's mean and t-interval
        xs = np.array(values, dtype=float).reshape(20, n_layers * n_heads)
        for k in range(n_layers * n_heads):
            m = got.heads[k].means[name]
            half = T_TABLE_975[19] * xs[:, k].std(ddof=1) / math.sqrt(20)
            assert m.n == 20
            assert m.mean == pytest.approx(xs[:, k].mean(), abs=TOL["float64"])
            assert (m.low, m.high) == pytest.approx(
                (xs[:, k].mean() - half, xs[:, k].mean() + half), abs=TOL["float64"]
            )
    tops = np.array(per_number["patching_recovered"]).reshape(20, -1).argmax(axis=1)
    assert [h.top for h in got.heads] == [int((tops == k).sum()) for k in range(n_layers * n_heads)]
    best = max(got.heads, key=lambda h: h.means["patching_recovered"].mean)
    said = f"L{best.layer}H{best.head} recovers"
    line = next(t for t in got.text["en"] if t.startswith(said))
    assert line.endswith(f"on {best.top} of 20 prompts")


@pytest.mark.slow
def test_heads_dataset_equals_single_heads_runs(bundled):
    rows = ioi_rows()[::4]  # 5 prompts, one per subject
    got = selfattn.heads_dataset(rows, bundled)
    singles = [experiments.taxonomy(bundled, row["text"]) for row in rows]  # `selfattn heads TEXT` on each
    for p, alone in zip(got.prompts, singles, strict=True):
        for h in p.heads:
            want = alone["heads"][h["layer"]][h["head"]]
            assert h["type"] == want["type"]
            assert h["types"] == ";".join(want["text"]["types"])
            for name in heads_numbers():
                score = want["text"]["scores"][name]["score"]
                assert h[name] == (None if score is None else pytest.approx(score, abs=TOL["float32_same_model"]))
    for h in got.heads:  # on how many prompts each type is credited, counted from the single runs' types
        cells = [alone["heads"][h.layer][h.head]["text"]["types"] for alone in singles]
        assert h.holds == {t: sum(t in c for c in cells) for t in sorted({t for c in cells for t in c})}
    short = {entry.words["short"]["en"]: t for t, entry in REGISTRY.items()}
    said = [re.fullmatch(r"L(\d+)H(\d+) is credited as “(.+)” on (\d+) of 5 prompts", line) for line in got.text["en"]]
    assert any(said)
    for m in filter(None, said):  # each sentence's count: the prompts whose own single run credits the type
        layer, head, word, k = int(m[1]), int(m[2]), m[3], int(m[4])
        assert k == sum(short[word] in alone["heads"][layer][head]["text"]["types"] for alone in singles)


# --- resuming ----------------------------------------------------------------------------------------------------

TINY_TEXTS = ("一只蓝色怪兽走进森林。", "两条红色鱼游进大海。", "它在森林里睡觉。", "一只红色怪兽走进大海。")


class Counted:
    """Session.explain counted (each call: the prompt's forward passes), stopping the run after `stop` calls."""

    def __init__(self, monkeypatch, stop: int | None = None):
        self.calls, self.stop, real = 0, stop, pipeline.Session.explain

        def explain(session, spec, **kw):
            if self.stop is not None and self.calls == self.stop:
                raise KeyboardInterrupt
            self.calls += 1
            return real(session, spec, **kw)

        monkeypatch.setattr(pipeline.Session, "explain", explain)


@pytest.mark.slow
def test_a_rerun_resumes_where_it_stopped(tmp_path, monkeypatch):
    ex = tiny_explainer()
    data = write_jsonl(tmp_path / "p.jsonl", [{"text": t} for t in TINY_TEXTS])
    out = tmp_path / "out.jsonl"
    whole = selfattn.explain_dataset(data, ex, ablate="1.0")
    counted = Counted(monkeypatch, stop=2)
    with pytest.raises(KeyboardInterrupt):
        selfattn.explain_dataset(data, ex, ablate="1.0", out=out)
    assert len(out.read_text(encoding="utf-8").splitlines()) == 1 + 2  # the header and the 2 prompts that finished
    counted.stop, counted.calls = None, 0
    again = selfattn.explain_dataset(data, ex, ablate="1.0", out=out)
    assert counted.calls == 2  # only the 2 prompts not yet done ran
    assert again.resumed == 2 and [p.resumed for p in again.prompts] == [True, True, False, False]
    assert {**again.as_dict(), "out": None, "resumed": 0, "text": None} == {**whole.as_dict(), "text": None}
    assert "2 of 4 prompts read back from" in " ".join(again.text["en"])
    counted.calls = 0
    selfattn.explain_dataset(data, ex, ablate="1.0", out=out)
    assert counted.calls == 0  # all done: nothing runs


@pytest.mark.slow
def test_a_changed_dataset_or_another_run_is_refused(tmp_path):
    ex = tiny_explainer()
    rows = [{"text": t} for t in TINY_TEXTS]
    data = write_jsonl(tmp_path / "p.jsonl", rows)
    out = tmp_path / "out.jsonl"
    selfattn.explain_dataset(data, ex, out=out)
    kept = out.read_bytes()
    changed = write_jsonl(tmp_path / "p.jsonl", [{"text": "它在大海里睡觉。"}, *rows[1:]])
    with pytest.raises(ValueError, match=r"prompt 0 \(line 1 of the dataset\) is not the prompt .* --force"):
        selfattn.explain_dataset(changed, ex, out=out)
    with pytest.raises(ValueError, match="holds the results of another run .*options"):
        selfattn.explain_dataset(data, ex, out=out, ablate="1.0")
    with pytest.raises(ValueError, match="holds the results of another run .*model"):
        selfattn.explain_dataset(data, tiny_explainer(seed=1), out=out)
    assert out.read_bytes() == kept  # nothing written over
    fresh = selfattn.explain_dataset(changed, ex, out=out, force=True)
    assert fresh.resumed == 0 and out.read_bytes() != kept


def test_the_results_file_is_never_a_users_file_a_folder_or_a_fifo(tmp_path):
    ex = tiny_explainer()
    data = write_jsonl(tmp_path / "p.jsonl", [{"text": TINY_TEXTS[0]}])
    mine = tmp_path / "notes.txt"
    mine.write_text("my notes\n")
    with pytest.raises(ValueError, match="not a dataset run's results file"):
        selfattn.explain_dataset(data, ex, out=mine)
    assert mine.read_text() == "my notes\n"
    with pytest.raises(ValueError, match="is the dataset"):
        selfattn.explain_dataset(data, ex, out=data, force=True)
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "fifo")
    for special in ("folder", "fifo"):
        with pytest.raises(ValueError, match="not a regular file"):
            selfattn.explain_dataset(data, ex, out=tmp_path / special, force=True)


# --- rows refused by line and field --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"text": "一只"}', "", '{"corrupted": "两条"}'], r"p\.jsonl, line 3: field 'text' is missing"),
        (['{"text": "一只", "colour": 1}'], r"line 1: unknown field 'colour'"),
        (['{"text": "一只"}', '{"text": "两条", "target": "鱼"}'], r"line 2: field 'foil' is missing"),
        (['{"text": "一只"}', "[1, 2]"], r"line 2: expected a JSON object, got list"),
        (['{"text": "一只"}', "{oops"], r"line 2: not a JSON object"),
        (['{"text": ""}'], r"line 1: field 'text': "),
        (['{"text": "一只", "target": true, "foil": "鱼"}'], r"line 1: field 'target' must be a token's text or id"),
        (
            ['{"text": "一只", "corrupted": "两条"}', '{"text": "三只"}'],
            r"line 2: field 'corrupted' is missing, and line 1",
        ),
    ],
)
def test_a_bad_jsonl_row_is_named_by_line_and_field(tmp_path, lines, message):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        dataset_rows.read_rows(path)


def test_a_bad_csv_row_is_named_by_line_and_field(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("text,target,foil\n一只,森林,大海\n两条,,大海\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"p\.csv, line 3: field 'target' is missing"):
        dataset_rows.read_rows(path)
    path.write_text("text,prompt\n一只,1\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 1: unknown field 'prompt'"):
        dataset_rows.read_rows(path)
    path.write_text('text,corrupted\n"一只,两条\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"p\.csv"):
        dataset_rows.read_rows(path)
    path.write_text("text,corrupted\n一只,两条\n\n三只,四只\n", encoding="utf-8")
    assert [(r.line, r.text, r.corrupted) for r in dataset_rows.read_rows(path)] == [
        (2, "一只", "两条"),
        (4, "三只", "四只"),
    ]


def test_the_file_is_bounded_before_it_is_read(tmp_path, monkeypatch):
    path = write_jsonl(tmp_path / "p.jsonl", [{"text": t} for t in TINY_TEXTS])
    monkeypatch.setattr(dataset_rows, "MAX_DATASET_ROWS", 3)
    with pytest.raises(ValueError, match="more than 3 prompts"):
        dataset_rows.read_rows(path)
    monkeypatch.setattr(dataset_rows, "DATASET_BYTES", 10)
    with pytest.raises(ValueError, match="over the 10-byte limit"):
        dataset_rows.read_rows(path)
    with pytest.raises(ValueError, match="a .jsonl or a .csv file"):
        dataset_rows.read_rows(tmp_path / "p.txt")
    with pytest.raises(ValueError, match="rows, row 2: field 'text' is missing"):
        dataset_rows.check_rows([{"text": "一只"}, {}])


# --- the CLI: the CSV, --json, exit codes --------------------------------------------------------------------


@pytest.fixture
def cli_on_tiny(monkeypatch):
    ex = tiny_explainer()
    monkeypatch.setattr(pipeline.Explainer, "load", classmethod(lambda cls, path=None, dtype=None: ex))
    return ex


@pytest.mark.slow
def test_cli_csv_holds_one_row_per_head_per_prompt(tmp_path, capsys, cli_on_tiny):
    data = write_jsonl(tmp_path / "p.jsonl", [{"text": t} for t in TINY_TEXTS[:3]])
    out, path = tmp_path / "out.jsonl", tmp_path / "heads.csv"
    args = ["explain", "--dataset", data, "--ablate", "1.0", "--out", str(out), "--csv", str(path), "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    with open(path, newline="", encoding="utf-8") as f:
        got = list(csv.DictReader(f))
    assert list(got[0]) == ["prompt", "line", *csv_table.COLUMNS]
    n_layers, n_heads = cli_on_tiny.shape()
    assert len(got) == 3 * n_layers * n_heads
    assert sorted((int(r["prompt"]), int(r["layer"]), int(r["head"])) for r in got) == [
        (p, l, h) for p in range(3) for l in range(n_layers) for h in range(n_heads)
    ]
    for r in got:
        h = doc["prompts"][int(r["prompt"])]["heads"][int(r["layer"]) * n_heads + int(r["head"])]
        assert int(r["line"]) == int(r["prompt"]) + 1
        for name in ("entropy", "previous", "ablation_kl_bits"):
            assert (float(r[name]) if r[name] else None) == h[name]
        assert r["patching_recovered"] == ""  # no corrupted texts: patching did not run
    assert doc["n_prompts"] == 3 and doc["interval"] == {"method": "t", "level": 0.95}
    assert main(args) == 1  # the CSV exists: kept without --force
    assert "already exists" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0


@pytest.mark.slow
def test_cli_heads_dataset_terminal_and_csv(tmp_path, capsys, cli_on_tiny):
    data = write_jsonl(tmp_path / "p.jsonl", [{"text": t} for t in TINY_TEXTS[:2]])
    path = tmp_path / "h.csv"
    assert main(["heads", "--dataset", data, "--csv", str(path), "--lang", "en"]) == 0
    printed = capsys.readouterr().out
    assert "2 prompts on tiny random decoder" in printed and str(path) in printed
    got = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    n_layers, n_heads = cli_on_tiny.shape()
    assert len(got) == 2 * n_layers * n_heads
    assert list(got[0]) == list(table.PROMPT_COLUMNS + table.HEADS_COLUMNS + heads_numbers())


@pytest.mark.parametrize(
    "extra, code, said",
    [
        (["一只"], 2, "the text argument goes with one text"),
        (["--patch", "两条"], 2, "--patch (give each row its corrupted text) goes with one text"),
        (["--html", "x.html"], 2, "--html goes with one text"),
        (["--no-causal"], 2, "--no-causal goes with one text"),
        (["--attribution"], 1, "attribution needs a corrupted text on every row"),
        (["--ablate", "9.0"], 1, "head 9.0 is not in the model"),
    ],
)
def test_cli_refusals_are_one_line(tmp_path, capsys, cli_on_tiny, extra, code, said):
    data = write_jsonl(tmp_path / "p.jsonl", [{"text": TINY_TEXTS[0]}])
    assert main(["explain", "--dataset", data, *extra]) == code
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1


def test_cli_bad_row_and_out_without_dataset(tmp_path, capsys, cli_on_tiny):
    path = tmp_path / "p.jsonl"
    path.write_text('{"text": "一只"}\n{"txt": "两条"}\n', encoding="utf-8")
    assert main(["explain", "--dataset", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}, line 2: unknown field 'txt'" in err and len(err.strip().splitlines()) == 1
    assert main(["explain", "一只", "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "--out goes with --dataset" in capsys.readouterr().err
    assert main(["heads", "--csv", str(tmp_path / "h.csv")]) == 2
    assert "--csv goes with --dataset" in capsys.readouterr().err


@pytest.mark.slow
def test_a_prompt_an_experiment_refuses_is_named_by_its_line(tmp_path, cli_on_tiny):
    data = write_jsonl(
        tmp_path / "p.jsonl",
        [
            {"text": "一只蓝色怪兽走进森林。", "corrupted": "一只红色怪兽走进大海。", "target": "森林", "foil": "大海"},
            {"text": "它在森林里睡觉。", "corrupted": "它在。", "target": "森林", "foil": "大海"},
        ],
    )
    with pytest.raises(ValueError, match=r"p\.jsonl, line 2: patching needs a clean and a corrupted text of the same"):
        selfattn.explain_dataset(data, cli_on_tiny, out=tmp_path / "o.jsonl")
    assert len((tmp_path / "o.jsonl").read_text(encoding="utf-8").splitlines()) == 2  # line 1's result was kept


# --- the top-level exports -----------------------------------------------------------------------------------


def test_run_with_hooks_and_the_dataset_calls_are_top_level_names():
    from selfattn.explainer.capture.named_hooks import run_with_hooks

    assert selfattn.run_with_hooks is run_with_hooks
    for name in ("run_with_hooks", "explain_dataset", "heads_dataset", "DatasetResult"):
        assert name in selfattn.__all__ and name in dir(selfattn)
    ex = tiny_explainer()
    _, ids, extra, _ = ex.cut(TINY_TEXTS[0])
    seen = {}
    logits = selfattn.run_with_hooks(ex.model, ids, [("blocks.0.attn.hook_z", lambda t, n: seen.setdefault(n, t))])
    assert set(seen) == {"blocks.0.attn.hook_z"} and logits.shape[:2] == (1, len(ids))


@pytest.mark.slow
def test_the_progress_bar_counts_the_prompts_on_stderr(capsys):
    selfattn.explain_dataset([{"text": t} for t in TINY_TEXTS[:2]], tiny_explainer(), progress=True)
    captured = capsys.readouterr()
    assert "prompts" in captured.err and "2/2" in captured.err and captured.out == ""
