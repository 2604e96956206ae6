import json
from dataclasses import replace

import pytest
import torch

from selfattn.cli import main
from selfattn.model.checkpoint import FILES
from selfattn.model.decoder import INIT_STD
from selfattn.model.train import PRESETS, Preset, Stage, fourier_positions, lr_at, run_training
from selfattn.render.print_train import NOT_MEASURED, format_train_summary
from tests.tolerances import TOL


def test_tiny_training_lowers_the_loss_and_writes_everything(tiny_run):
    summary, folder = tiny_run
    first, last = summary["history"][0], summary["history"][-1]
    assert last["val_loss"] < first["train_loss"]  # after one epoch the loss has fallen
    assert summary["metrics"]["val"]["perplexity"] < 0.5 * summary["vocab_size"]
    for name in FILES:
        assert (folder / name).is_file()
    png = folder / "loss_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["training"]["seed"] == 0 and config["training"]["preset"] == "tiny"
    assert config["model"]["vocab_size"] == summary["vocab_size"]
    json.dumps(summary)  # the --json twin is serialisable
    text = format_train_summary(summary)
    assert "measure-word agreement" in text and "attention probe" in text


def test_refuses_to_overwrite_without_force(tiny_run, capsys):
    _, folder = tiny_run
    before = (folder / "model.safetensors").read_bytes()
    with pytest.raises(FileExistsError, match="model.safetensors already exists; pass force=True"):
        run_training("tiny", folder, progress=False)
    assert main(["train", "--preset", "tiny", "--out", str(folder), "--no-progress"]) == 1
    assert "--force" in capsys.readouterr().err
    assert (folder / "model.safetensors").read_bytes() == before


def test_bad_options_are_named(tmp_path):
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        run_training("huge", tmp_path)
    with pytest.raises(ValueError, match="epochs must be >= 1, got 0"):
        run_training("tiny", tmp_path, epochs=0)
    with pytest.raises(ValueError, match="lr must be < 1, got 5"):
        run_training("tiny", tmp_path, lr=5)
    with pytest.raises(ValueError, match="seed must be >= 0, got -3"):
        run_training("tiny", tmp_path, seed=-3)


@pytest.mark.parametrize("staged", [False, True], ids=["sentences", "curriculum"])
def test_the_same_seed_trains_the_same_model(tmp_path, staged):
    small = Preset(
        d_model=16,
        n_layers=1,
        n_heads=2,
        n_train=200,
        n_val=50,
        n_test=50,
        epochs=1,
        batch_size=32,
        lr=3e-3,
        warmup_steps=2,
    )
    if staged:
        small = replace(STAGED, n_train=200, n_val=50, n_test=50)
    a = run_training(small, tmp_path / "a", seed=5, progress=False)
    b = run_training(small, tmp_path / "b", seed=5, progress=False)
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    assert a["metrics"]["val"] == b["metrics"]["val"]
    assert a["metrics"]["paragraphs"] == b["metrics"]["paragraphs"]


def test_learning_rate_schedule_warms_up_then_decays():
    p = PRESETS["default"]
    lrs = [lr_at(s, 1000, p) for s in range(1000)]
    assert lrs[0] < lrs[p.warmup_steps - 1] == pytest.approx(p.lr)
    assert lrs[-1] == pytest.approx(0.1 * p.lr, rel=TOL["lr_schedule_end_rel"])
    assert all(x >= y for x, y in zip(lrs[p.warmup_steps :], lrs[p.warmup_steps + 1 :], strict=False))


STAGED = Preset(
    d_model=16,
    n_layers=1,
    n_heads=2,
    n_train=300,
    n_val=60,
    n_test=60,
    epochs=1,
    batch_size=32,
    lr=3e-3,
    warmup_steps=2,
    max_len=64,
    max_sentences=4,
    batch_tokens=256,
    curriculum=(Stage(1, 1, 256), Stage(1, 2, 256)),
    single_share=0.2,
    anchored_share=0.3,
    pos_init="fourier",
)


def test_a_length_curriculum_trains_every_position_and_reports_long_inputs(tmp_path):
    summary = run_training(STAGED, tmp_path / "staged", seed=3, progress=False)
    assert [(h["stage"], h["max_sentences"]) for h in summary["history"]] == [(1, 1), (2, 2), (3, 4)]
    assert all(h["val_paragraph_loss"] > 0 for h in summary["history"])
    positions = summary["positions"]
    assert positions["max_len"] == 64 and positions["untrained"] == 0 and positions["min_tokens"] > 0
    assert positions["min_relative_change"] > 0  # every position embedding moved
    late = summary["metrics"]["paragraphs"]["late"]
    assert late["from"] == 32 and late["sentences"] > 0 and 0 <= late["measure_agreement"] <= 1
    assert summary["paragraph_probe"]["n"] == late["sentences"]
    text = format_train_summary(summary)
    assert "paragraphs of 64 tokens" in text and "64 of 64 trained" in text
    config = json.loads((tmp_path / "staged" / "config.json").read_text(encoding="utf-8"))
    assert config["model"]["max_len"] == 64
    assert config["training"]["settings"]["curriculum"] == [
        {"epochs": 1, "max_sentences": 1, "batch_tokens": 256},
        {"epochs": 1, "max_sentences": 2, "batch_tokens": 256},
    ]


def test_fourier_positions_make_nearby_positions_alike_everywhere():
    p = fourier_positions(1024, 96, 2.0, torch.Generator().manual_seed(0))
    assert p.shape == (1024, 96)
    assert float(p.pow(2).mean().sqrt()) == pytest.approx(INIT_STD, rel=TOL["init_scale_rel"])  # GPT-2's scale
    gram = p @ p.T / (INIT_STD**2 * 96)  # a function of i - j: ≈ exp(-(i - j)² / 8)
    for i in (5, 300, 1000):
        assert [float(gram[i, i - d]) for d in (0, 1, 2)] == pytest.approx(
            [float(gram[5, 5 - d]) for d in (0, 1, 2)], abs=TOL["fourier_gram"]
        )
        assert float(gram[i, i]) == pytest.approx(1.0, rel=TOL["fourier_gram"])
        assert float(gram[i, i - 1]) > 0.8 > float(gram[i, i - 2]) > 0.5 > 0.1 > abs(float(gram[i, i - 4]))


def test_bad_presets_are_named():
    with pytest.raises(ValueError, match="pos_init must be one of"):
        replace(STAGED, pos_init="sinusoid")
    with pytest.raises(ValueError, match="anchored_share must be in \\[0, 1\\], got 2"):
        replace(STAGED, anchored_share=2)


def test_a_summary_with_unmeasured_figures_prints_them_as_not_measured(tiny_run):
    summary, _ = tiny_run
    late = summary["metrics"]["paragraphs"]["late"]
    broken = {
        **summary,
        "metrics": {
            **summary["metrics"],
            "paragraphs": {
                **summary["metrics"]["paragraphs"],
                "late": {
                    **late,
                    "sentences": max(late["sentences"], 1),
                    "ref_agreement": None,
                    "ref_n": 0,
                    "measure_agreement": None,
                    "perplexity": None,
                },
            },
        },
    }
    text = format_train_summary(broken)
    assert f"这+measure agreement {NOT_MEASURED} of 0" in text and f"measure-word agreement {NOT_MEASURED}" in text
