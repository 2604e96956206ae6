"""`selfattn walkthrough`: what it prints is what the reference computes."""

import json
import subprocess
import sys

import numpy as np
import pytest

from selfattn import reference as R
from selfattn import walkthrough
from selfattn.cli import main
from tests.tolerances import TOL


def section(doc, name):
    return next(s for s in doc["sections"] if s["id"] == name)


def as_array(values):
    return np.array([[-np.inf if v == "-inf" else v for v in row] for row in values], dtype=float)


def run_json(capsys, *args):
    assert main(["walkthrough", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_numbers_are_the_reference(capsys):
    doc = run_json(capsys)
    assert doc["tokens"] == ["一只", "蓝色", "怪兽", "走进", "森林"] and doc["d_k"] == 4
    scores = as_array(section(doc, "scores")["table"]["values"])
    assert (scores == walkthrough.TUTORIAL_SCORES).all()
    assert scores[4].tolist() == [0.2, 0.6, 2.3, 3.6, 3.0]  # the tutorial's 森林 row
    np.testing.assert_array_equal(as_array(section(doc, "scaled")["table"]["values"]), scores / 2)
    assert as_array(section(doc, "mask")["table"]["values"]).astype(bool).tolist() == R.causal_mask(5).tolist()
    masked = as_array(section(doc, "masked")["table"]["values"])
    assert np.isneginf(masked[~R.causal_mask(5)]).all()
    weights = as_array(section(doc, "weights")["table"]["values"])
    np.testing.assert_allclose(weights[:, :5], R.softmax(masked), rtol=0, atol=0)
    assert (weights[:, :5][~R.causal_mask(5)] == 0).all()  # exactly 0, not small
    np.testing.assert_allclose(weights[:, 5], 1.0, atol=TOL["float64_one_op"])
    out = as_array(section(doc, "output")["table"]["values"])
    np.testing.assert_allclose(out, R.softmax(masked) @ np.eye(5))
    top = section(doc, "output")["top"][4]
    assert top["query"] == "森林" and top["keys"][0]["token"] == "走进"  # as the tutorial says


def test_softmax_examples_are_computed(capsys):
    ex = section(run_json(capsys, "--lang", "en"), "softmax")["examples"]
    assert ex[0]["scores"] == [2.0, 0.0, 0.0] and abs(ex[0]["softmax"][0] - 0.787) < TOL["tutorial_digits"]
    assert ex[1]["scores"] == [2.0, "-inf", "-inf"] and ex[1]["softmax"] == [1.0, 0.0, 0.0]


def test_random_run_shapes_and_checks(capsys):
    doc = run_json(capsys, "--seed", "3", "--d-k", "9")
    assert doc["d_k"] == 9 and "d_k = 9" in section(doc, "scaled")["text"]
    r = section(doc, "random")
    shapes = {row["step"]: row["shape"] for row in r["shapes"]}
    assert shapes["X"] == [10, 128] and shapes["QKᵀ"] == [10, 10] and shapes["weights · V"] == [10, 128]
    assert r["checks"]["future_weight_max"] == 0.0 and r["checks"]["row_sum_max_deviation"] < TOL["float64_few_ops"]
    assert abs(sum(r["last_row_weights"]) - 1) < TOL["float64_few_ops"]


@pytest.mark.parametrize("lang, phrase", [("zh", "因果可见性"), ("en", "Causal visibility")])
def test_terminal_output_in_both_languages(capsys, lang, phrase):
    assert main(["walkthrough", "--lang", lang]) == 0
    text = capsys.readouterr().out
    assert phrase in text and "−inf" in text and "10×128" in text and "森林" in text
    assert "0.787" in text and "1.000, 0.000, 0.000" in text


def test_walkthrough_does_not_import_torch():
    code = (
        "import sys, io, contextlib\nfrom selfattn.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()): main(['walkthrough'])\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize(
    "args, message",
    [
        (["walkthrough", "--lang", "fr"], "invalid choice: 'fr'"),
        (["walkthrough", "--d-k", "0"], "expected a positive integer, got '0'"),
        (["walkthrough", "--seed", "x"], "expected an integer in [0, 9223372036854775807], got 'x'"),
        (["nope"], "invalid choice: 'nope'"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(args, message):
    proc = subprocess.run([sys.executable, "-m", "selfattn.cli", *args], capture_output=True, text=True)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_build_refuses_bad_values():
    with pytest.raises(ValueError, match="lang must be one of zh, en, got 'de'"):
        walkthrough.build(lang="de")
    with pytest.raises(ValueError, match="d_k must be >= 1, got -2"):
        walkthrough.build(d_k=-2)
