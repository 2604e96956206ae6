"""`selfattn bench` runs at tiny sizes and reports every field. Correctness only: no timing asserts."""

import io
import json

import pytest
import torch
from rich.console import Console

from selfattn import bench
from selfattn.bench import memory
from selfattn.bench.cases import CASES, select
from tests.tolerances import TOL

ROW_FIELDS = {
    "backend",
    "chosen",
    "shape",
    "ms",
    "gflops",
    "peak_percent",
    "vs_sdpa",
    "extra_mib",
    "memory_error",
    "skipped",
    "repeats",
}


@pytest.fixture(scope="module")
def quick_result():
    threads = torch.get_num_threads()
    result = bench.run(
        cases=["causal_forward", "forward_backward", "sliding_window", "gqa", "decode"],
        quick=True,
        measure_memory=False,
        threads=1,
    )
    assert torch.get_num_threads() == threads  # the caller's setting is restored
    assert result["machine"]["threads"] == 1
    return result


def test_json_has_every_field(quick_result):
    result = json.loads(json.dumps(quick_result))  # plain JSON all the way down
    assert result["quick"] is True
    assert result["machine"]["gemm_peak_gflops"] > 0 and result["machine"]["threads"] >= 1
    assert set(result["method"]) == {"time", "flops", "memory"} and isinstance(result["warnings"], list)
    assert [c["name"] for c in result["cases"]] == [
        "causal_forward",
        "forward_backward",
        "sliding_window",
        "gqa",
        "decode",
    ]
    for case in result["cases"]:
        assert case["gflop"] > 0 and case["size"]["dtype"] == "float32"
        assert [r["backend"] for r in case["rows"]] == list(CASES[case["name"]][1].backends)
        for row in case["rows"]:
            assert set(row) == ROW_FIELDS
            if row["backend"] == "flex" and row["skipped"]:  # on a CPU: no backward, nothing under 128
                assert "flex" in row["skipped"] or "FlexAttention" in row["skipped"] or "CPU" in row["skipped"]
                continue
            assert row["skipped"] is None, row
            assert row["ms"] > 0 and row["gflops"] > 0 and row["peak_percent"] > 0 and row["repeats"] >= 1
            assert row["vs_sdpa"] > 0
        sdpa = next(r for r in case["rows"] if r["backend"] == "sdpa")
        assert sdpa["vs_sdpa"] == 1.0
        auto = next(r for r in case["rows"] if r["backend"] == "auto")
        assert auto["chosen"] in ("sdpa", "native", "tiled", "naive")


def test_tables_render(quick_result):
    out = io.StringIO()
    bench.render(quick_result, Console(file=out, width=120))
    text = out.getvalue()
    for word in ("GEMM peak", "causal_forward", "sliding_window", "× SDPA", "tiled", "auto → "):
        assert word in text


def test_refused_backend_gets_a_reason():
    from selfattn import kernels

    with kernels.budget(1000):
        result = bench.run(cases=["decode"], quick=True, measure_memory=False)
    row = next(r for r in result["cases"][0]["rows"] if r["backend"] == "naive")
    assert row["ms"] is None and "budget" in row["skipped"]


def test_memory_is_measured_in_a_fresh_process():
    extra, error = memory.extra_bytes("decode", True, "tiled", 1)
    if error and "clear_refs" in error:
        pytest.skip(error)
    assert error is None and isinstance(extra, int) and extra >= 0


def test_unknown_case_is_named():
    with pytest.raises(ValueError, match="unknown bench case 'nope'; choose from causal_forward"):
        select(["nope"])
    assert [c.name for c in select()] == list(CASES)
    assert all(quick.len_k <= full.len_k for full, quick in CASES.values())


def test_a_busy_machine_is_named(monkeypatch):
    import selfattn.bench.runner as b

    monkeypatch.setattr(b.os, "cpu_count", lambda: 2)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert b._warnings(1.6, 2.4, [150.0, 148.0], threads=2) == []  # the load of the command just before
    (text,) = b._warnings(2.7, 3.9, [75.0, 150.0], threads=2)
    assert "load average 2.7 on 2 CPUs" in text and "3.9 after" in text and "GEMM peak 75 against 150" in text
    assert "OMP_WAIT_POLICY=PASSIVE" in text
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    assert "OMP_WAIT_POLICY" not in b._warnings(2.7, None, [150.0], threads=2)[0]


def test_busy_processes_run_during_the_block_and_stop_after():
    import os

    from selfattn.bench.load import busy_processes

    with busy_processes(2) as pids:
        assert len(pids) == 2
        for pid in pids:
            os.kill(pid, 0)  # alive
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(ValueError, match="load must be <= 256"):
        with busy_processes(257):
            pass


