"""Ranges and lists in arguments are bounded before they are expanded or read in full.

`--layers 0-99999999` once built a hundred million indices before any check (a MemoryError after 24 s where one
line on stderr is promised); `--ablate` with twenty thousand heads took seconds (each compared with all before
it). Now a layer index past what any model has (`limits.SIZES`), a head past SIZES["heads"], a list past
MAX_ABLATED_HEADS, and a number of more digits than any of them are refused at once, in one line naming the
value and the bound, from the CLI (exit 2) and from the library (ValueError)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from selfattn.cli_args import _layers_list
from selfattn.explainer.experiments import pairs, parse_heads
from selfattn.limits import MAX_ABLATED_HEADS, SIZES

REPO = Path(__file__).resolve().parents[1]
ADDRESS_SPACE = 3 << 30
"""The CLI runs under this much address space: a range expanded in full would fail, not take the machine."""
FAST_S = 20
"""Seconds a refused command may take, imports included, on a busy machine (the refusal itself is instant)."""


def _cli(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "selfattn.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limited,
    )
    return done, time.monotonic() - start


@pytest.mark.parametrize(
    "layers, says",
    [("0-99999999", "99999999"), ("0-" + "9" * 30, "9" * 30), ("3,600", "600"), ("²", "²")],
)
def test_explain_refuses_layers_past_any_model_in_one_line_at_once(layers, says):
    done, seconds = _cli("explain", "--layers", layers)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and says in lines[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr and seconds < FAST_S


def test_the_largest_layer_any_model_has_is_still_accepted():
    top = SIZES["layers"] - 1
    assert _layers_list(f"0-{top}") == list(range(SIZES["layers"]))
    assert _layers_list(f"{top},2-3") == [2, 3, top]
    with pytest.raises(Exception, match=str(SIZES["layers"])):
        _layers_list(f"0-{SIZES['layers']}")


def test_ablate_refuses_too_many_heads_before_reading_them():
    spec = ",".join(f"{i}.{j}" for i in range(100) for j in range(200))  # 20,000 heads
    start = time.monotonic()
    with pytest.raises(ValueError, match=str(MAX_ABLATED_HEADS)):
        parse_heads(spec)
    with pytest.raises(ValueError, match=str(MAX_ABLATED_HEADS)):
        pairs(spec)
    assert time.monotonic() - start < 0.5
    assert len(parse_heads(",".join(f"0.{j}" for j in range(MAX_ABLATED_HEADS)))) == MAX_ABLATED_HEADS


@pytest.mark.parametrize(
    "spec, says",
    [
        ("9" * 5000 + ".1", "layer"),
        (f"{SIZES['layers']}.0", str(SIZES["layers"])),
        (f"0.{SIZES['heads']}", str(SIZES["heads"])),
        ("².1", "²"),
    ],
)
def test_ablate_refuses_an_index_past_any_model_naming_it(spec, says):
    with pytest.raises(ValueError, match=says) as info:
        parse_heads(spec)
    assert len(str(info.value)) < 300  # the value is named, shortened: never 5,000 digits echoed


def test_the_cli_refuses_a_long_ablate_list_in_one_line():
    spec = ",".join(f"{i}.{j}" for i in range(40) for j in range(40))  # 1,600 heads
    done, seconds = _cli("explain", "--ablate", spec)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and str(MAX_ABLATED_HEADS) in lines[0], done.stderr[-2000:]
    assert seconds < FAST_S
