import json

import pytest

from selfattn.model.checkpoint import FILES
from selfattn.model.commands import format_train_summary, train_command
from selfattn.model.train import PRESETS, Preset, _lr_at, run_training


def test_tiny_training_lowers_the_loss_and_writes_everything(tiny_run):
    summary, folder = tiny_run
    first, last = summary["history"][0], summary["history"][-1]
    assert last["val_loss"] < first["train_loss"]             # after one epoch the loss has fallen
    assert summary["metrics"]["val"]["perplexity"] < 0.5 * summary["vocab_size"]
    for name in FILES:
        assert (folder / name).is_file()
    png = folder / "loss_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["training"]["seed"] == 0 and config["training"]["preset"] == "tiny"
    assert config["model"]["vocab_size"] == summary["vocab_size"]
    json.dumps(summary)                                       # the --json twin is serialisable
    text = format_train_summary(summary)
    assert "measure-word agreement" in text and "attention probe" in text


def test_refuses_to_overwrite_without_force(tiny_run, capsys):
    _, folder = tiny_run
    before = (folder / "model.safetensors").read_bytes()
    with pytest.raises(FileExistsError, match="model.safetensors already exists; pass force=True"):
        run_training("tiny", folder, progress=False)
    assert train_command(preset="tiny", out=str(folder), progress=False) == 1
    assert "--force" in capsys.readouterr().err
    assert (folder / "model.safetensors").read_bytes() == before


def test_bad_options_are_named(tmp_path):
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        run_training("huge", tmp_path)
    with pytest.raises(ValueError, match="epochs must be an int >= 1, got 0"):
        run_training("tiny", tmp_path, epochs=0)
    with pytest.raises(ValueError, match="lr must be a number in \\(0, 1\\), got 5"):
        run_training("tiny", tmp_path, lr=5)
    with pytest.raises(ValueError, match="seed must be an int >= 0, got -3"):
        run_training("tiny", tmp_path, seed=-3)


def test_the_same_seed_trains_the_same_model(tmp_path):
    small = Preset(d_model=16, n_layers=1, n_heads=2, n_train=200, n_val=50, n_test=50, epochs=1,
                   batch_size=32, lr=3e-3, warmup_steps=2)
    a = run_training(small, tmp_path / "a", seed=5, progress=False)
    b = run_training(small, tmp_path / "b", seed=5, progress=False)
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    assert a["metrics"]["val"] == b["metrics"]["val"]


def test_learning_rate_schedule_warms_up_then_decays():
    p = PRESETS["default"]
    lrs = [_lr_at(s, 1000, p) for s in range(1000)]
    assert lrs[0] < lrs[p.warmup_steps - 1] == pytest.approx(p.lr)
    assert lrs[-1] == pytest.approx(0.1 * p.lr, rel=1e-3)
    assert all(x >= y for x, y in zip(lrs[p.warmup_steps:], lrs[p.warmup_steps + 1:]))