def test_a_run_under_load_says_so(capsys):
    from selfattn.cli import main

    result = bench.run(cases=["decode"], quick=True, measure_memory=False, threads=1, load=1)
    assert result["machine"]["busy_processes"] == 1
    out = io.StringIO()
    bench.render(result, Console(file=out, width=200))
    assert "under load 1 (1 busy process, one core each)" in out.getvalue()
    assert main(["bench", "--case", "decode", "--quick", "--no-memory", "--threads", "1", "--load", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["machine"]["busy_processes"] == 1


def test_explain_prints_every_backend_and_the_choice(capsys):
    from selfattn.cli import main

    assert main(["bench", "--explain", "--case", "decode", "--case", "sliding_window", "--quick"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("decode: ") and "sliding_window: " in out
    for name in ("naive", "sdpa", "tiled"):
        assert f"\n{name} " in out  # one line per backend: estimate or reasons
    assert out.count("\nchoice   ") == 2  # auto's choice, once per case
    assert "tiled block plan" in out


def test_explain_says_an_extra_case_has_no_single_call(capsys):
    from selfattn.cli import main

    assert main(["bench", "--explain", "--case", "ring", "--case", "decode", "--quick"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("decode: ") and "\nring: ring attention" in out
    assert "no single attention call to explain" in out


def test_texts_from_the_machine_are_not_markup():
    result = {
        "quick": True,
        "machine": {"cpu": "[bold]cpu[/bold]", "torch": "2", "threads": 1, "gemm_peak_gflops": 1.0, "gemm": "g"},
        "method": {},
        "warnings": ["[red]busy[/red]"],
        "cases": [
            {
                "name": "c",
                "title": "t",
                "shape": "1",
                "rows": [
                    {"backend": "naive", "chosen": None, "skipped": "[link=https://x]no[/link]", "memory_error": None}
                ],
            }
        ],
    }
    out = io.StringIO()
    bench.render(result, Console(file=out, width=200))
    text = out.getvalue()
    assert "[bold]cpu[/bold]" in text and "[red]busy[/red]" in text and "[link=https://x]no[/link]" in text


def test_extra_cases_run_only_when_named_and_render():
    from selfattn.bench.cases import split_names

    assert split_names(None)[1] == [] and split_names(["hf", "decode"]) == (["decode"], ["hf"])
    with pytest.raises(ValueError, match="unknown bench case 'nope'; choose from .*hf, ring"):
        split_names(["nope"])
    result = bench.run(cases=["hf"], quick=True, measure_memory=False, threads=1)
    assert result["cases"] == [] and set(result["extra"]) == {"hf"}
    hf = json.loads(json.dumps(result["extra"]["hf"]))
    assert set(hf["seconds"]) == {"selfattn", "sdpa", "eager"} and hf["ratio_to_sdpa"]["sdpa"] == 1.0
    assert hf["max_logit_error_vs_eager"] < TOL["float32_logits"]
    out = io.StringIO()
    bench.render(result, Console(file=out, width=120))
    assert "hf: tiny Llama forward, L = 512" in out.getvalue() and "selfattn" in out.getvalue()


def test_targets_are_ratios_of_the_runs_own_rows(quick_result):
    """Each target's ratio is computed from two rows of the same run (no timing asserted: the rows are the run's)."""
    from selfattn.bench.targets import AUTO_IDLE, targets

    rows = quick_result["targets"]
    assert rows == targets(quick_result)
    ms = {(c["name"], r["backend"]): r["ms"] for c in quick_result["cases"] for r in c["rows"] if r["ms"]}
    window = next(t for t in rows if t["cases"] == "sliding_window")
    if ("sliding_window", "flex") in ms:
        assert window["ratio"] == pytest.approx(ms["sliding_window", "flex"] / ms["sliding_window", "native"])
    else:
        assert window["ratio"] is None and window["met"] is None
    decode = next(t for t in rows if t["cases"] == "decode")
    assert decode["ratio"] == pytest.approx(ms["decode", "native"] / ms["decode", "sdpa"])
    for t in rows:
        if t["target"] == "auto's choice over the fastest":
            case = next(c for c in quick_result["cases"] if c["name"] == t["cases"])
            chosen = next(r["chosen"] for r in case["rows"] if r["backend"] == "auto")
            fastest = min(r["ms"] for r in case["rows"] if r["ms"] and r["backend"] != "auto")
            assert t["ratio"] == pytest.approx(ms[t["cases"], chosen] / fastest)
            assert t["met"] == (t["ratio"] <= AUTO_IDLE) and t["needed"] == f"≤ {AUTO_IDLE}"
    out = io.StringIO()
    bench.render(quick_result, Console(file=out, width=160))
    words = "idle" if not quick_result["warnings"] else "busy: other processes shared the cores (see the warning)"
    assert f"targets ({words}; instruction set:" in out.getvalue()


def test_bf16_targets_are_judged_only_where_the_cpu_has_a_bf16_gemm():
    from selfattn.bench.targets import targets

    def case(name, native_ms, sdpa_ms):
        rows = [{"backend": b, "ms": ms, "chosen": b} for b, ms in (("native", native_ms), ("sdpa", sdpa_ms))]
        return {"name": name, "rows": rows}

    cases = [case("causal_bf16", 50.0, 100.0), case("causal_forward", 80.0, 90.0)]
    for has, want in ((True, [True, True]), (False, [None, None])):
        rows = targets({"machine": {"bf16_gemm": has}, "cases": cases})
        assert [r["ratio"] for r in rows] == [2.0, 1.6] and [r["met"] for r in rows] == want
        assert ("no bf16 GEMM" in rows[0]["note"]) is not has


def _with_long_numbers(result: dict) -> dict:
    """`result` with its first case's times in the hundreds of ms, as a full-size run's (\"108.25\")."""
    result = json.loads(json.dumps(result))
    for row in result["cases"][0]["rows"]:
        if row["ms"] is not None:
            row["ms"] *= 1000.0
    return result


def test_every_number_is_printed_whole_into_a_file_and_a_narrow_terminal(quick_result):
    """A file gets the tables at their own width (rich cut them to 80 columns: "108.…"); a terminal narrower than a
    table folds its cells onto more lines rather than cut them."""
    result = _with_long_numbers(quick_result)
    numbers = [f"{r['ms']:.2f}" for r in result["cases"][0]["rows"] if r["ms"] is not None]
    assert all(len(n) >= 6 for n in numbers), numbers
    to_file = io.StringIO()
    bench.render(result, Console(file=to_file, width=40))  # not a terminal: what `selfattn bench > f.txt` gets
    text = to_file.getvalue()
    assert "…" not in text and all(n in text for n in numbers), text
    on_terminal = io.StringIO()
    bench.render(result, Console(file=on_terminal, width=40, force_terminal=True, color_system=None))
    assert "…" not in on_terminal.getvalue()
    assert max(len(line) for line in on_terminal.getvalue().splitlines()) <= 40


def test_the_cli_writes_whole_numbers_into_a_file(tmp_path):
    """`selfattn bench --quick > f.txt`, as a user runs it: every time in the JSON twin appears in the file."""
    import os
    import subprocess
    import sys

    args = [sys.executable, "-m", "selfattn", "bench", "--quick", "--case", "decode", "--threads", "1"]
    env = dict(os.environ, COLUMNS="40", PYTHONPATH=os.pathsep.join(sys.path))
    with open(tmp_path / "f.txt", "w") as out:
        done = subprocess.run(args, stdout=out, stderr=subprocess.PIPE, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "f.txt").read_text()
    assert "…" not in text.replace("measuring decode (1×8×1×64, Lk=512)…", ""), text
    assert "memory: not measured with --quick" in text
    for line in text.splitlines():
        if line.startswith("│ sdpa"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            assert len(cells) == 7 and float(cells[2]) > 0 and cells[6] == "—", line


def test_the_targets_header_says_the_load_measured(quick_result):
    """A run that warned of a busy machine is not called idle in the targets' header."""
    busy = json.loads(json.dumps(quick_result))
    busy["warnings"] = ["the machine was busy (load average 3.1 on 2 CPUs before the run): ..."]
    busy["machine"]["busy_processes"] = 0
    out = io.StringIO()
    bench.render(busy, Console(file=out, width=200))
    title = next(line for line in out.getvalue().splitlines() if line.startswith("targets ("))
    assert "idle" not in title and "busy: other processes shared the cores" in title, title
    busy["warnings"] = []
    out = io.StringIO()
    bench.render(busy, Console(file=out, width=200))
    assert any(line.startswith("targets (idle;") for line in out.getvalue().splitlines())
    busy["machine"]["busy_processes"], busy["warnings"] = 2, ["the machine was busy (...)"]
    from selfattn.bench.render import load_words

    assert load_words(busy) == "under load 2, and other processes shared the cores (see the warning)"


def test_quick_measures_no_memory_unless_asked():
    result = bench.run(cases=["decode"], quick=True, threads=1)
    assert all(row["extra_mib"] is None for row in result["cases"][0]["rows"])
    assert result["method"]["memory"].startswith("not measured with --quick")
