"""`selfattn bench --case command`: whole commands in fresh processes, their rows and ratios. Plumbing only: no
timing is asserted."""

import io
import sys

import pytest
from rich.console import Console

from selfattn.bench import command_case
from selfattn.bench.command_case import measure, render_command, run_command_case, text_of


def test_a_row_is_the_peak_of_that_process_alone(tmp_path):
    held = bytearray(300 << 20)  # the measuring process's own 300 MiB must not count as the command's
    held[:: 1 << 12] = b"\1" * len(held[:: 1 << 12])
    small = measure("small", [sys.executable, "-c", "pass"], {}, tmp_path, tokens=None)
    big = measure(
        "big",
        [sys.executable, "-c", "b = bytearray(200 << 20); b[::4096] = b'1' * len(b[::4096])"],
        {},
        tmp_path,
        tokens=None,
    )
    assert small["seconds"] > 0 and small["peak_bytes"] < 100 << 20, small
    assert big["peak_bytes"] >= 200 << 20, big
    del held


def test_cpu_time_is_the_work_not_the_wait(tmp_path):
    sleeper = measure("sleep", [sys.executable, "-c", "import time; time.sleep(1.0)"], {}, tmp_path, tokens=None)
    assert sleeper["seconds"] >= 1.0 and sleeper["cpu_seconds"] < 0.5, sleeper


def test_a_failed_command_is_a_row_saying_why(tmp_path):
    code = "import sys; print('no such model: m', file=sys.stderr); sys.exit(3)"
    row = measure("explain", [sys.executable, "-c", code], {}, tmp_path, tokens=6)
    assert row == {"mode": "explain", "tokens": 6, "error": "exit 3: no such model: m"}


def test_the_text_has_the_length_asked():
    tok = command_case._tiny_tokenizer()
    for n in (6, 40):
        assert len(tok(text_of(tok, n))["input_ids"]) == n


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="unknown model 'gpt5'; choose from qwen05, smollm2, qwen3b"):
        run_command_case(models=("gpt5",))
    with pytest.raises(ValueError, match="unknown mode 'train'"):
        run_command_case(quick=True, modes=("train",))


def test_the_quick_case_prints_rows_and_ratios():
    seen = []
    result = run_command_case(quick=True, modes=("explain",), progress=seen.append)
    (model,) = result["models"]
    hf, explain = model["rows"]
    assert (hf["mode"], explain["mode"]) == ("transformers", "explain") and seen
    for row in (hf, explain):
        assert "error" not in row, row
        assert row["tokens"] == 6 and row["seconds"] > 0 and row["cpu_seconds"] > 0 and row["peak_bytes"] > 0
    (ratio,) = model["ratios"]
    assert ratio["what"] == "explain / transformers" and ratio["target"] == 1.3
    assert ratio["time"] == pytest.approx(explain["seconds"] / hf["seconds"])
    assert ratio["peak"] == pytest.approx(explain["peak_bytes"] / hf["peak_bytes"])
    assert ratio["cpu"] == pytest.approx(explain["cpu_seconds"] / hf["cpu_seconds"])
    out = io.StringIO()
    render_command(result, Console(file=out, width=160))
    text = out.getvalue()
    assert "explain / transformers" in text and "≤ 1.3×" in text and f"{ratio['time']:.2f}×" in text


def test_every_round_of_the_page_writes_its_page():
    """The page of a second round is the first's file: each round writes it again (a refusal would leave one round)."""
    result = run_command_case(quick=True, modes=("html",), rounds=2)
    (model,) = result["models"]
    page = next(row for row in model["rows"] if row["mode"] == "html")
    assert "error" not in page and len(page["all_seconds"]) == 2, page
