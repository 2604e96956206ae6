"""No silent wait: the native kernel's first build warns a Python user once (with its expected time and
how to build ahead), says nothing more to a caller who hears notices, and `python -m selfattn.kernels
build` does it ahead."""

import contextvars
import logging
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from selfattn.kernels import native_build, notice
from selfattn.kernels.notice import Notice, SlowStartWarning, notices, warn_unheard


@pytest.fixture
def fresh(monkeypatch):
    """No warning given yet in this process, and the "selfattn" logger (the one `notice` logs to) hearing
    nothing: no handler of ours, and its level above INFO (a CLI test run earlier in this process leaves it
    at INFO, and pytest adds its capture handler during each test)."""
    monkeypatch.setattr(notice, "_WARNED", set())
    monkeypatch.setattr(notice.LOGGER, "handlers", [])
    level = notice.LOGGER.level
    notice.LOGGER.setLevel(logging.WARNING)  # setLevel, not the attribute: the logger caches isEnabledFor
    yield
    notice.LOGGER.setLevel(level)


def _alone(fn, *args):
    """`fn(*args)` in a new, empty context: no `notices(...)` subscriber left by an earlier test in this thread."""
    return contextvars.Context().run(fn, *args)


def _compile_without_compiling(monkeypatch, tmp_path):
    """native_build._compile with torch's extension build replaced by a no-op: its notices and warning only."""
    import torch.utils.cpp_extension

    monkeypatch.setattr(torch.utils.cpp_extension, "load", lambda **kwargs: None)
    native_build._compile(tmp_path / "lib" / "x.so")


def test_the_first_build_warns_once_with_its_time_and_the_command(fresh, monkeypatch, tmp_path):
    with pytest.warns(SlowStartWarning) as caught:
        _alone(_compile_without_compiling, monkeypatch, tmp_path)
    (message,) = [str(w.message) for w in caught]
    assert "compiling the native attention kernel" in message and native_build.BUILD_TIME in message
    assert "python -m selfattn.kernels build" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _alone(_compile_without_compiling, monkeypatch, tmp_path)  # once per process


def test_the_warning_names_the_users_line_and_the_build_ticks_and_ends(fresh, monkeypatch, tmp_path, capfd):
    """Through `selfattn.attention(..., backend="native")`, the first build's warning is attributed to this file (the
    caller's line: not native_op.py, not torch's dispatcher); while it compiles, a line on stderr every TICK_SECONDS
    says the seconds so far; at the end one says it is done and how long it took."""
    import torch
    import torch.utils.cpp_extension

    import selfattn

    def slow_compile(name, build_directory, **kwargs):  # a compile of ~3 ticks; the library is already loaded
        time.sleep(0.35)
        (Path(build_directory) / f"{name}.so").write_bytes(b"")

    q = torch.randn(1, 2, 5, 8)
    if native_build.unavailable_reason() is not None:
        pytest.skip(native_build.unavailable_reason())
    native_build.build()  # the real library, loaded once in this process: the one the call below runs
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(native_build, "_LIBRARY", native_build._Library())
    monkeypatch.setattr(native_build, "TICK_SECONDS", 0.1)
    monkeypatch.setattr(torch.utils.cpp_extension, "load", slow_compile)
    monkeypatch.setattr(torch.ops, "load_library", lambda path: None)
    capfd.readouterr()
    with pytest.warns(SlowStartWarning) as caught:
        out = contextvars.Context().run(selfattn.attention, q, q, q, causal=True, backend="native")
    assert [Path(w.filename).name for w in caught] == [Path(__file__).name], [w.filename for w in caught]
    assert torch.allclose(out, selfattn.attention(q, q, q, causal=True, backend="naive"))
    lines = capfd.readouterr().err.splitlines()
    ticks = [line for line in lines if line.startswith("selfattn: still compiling the native attention kernel: ")]
    assert len(ticks) >= 2 and all(line.endswith(" s so far") for line in ticks), lines
    assert re.fullmatch(r"selfattn: native attention kernel: done in \d+\.\d s", lines[-1]), lines


def test_no_warning_for_a_caller_who_hears_notices(fresh, monkeypatch, tmp_path, capfd):
    heard = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with notices(heard.append):
            _compile_without_compiling(monkeypatch, tmp_path)
    assert [n.stage for n in heard] == ["start", "done"]
    assert capfd.readouterr().err == ""  # the subscriber says it: no tick, no line of ours
    logger = logging.getLogger("selfattn")
    monkeypatch.setattr(logger, "handlers", [logging.NullHandler(logging.INFO)])  # the CLI's way of hearing
    level = logger.level
    logger.setLevel(logging.INFO)  # setLevel, not the attribute: the logger caches isEnabledFor
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert not warn_unheard(Notice("native", "x", "start"), "advice")
    finally:
        logger.setLevel(level)


def test_the_warning_is_per_source(fresh):
    with pytest.warns(SlowStartWarning, match=r"selfattn: compiling flex \.\.\. \(about 10 s\)"):
        assert _alone(warn_unheard, Notice("flex", "compiling flex", "start"), "about 10 s")
    with pytest.warns(SlowStartWarning):
        assert _alone(warn_unheard, Notice("native", "compiling native", "start"), "about 20 s")
    assert not _alone(warn_unheard, Notice("flex", "compiling flex", "start"), "about 10 s")


def _module(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "selfattn.kernels", *args], capture_output=True, text=True, timeout=600, env=env
    )


def test_build_ahead_and_status(native_built):
    done = _module("build")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("native kernel: already built (cache: ") and "SlowStartWarning" not in done.stderr
    done = _module("status")
    assert done.returncode == 0 and done.stdout.startswith("native kernel: built (cache: ")


def test_status_of_an_empty_cache_never_compiles(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path))
    done = _module("status", env=env)
    assert done.stdout.startswith(f"native kernel: not built (cache: {tmp_path / 'selfattn'}")
    assert not any(tmp_path.rglob("*.so"))
    done = _module("rebuild", env=env)
    assert done.returncode == 2 and "invalid choice: 'rebuild'" in done.stderr


def test_a_prebuilt_library_is_used_only_for_the_same_torch_and_abi(tmp_path):
    """What a wheel carries (selfattn/kernels/prebuilt/<name>.so + <name>.json) is taken where its name (sources,
    flags, CPU, torch) and its stamp (torch version, C++ ABI) are this process's; else the first use builds."""
    import json

    import torch

    name = native_build._name()
    assert native_build.prebuilt_library(tmp_path) is None  # nothing there
    (tmp_path / f"{name}.so").write_bytes(b"")
    assert native_build.prebuilt_library(tmp_path) is None  # no stamp
    stamp = {"torch": torch.__version__, "cxx11_abi": torch.compiled_with_cxx11_abi()}
    (tmp_path / f"{name}.json").write_text(json.dumps(stamp))
    assert native_build.prebuilt_library(tmp_path) == tmp_path / f"{name}.so"
    for other in ({**stamp, "torch": "2.0.0"}, {**stamp, "cxx11_abi": not stamp["cxx11_abi"]}):
        (tmp_path / f"{name}.json").write_text(json.dumps(other))
        assert native_build.prebuilt_library(tmp_path) is None
    (tmp_path / f"{name}.json").write_text("{not json")
    assert native_build.prebuilt_library(tmp_path) is None
    (tmp_path / "selfattn_native_000000000000.so").write_bytes(b"")  # another source's or CPU's library: not read
    assert native_build.prebuilt_library(tmp_path) is None
