"""issue 18 item 2: a transformers folder whose weights did not all load is refused by name, before anything
is explained (transformers only warns and fills the gaps at random: the explanation was of a random model)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from selfattn.cli import main
from selfattn.explainer.session import Explainer
from tests.explainer.documents import explained
from tests.hf.models import save

Q = "model.layers.0.self_attn.q_proj.weight"
UP = "model.layers.1.mlp.up_proj.weight"


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save("llama", tmp_path_factory.mktemp("llama") / "llama")


def _variant(llama, tmp_path, change):
    folder = tmp_path / "broken"
    shutil.copytree(llama, folder)
    weights = load_file(folder / "model.safetensors")
    change(weights)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def _nan(weights):
    weights[UP] = weights[UP].clone()
    weights[UP][0, 0] = float("nan")


def _inf(weights):
    weights[Q] = weights[Q].clone()
    weights[Q][1, 2] = float("-inf")


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda w: w.pop(Q), f"the weights lack 1 tensor(s) the model needs ({Q}); transformers would fill them"),
        (
            lambda w: [w.pop(k) for k in [k for k in w if k.startswith("model.layers.1.")]],
            "the weights lack 9 tensor(s) the model needs (model.layers.1.input_layernorm.weight, ",
        ),
        (lambda w: w.__setitem__(Q, torch.zeros(3, 32)), f"tensor {Q} has shape (3, 32) in the weights but the config"),
        (_nan, f"the weights hold NaN or infinite values in 1 tensor(s) ({UP})"),
        (_inf, f"the weights hold NaN or infinite values in 1 tensor(s) ({Q})"),
    ],
    ids=["one-missing", "a-layer-missing", "wrong-shape", "nan", "inf"],
)
def test_broken_weights_are_refused_by_name(llama, tmp_path, capsys, change, message):
    folder = _variant(llama, tmp_path, change)
    with pytest.raises(ValueError) as refused:
        Explainer.load(folder)
    assert message in str(refused.value)
    assert main(["explain", "a blue monster", "--model", str(folder)]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "internal error" not in err


def test_a_missing_tensor_is_said_in_our_one_line_not_transformers_report(llama, tmp_path):
    """In a real process (transformers' logger writes to the stderr it found at import): no coloured load
    report with terminal escapes before the refusal."""
    folder = _variant(llama, tmp_path, lambda w: w.pop(Q))
    proc = subprocess.run(
        [sys.executable, "-m", "selfattn.cli", "explain", "a blue monster", "--model", str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and "selfattn explain: error:" in proc.stderr
    assert "\x1b[" not in proc.stderr and "LOAD REPORT" not in proc.stderr, proc.stderr


def test_the_whole_folder_still_loads(llama):
    doc = explained(Explainer.load(llama), "a blue monster walks into the forest")
    assert doc["model"]["n_layers"] == 2 and doc["prediction"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
def test_the_finite_check_finds_one_nan_or_infinity_in_any_dtype(dtype):
    """The scan of every weight reads one min and max per tensor (no boolean copy): a NaN or ±inf anywhere in it is
    still found, in every dtype a model is loaded in."""
    import torch

    from selfattn.explainer.source.resolve import _finite

    t = torch.randn(1000, dtype=getattr(torch, dtype))
    assert _finite(t) and _finite(t[:0])
    for bad in (float("nan"), float("inf"), float("-inf")):
        for at in (0, 517, 999):
            u = t.clone()
            u[at] = bad
            assert not _finite(u), (dtype, bad, at)
