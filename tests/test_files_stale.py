"""A write killed before its rename leaves its temporary file (.NAME.XXXXXXXX.tmp) beside the target; the next
write to that same target removes it. Only that pattern of that target's name is touched, and only when no
writer holds it: another file, another target's temporary file, and the temporary file of a write still in
progress (it holds a lock on it) are kept."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from selfattn import files
from selfattn.explainer.views import fileset

REPO = Path(__file__).resolve().parents[1]


def _killed_write(target: Path) -> Path:
    """A real writer process killed after its temporary file is written, before its rename: what it leaves."""
    code = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from selfattn import files
        files.os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
        files.write_atomic(Path({str(target)!r}), b"half", force=True)
        """
    )
    subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO / "src")}, timeout=60)
    (left,) = [p for p in target.parent.iterdir() if p.name.startswith(f".{target.name}.") and p.suffix == ".tmp"]
    an_hour_ago = time.time() - 3600  # killed a while ago (a temporary file just made is left to its writer)
    os.utime(left, (an_hour_ago, an_hour_ago))
    return left


def test_the_next_write_removes_a_killed_writes_temporary_file(tmp_path):
    target = tmp_path / "report.html"
    left = _killed_write(target)
    assert left.read_bytes() == b"half" and not target.exists()
    keep = [
        tmp_path / "notes.txt",
        tmp_path / ".report.html.backup",  # not the writer's pattern
        tmp_path / ".report.html.XYZ.tmp",  # not 8 hex digits
        tmp_path / ".other.html.0123abcd.tmp",  # another target's
        tmp_path / ".report.html.0123abcd.tmp.keep",
    ]
    for path in keep:
        path.write_bytes(b"mine")
    files.write_atomic(target, b"whole")
    assert target.read_bytes() == b"whole"
    assert not left.exists(), "the killed write's temporary file is removed by the next write to that target"
    assert all(p.read_bytes() == b"mine" for p in keep)


def test_a_temporary_file_held_by_a_live_writer_is_kept(tmp_path):
    target = tmp_path / "out.npz"
    fd, live = files._new_temp_file(target)  # a writer still writing: it holds the lock on its file
    an_hour_ago = time.time() - 3600  # a long write: old, but held
    os.utime(live, (an_hour_ago, an_hour_ago))
    try:
        files.write_atomic(target, b"other")
        assert live.exists(), "a write in progress keeps its temporary file"
    finally:
        os.close(fd)
        live.unlink()


def test_the_file_set_removes_its_killed_temporary_files_too(tmp_path):
    target = tmp_path / "grid.png"
    left = _killed_write(target)
    fileset.write_all({target: b"png"}, force=True)
    assert target.read_bytes() == b"png" and not left.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.png"]
