"""`selfattn.files`: bounded reads of regular files only, atomic writes with the permissions open() gives.

issue 18 item 9: a checkpoint whose tokenizer.json is a FIFO blocked forever (read_json waited for a
writer). Item 16: every file was written 0600 (mkstemp) whatever the umask.
"""

from __future__ import annotations

import os
import stat
import sys
import threading

import pytest

from selfattn.files import open_regular, read_json, temp_folder, write_atomic

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")


def _returns_within(seconds: float, call) -> BaseException | object:
    """What `call()` returned or raised, run in a thread: None if it was still blocked after `seconds`."""
    outcome = []

    def run():
        try:
            outcome.append(call())
        except BaseException as e:  # noqa: BLE001 — handed back to the test
            outcome.append(e)

    worker = threading.Thread(target=run, daemon=True)  # a blocked open() cannot be stopped: let it die with us
    worker.start()
    worker.join(seconds)
    return outcome[0] if outcome else None


@needs_fifo
def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path):
    fifo = tmp_path / "tokenizer.json"
    os.mkfifo(fifo)
    got = _returns_within(20, lambda: read_json(fifo, what="tokenizer file"))
    assert isinstance(got, ValueError), f"read_json on a FIFO gave {got!r} (None: still blocked)"
    assert (
        str(got)
        == f"{fifo} is a FIFO (named pipe), not a regular file: a tokenizer file is read only from a regular file"
    )


@needs_fifo
def test_a_checkpoint_whose_tokenizer_or_weights_are_fifos_is_refused(tmp_path):
    import shutil

    from selfattn.model.checkpoint import DEFAULT_DIR, load_checkpoint

    for name in ("tokenizer.json", "model.safetensors", "config.json"):
        folder = tmp_path / name
        shutil.copytree(DEFAULT_DIR, folder)
        (folder / name).unlink()
        os.mkfifo(folder / name)
        got = _returns_within(60, lambda f=folder: load_checkpoint(f))
        assert isinstance(got, ValueError), f"{name} as a FIFO gave {got!r} (None: still blocked)"
        assert f"{folder / name} is a FIFO (named pipe), not a regular file" in str(got)


def test_a_folder_or_a_device_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"is a folder, not a regular file: a config is read only from a regular"):
        read_json(tmp_path, what="config")
    if sys.platform.startswith("linux"):
        with pytest.raises(ValueError, match=r"/dev/zero is a character device, not a regular file"):
            read_json("/dev/zero")
    with pytest.raises(FileNotFoundError, match="config not found"):
        read_json(tmp_path / "nothing.json", what="config")
    (tmp_path / "ok.json").write_text('{"a": 1}')
    assert read_json(tmp_path / "ok.json") == {"a": 1}
    with open_regular(tmp_path / "ok.json") as f:
        assert f.read() == b'{"a": 1}'


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_get_the_umasks_permissions(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        path = write_atomic(tmp_path / "report.html", "<p>hi</p>")
        folder = temp_folder(tmp_path, "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~umask
    assert path.read_text() == "<p>hi</p>"


def test_a_replaced_file_keeps_its_mode_and_no_temporary_is_left(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")
    path.chmod(0o640)
    old = os.umask(0o022)
    try:
        write_atomic(path, "new", force=True)
    finally:
        os.umask(old)
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    with pytest.raises(FileExistsError, match="already exists; pass --force"):
        write_atomic(path, "newer")
    assert path.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["out.json"]
