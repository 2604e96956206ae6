"""issue 18 item 6: every output path is checked before the work, and the files are written as one set."""

from __future__ import annotations

import json

import pytest

from selfattn.cli import main
from selfattn.explainer.session import Explainer

TEXT = "一只蓝色怪兽走进森林"


@pytest.fixture
def no_model(monkeypatch):
    def loaded(*_, **__):
        raise AssertionError("the model was loaded before the outputs were checked")

    monkeypatch.setattr(Explainer, "load", loaded)


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("name", ["grid.svg", "grid.png"])
def test_a_users_grid_picture_is_refused_before_the_model_runs(tmp_path, capsys, no_model, name):
    pics = tmp_path / "pics"
    pics.mkdir()
    (pics / name).write_bytes(b"mine")
    assert main(["explain", "--plots", str(pics), "--html", str(tmp_path / "r.html")]) == 1
    assert f"{name} already exists; pass --force" in one_line(capsys.readouterr().err)
    assert (pics / name).read_bytes() == b"mine" and not (tmp_path / "r.html").exists()


def test_the_chosen_heads_picture_is_refused_before_the_model_runs(tmp_path, capsys, no_model):
    pics = tmp_path / "pics"
    pics.mkdir()
    (pics / "head-L1-H0.svg").write_bytes(b"mine")
    assert main(["explain", "--layer", "1", "--head", "0", "--plots", str(pics)]) == 1
    assert "head-L1-H0.svg already exists; pass --force" in one_line(capsys.readouterr().err)


def test_the_picked_heads_picture_is_refused_before_anything_is_written(tmp_path, capsys, tiny_checkpoint):
    """The head picked by the rule is known once the model ran: its pictures are checked then, still before
    the first file (here --npz and --html) is written."""
    assert main(["explain", TEXT, "--model", str(tiny_checkpoint), "--json"]) == 0
    sel = json.loads(capsys.readouterr().out)["selected"]
    pics = tmp_path / "pics"
    pics.mkdir()
    mine = pics / f"head-L{sel['layer']}-H{sel['head']}.png"
    mine.write_bytes(b"mine")
    npz, html = tmp_path / "t.npz", tmp_path / "r.html"
    args = ["explain", TEXT, "--model", str(tiny_checkpoint), "--plots", str(pics), "--npz", str(npz), "--html"]
    assert main([*args, str(html)]) == 1
    assert f"{mine.name} already exists; pass --force" in one_line(capsys.readouterr().err)
    assert mine.read_bytes() == b"mine" and not npz.exists() and not html.exists()
    assert sorted(p.name for p in pics.iterdir()) == [mine.name]


@pytest.mark.parametrize(
    "paths, message",
    [
        (["--npz", "X", "--html", "X"], "--html X is also the file of --npz X"),
        (["--html", "pics/grid.png", "--plots", "pics"], "--plots pics/grid.png is also the file of --html"),
        (["--npz", "pics/head-L0-H1.png", "--plots", "pics", "--layer", "0", "--head", "1"], "is also the file of"),
        (["--npz", "X", "--plots", "X"], "--npz X is the folder of --plots X/"),  # a file where a folder goes
    ],
)
def test_one_path_given_twice_is_refused_up_front(tmp_path, capsys, no_model, monkeypatch, paths, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pics").mkdir()
    assert main(["explain", *paths]) == 1
    assert message in one_line(capsys.readouterr().err)
    assert not (tmp_path / "X").exists()


def test_a_full_disk_during_the_pictures_leaves_no_partial_set(tmp_path, capsys, tiny_checkpoint, monkeypatch):
    """The third file fails (a full disk): no picture, no --html, no temporary file is left behind."""
    from selfattn.explainer.views import fileset

    real, calls = fileset.stage, []

    def full(path, data, **kwargs):
        calls.append(path)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(path, data, **kwargs)

    monkeypatch.setattr(fileset, "stage", full)
    out = tmp_path / "out"
    out.mkdir()
    args = ["explain", TEXT, "--model", str(tiny_checkpoint), "--html", str(out / "r.html"), "--plots", str(out)]
    assert main(args) == 1
    assert "No space left on device" in one_line(capsys.readouterr().err)
    assert len(calls) == 3 and [p for p in out.rglob("*") if p.is_file()] == []
    monkeypatch.setattr(fileset, "stage", real)
    assert main(args) == 0  # with room, the whole set
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == 5 and "r.html" in names and "grid.svg" in names


def test_train_refuses_a_plot_onto_its_checkpoint_before_training(tmp_path, capsys, monkeypatch):
    def trained(*_, **__):
        raise AssertionError("training started")

    monkeypatch.setattr("selfattn.model.train.run_training", trained)
    out = tmp_path / "ck"
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        args = ["train", "--preset", "tiny", "--out", str(out), "--plot", str(out / name), "--no-progress"]
        assert main([*args, "--force"]) == 1
        assert f"is the checkpoint's {name} in --out" in one_line(capsys.readouterr().err)
    assert not out.exists()
