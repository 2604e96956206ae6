"""Output paths that exist and are not regular files are never written, with or without --force.

A FIFO, a character device (a private copy of /dev/full: `mknod PATH c 1 7`), a socket, a folder, and a symlink
to any of them are refused with one line naming the path and what it is: a ValueError from the library (every
writer that goes through `files`: `write_atomic`, `check_writable`, the file set of `selfattn explain`, a
checkpoint), one line on stderr and a non-zero exit from the CLI. The target is left what it was. The check is
made again just before the rename, so a device that appears between the first check and the write is not
replaced either.

The device nodes need root (mknod); those cases are skipped elsewhere."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from selfattn import files
from selfattn.explainer.views import fileset, outputs

REPO = Path(__file__).resolve().parents[1]


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _device(path: Path) -> Path:
    """A character device with /dev/full's numbers (writes fail with ENOSPC), made in the test's folder."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 7))
    except PermissionError:
        pytest.skip("mknod needs root")
    return path


def _socket(path: Path) -> Path:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()  # the socket file stays
    return path


def _link_to_device(path: Path) -> Path:
    target = _device(path.with_name(path.name + ".dev"))
    path.symlink_to(target)
    return path


MAKERS = {"fifo": _fifo, "device": _device, "socket": _socket, "link to a device": _link_to_device}
SAYS = {"fifo": "FIFO", "device": "character device", "socket": "socket", "link to a device": "character device"}


def _same_kind(path: Path, before: os.stat_result) -> None:
    after = os.lstat(path)
    assert stat.S_IFMT(after.st_mode) == stat.S_IFMT(before.st_mode), f"{path} was replaced"
    assert after.st_ino == before.st_ino


@pytest.fixture(params=list(MAKERS))
def special(request, tmp_path) -> tuple[Path, str]:
    return MAKERS[request.param](tmp_path / "out.html"), SAYS[request.param]


@pytest.mark.parametrize("force", [False, True])
def test_write_atomic_refuses_what_is_not_a_regular_file(special, force):
    path, says = special
    before = os.lstat(path)
    with pytest.raises(ValueError, match=says) as info:
        files.write_atomic(path, b"<html>", force=force)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    _same_kind(path, before)
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("force", [False, True])
def test_check_writable_refuses_what_is_not_a_regular_file(special, force):
    path, says = special
    with pytest.raises(ValueError, match=says):
        files.check_writable(path, force=force)


def test_a_device_made_between_the_check_and_the_rename_is_not_replaced(tmp_path, monkeypatch):
    path = tmp_path / "out.npz"
    real = files._new_temp_file

    def device_appears(target):  # the target turns into a device while the new bytes are written
        opened = real(target)
        _device(path)
        return opened

    monkeypatch.setattr(files, "_new_temp_file", device_appears)
    with pytest.raises(ValueError, match="character device"):
        files.write_atomic(path, b"data", force=True)
    assert stat.S_ISCHR(os.lstat(path).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["out.npz"]


def test_the_file_set_writes_nothing_when_one_target_is_a_fifo(tmp_path):
    html, npz = tmp_path / "r.html", _fifo(tmp_path / "r.npz")
    before = os.lstat(npz)
    with pytest.raises(ValueError, match="FIFO"):
        fileset.write_all({html: b"<html>", npz: b"PK"}, force=True)
    assert not html.exists()
    _same_kind(npz, before)
    with pytest.raises(ValueError, match="FIFO"):
        outputs.check(npz=npz, html=html, force=True)


def test_the_file_set_checks_again_at_the_rename(tmp_path, monkeypatch):
    html, npz = tmp_path / "r.html", tmp_path / "r.npz"
    real = files.check_writable
    calls = []

    def fifo_after_the_first_checks(path, **kwargs):
        calls.append(path)
        out = real(path, **kwargs)
        if len(calls) == 2:  # both checked: now the second becomes a FIFO, before anything is renamed
            _fifo(npz)
        return out

    monkeypatch.setattr(fileset, "check_writable", fifo_after_the_first_checks)
    with pytest.raises(ValueError, match="FIFO"):
        fileset.write_all({html: b"<html>", npz: b"PK"}, force=True)
    assert stat.S_ISFIFO(os.lstat(npz).st_mode)
    assert not html.exists(), "no file of the set is written when one cannot be"


@pytest.mark.parametrize("force", [False, True])
def test_a_checkpoint_is_not_saved_over_a_device(tmp_path, force):
    from selfattn.model.checkpoint import check_checkpoint_folder, save_checkpoint
    from selfattn.model.tokenizer import WordTokenizer
    from tests.explainer.tiny import SENTENCES, tiny_model

    out = tmp_path / "ckpt"
    out.mkdir()
    dev = _device(out / "model.safetensors")
    tokenizer = WordTokenizer.from_words(SENTENCES)
    model = tiny_model(vocab_size=tokenizer.vocab_size)
    with pytest.raises(ValueError, match="character device"):
        check_checkpoint_folder(out, force=force)
    with pytest.raises(ValueError, match="character device"):
        save_checkpoint(model, tokenizer, out, force=force)
    assert stat.S_ISCHR(os.lstat(dev).st_mode)
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "selfattn.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("flag", ["--html", "--npz"])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_explain_refuses_a_fifo_or_a_device_even_with_force(tmp_path, flag, kind):
    path = MAKERS[kind](tmp_path / "out")
    before = os.lstat(path)
    done = _cli("explain", "一只蓝色怪兽", flag, str(path), "--force", cwd=tmp_path)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and SAYS[kind] in lines[0], done.stderr
    _same_kind(path, before)


def test_explain_refuses_a_fifo_in_the_plots_folder(tmp_path):
    plots = tmp_path / "plots"
    plots.mkdir()
    fifo = _fifo(plots / "grid.png")
    done = _cli("explain", "一只蓝色怪兽", "--plots", str(plots), "--force", cwd=tmp_path)
    assert done.returncode != 0 and "FIFO" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_fifo_given_as_the_plots_folder_is_named_as_a_fifo(tmp_path):
    fifo = _fifo(tmp_path / "plots")
    with pytest.raises(ValueError, match="FIFO"):
        outputs.check(plots_dir=fifo, force=True)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_train_refuses_a_fifo_as_its_picture_or_its_config(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    config = _fifo(out / "config.json")
    done = _cli("train", "--preset", "tiny", "--out", str(out), "--force", "--no-progress", cwd=tmp_path)
    assert done.returncode != 0 and "FIFO" in done.stderr and str(config) in done.stderr, done.stderr
    assert stat.S_ISFIFO(os.lstat(config).st_mode)
    picture = _fifo(tmp_path / "curve.png")
    done = _cli("train", "--preset", "tiny", "--out", str(tmp_path / "m2"), "--plot", str(picture), cwd=tmp_path)
    assert done.returncode != 0 and "FIFO" in done.stderr and str(picture) in done.stderr, done.stderr
    assert stat.S_ISFIFO(os.lstat(picture).st_mode) and not (tmp_path / "m2").exists()
