"""Building and loading the native kernel (csrc/attention.cpp and its headers): carried prebuilt by a wheel built
here, else compiled on first use and cached, never at import.

A wheel built from this source (`pip wheel .`, `python -m build`: setup.py's build step, `prebuild`) carries the
compiled library in selfattn/kernels/prebuilt/, with the torch version and C++ ABI it was built against; it is
loaded when this process's torch, ABI, CPU capability and sources give the same library name (`prebuilt_library`).
Otherwise the C++ is compiled with `torch.utils.cpp_extension.load` (ninja) and cached under
`$XDG_CACHE_HOME/selfattn/torch_extensions/<torch version>/`; the library's name carries a hash of the sources (the
.cpp and every header of csrc/), the compiler flags and the CPU capability, so a cached build never goes stale and a
build for another CPU is never loaded. `build()` compiles if needed, loads the library (its ops are
`torch.ops.selfattn_native`) and says so through `selfattn.kernels.notices`; without a compiler, or
when the build fails, it raises once with the reason and remembers it.

A first build nobody hears (no `notices` callback, no handler of the "selfattn" logger) is said out loud: one
`SlowStartWarning` attributed to the caller's own line (the first frame outside selfattn, torch and the standard
library), a line on stderr every TICK_SECONDS with the seconds so far, and a last line saying it is done and how
long it took. It takes about 20 s on 2 idle cores, about a minute on busy ones (measured: 18.4 s and 66 s,
AMD EPYC, torch 2.13): `BUILD_TIME`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

from ..dirs import cache_dir
from ..scores import constant_when_compiled
from .notice import Notice, _heard, emit, warn_unheard

__all__ = [
    "SOURCE",
    "CSRC",
    "headers",
    "source_text",
    "ARCH_FLAGS",
    "build",
    "build_dir",
    "is_built",
    "unavailable_reason",
    "BUILD_TIME",
    "PREBUILT",
    "prebuilt_library",
    "prebuild",
    "TICK_SECONDS",
]

CSRC = Path(__file__).with_name("csrc")
"""The kernel's C++: one translation unit, attention.cpp, which includes the headers beside it."""

SOURCE = CSRC / "attention.cpp"
"""The one file compiled: it checks, dispatches and binds; the kernel itself is in its headers (`headers()`)."""


def headers() -> tuple[Path, ...]:
    """Every header of csrc/, sorted by name: each is part of the library's name (a change to any one rebuilds) and
    of the package's data."""
    return tuple(sorted(CSRC.glob("*.h")))


def source_text() -> str:
    """The kernel's whole C++ text: attention.cpp, then each header in `headers()` order."""
    return "\n".join(path.read_text() for path in (SOURCE, *headers()))


BASE_FLAGS = ("-O3", "-std=c++17", "-fno-math-errno", "-fopenmp")
"""-fopenmp: at::parallel_for is a header template over `#pragma omp parallel`; without it, it runs serially."""

LINK_FLAGS = ("-fopenmp",)
ARCH_FLAGS = {"AVX512": ("-mavx2", "-mfma", "-mavx512f"), "AVX2": ("-mavx2", "-mfma")}
"""Vector flags by PyTorch's detected CPU capability: what this CPU runs, part of the cache key."""

BUILD_TIME = "about 20 s on 2 idle cores, about a minute on busy ones (measured: 18.4 s and 66 s, AMD EPYC, torch 2.13)"
"""How long the first build takes: the one figure the warning, README.md and docs/api.md give (a test holds them to
it). Measured with `XDG_CACHE_HOME=<empty folder> python -m selfattn.kernels build`."""

BUILD_AHEAD = f"{BUILD_TIME}, once per machine and torch; `python -m selfattn.kernels build` does it ahead"
"""What the first build's warning adds: how long, and how to build ahead."""

TICK_SECONDS = 5.0
"""While a build nobody hears runs, a line on stderr says the seconds so far this often."""

PREBUILT = Path(__file__).with_name("prebuilt")
"""Where a wheel carries the compiled library: <name>.so beside <name>.json ({"torch": ..., "cxx11_abi": ...})."""


@functools.lru_cache(maxsize=1)
def _flags() -> tuple[str, ...]:
    return BASE_FLAGS + ARCH_FLAGS.get(torch.backends.cpu.get_cpu_capability(), ())


@functools.lru_cache(maxsize=1)
def _name() -> str:
    """The library's name: changes with the sources (the .cpp and each header, by name and content), the flags,
    the CPU capability and torch."""
    key = hashlib.sha256()
    key.update(SOURCE.read_bytes())
    for header in headers():
        key.update(header.name.encode() + b"\0" + header.read_bytes())
    for part in (" ".join(_flags() + LINK_FLAGS).encode(), torch.__version__.encode()):
        key.update(part)
    return f"selfattn_native_{key.hexdigest()[:12]}"


def build_dir() -> Path:
    """Where the compiled library is cached: `selfattn.dirs.cache_dir()`/torch_extensions/<torch>."""
    return cache_dir() / "torch_extensions" / torch.__version__.replace("+", "_")


def _library_path() -> Path:
    return _library_path_for(os.environ.get("XDG_CACHE_HOME"), os.path.expanduser("~"))


@functools.lru_cache(maxsize=8)
def _library_path_for(xdg_cache_home: str | None, home: str) -> Path:
    """The library's path for these environment values, built once: "auto" asks on every call. The wheel's prebuilt
    library where it matches (`prebuilt_library`), else the cache's."""
    prebuilt = _prebuilt_here()
    if prebuilt is not None:
        return prebuilt
    name = _name()
    return build_dir() / name / f"{name}.so"


def _stamp() -> dict[str, object]:
    """What a prebuilt library must share with this process besides its name: torch's version and C++ ABI."""
    return {"torch": torch.__version__, "cxx11_abi": torch.compiled_with_cxx11_abi()}


@functools.lru_cache(maxsize=1)
def _prebuilt_here() -> Path | None:
    """`prebuilt_library()`, looked up once per process: the installed package does not change under it."""
    return prebuilt_library()


def prebuilt_library(folder: Path | None = None) -> Path | None:
    """The library a wheel carries in `folder` (default PREBUILT) when it is the one this process would build: the
    same name (sources, flags, CPU capability, torch version) and the same torch and C++ ABI in its stamp; else
    None (then the first use builds it)."""
    folder = PREBUILT if folder is None else folder
    library, stamp = folder / f"{_name()}.so", folder / f"{_name()}.json"
    try:
        if os.path.isfile(library) and json.loads(stamp.read_text()) == _stamp():
            return library
    except (OSError, ValueError):
        return None
    return None


def prebuild(folder: Path) -> Path:
    """Compile the library into `folder` (a wheel's selfattn/kernels/prebuilt/, from setup.py), with its stamp;
    returns the library's path. RuntimeError where no compiler or ninja is found or the compile fails."""
    missing = _missing_tools()
    if missing is not None:
        raise RuntimeError(f"cannot build the native kernel: {missing}")
    folder.mkdir(parents=True, exist_ok=True)
    name = _name()
    with tempfile.TemporaryDirectory(prefix="selfattn-prebuild-") as scratch:
        _run_compiler(name, Path(scratch))
        target = folder / f"{name}.so"
        shutil.copyfile(Path(scratch) / f"{name}.so", target)
    (folder / f"{name}.json").write_text(json.dumps(_stamp()))
    return target


LOOK_SECONDS = 1.0
"""How long one look at whether the library is in the cache holds (per path). "auto" asks on every call
(`NativeBackend.state`), and while the kernel is not loaded two stats a call were ~30 µs of a decoding step's
`attention` (SDPA's own step at 64 keys: ~15 µs); a library another process builds is seen within this time."""


@functools.lru_cache(maxsize=1)
def _missing_tools() -> str | None:
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler ({compiler!r} is not on PATH)"
    try:
        from torch.utils.cpp_extension import is_ninja_available
    except ImportError:  # pragma: no cover - torch without cpp_extension
        return "torch.utils.cpp_extension is not available"
    if not is_ninja_available():
        return "ninja is not available (pip install ninja)"
    return None


class _Library:
    """The native kernel's library as this process holds it: its loaded ops, or the reason it could not be built
    or loaded (kept: not retried), and the last look at whether it is in the cache. One per process (`_LIBRARY`);
    safe from any thread: loading runs under its lock, and a look is one tuple, read and replaced whole."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ops: Any = None  # torch.ops.selfattn_native once loaded
        self.error: str | None = None  # why it cannot be built or loaded, once that happened
        self._look: tuple[Path, float, bool] | None = None  # (path, when, whether the library was there)

    def exists(self) -> bool:
        """Whether the compiled library is in the cache, as seen at most LOOK_SECONDS ago (at this path)."""
        path, now = _library_path(), time.monotonic()
        last = self._look
        if last is not None and last[0] == path and now - last[1] <= LOOK_SECONDS:
            return last[2]
        look = (path, now, path.is_file())
        self._look = look
        return look[2]

    def is_built(self) -> bool:
        """True when the kernel is loaded or its compiled library is in the cache: using it costs no compile."""
        return self.ops is not None or self.exists()

    def unavailable_reason(self) -> str | None:
        """Why the kernel cannot be used here (no compiler, a failed build), or None. Never compiles."""
        if self.error is not None:
            return self.error
        if self.ops is not None or self.exists():
            return None
        return _missing_tools()

    def load(self):
        """`build()`: the ops, compiled first if needed; RuntimeError with the reason, kept, where that fails."""
        with self._lock:
            if self.ops is not None:
                return self.ops
            if self.error is not None:
                raise RuntimeError(self.error)
            path = _library_path()
            try:
                if not path.is_file():
                    missing = _missing_tools()
                    if missing is not None:
                        raise RuntimeError(f"cannot build the native kernel: {missing}; using 'tiled' instead")
                    _compile(path)
                torch.ops.load_library(str(path))
            except Exception as error:  # noqa: BLE001 - any build failure becomes one stated reason
                message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                if not message.startswith("cannot build"):
                    message = f"the native kernel failed to build or load ({message}); using 'tiled' instead"
                self.error = message
                raise RuntimeError(message) from error
            self.ops = torch.ops.selfattn_native
            return self.ops


_LIBRARY = _Library()
"""This process's native library (`Library`): what `build`, `is_built` and `unavailable_reason` read."""


@constant_when_compiled  # read once when compiled, as a constant of the graph
def is_built() -> bool:
    """True when the kernel is loaded or its compiled library is in the cache: using it costs no compile."""
    return _LIBRARY.is_built()


@constant_when_compiled
def unavailable_reason() -> str | None:
    """Why the kernel cannot be used here (no compiler, a failed build), or None. Never compiles."""
    return _LIBRARY.unavailable_reason()


def build():
    """Compile the kernel if needed and load it; returns its ops (`torch.ops.selfattn_native`).

    Where the installed wheel carries a library built for this torch, ABI and CPU, it is loaded and nothing
    compiles. Otherwise the first compile takes about 20 s on 2 idle cores, about a minute on busy ones
    (measured: 18.4 s and 66 s, AMD EPYC, torch 2.13) and reports itself as a start and a done (or failed)
    `selfattn.kernels.Notice`; nobody hearing those, it warns once at the caller's line, ticks its seconds on
    stderr and says when it is done.
    Raises RuntimeError with the reason if there is no compiler or the build fails (and remembers
    it: the backend then refuses with that reason instead of retrying)."""
    return _LIBRARY.load()


def _run_compiler(name: str, folder: Path) -> None:
    """torch's extension build of the kernel as `folder`/`name`.so (ninja; loads it into this process)."""
    from torch.utils.cpp_extension import load

    load(
        name=name,
        sources=[str(SOURCE)],
        extra_cflags=list(_flags()),
        extra_include_paths=[str(CSRC)],
        extra_ldflags=list(LINK_FLAGS),
        build_directory=str(folder),
        is_python_module=False,
        verbose=False,
    )


def _library_prefixes() -> tuple[str, ...]:
    """Folders whose frames are not the user's: selfattn's, torch's and the standard library's."""
    folders = (Path(__file__).resolve().parents[1], Path(torch.__file__).resolve().parent)
    return (*(str(f) + os.sep for f in folders), str(Path(sysconfig.get_paths()["stdlib"]).resolve()) + os.sep)


def _caller_depth() -> int:
    """How many frames above this function's caller the user's frame is (1: the caller's caller): the first frame
    outside selfattn, torch and the standard library (a frozen module counts as the standard library); the outermost
    frame where all are."""
    prefixes = _library_prefixes()
    frame, depth = sys._getframe(2), 1
    while frame.f_back is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith("<frozen ") or os.path.realpath(filename).startswith(prefixes)):
            break
        frame, depth = frame.f_back, depth + 1
    return depth


class _Ticker:
    """A line on stderr every TICK_SECONDS with the seconds since `start`, from a daemon thread, until stopped."""

    def __init__(self, what: str, start: float) -> None:
        self.what, self.start, self._stop = what, start, threading.Event()
        self._thread = threading.Thread(target=self._run, name="selfattn-native-build", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            seconds = time.perf_counter() - self.start
            print(f"selfattn: still {self.what}: {seconds:.0f} s so far", file=sys.stderr, flush=True)

    def __enter__(self) -> _Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _compile(path: Path) -> None:
    """Compile the library into `path`, with its notices. Nobody hearing them: the warning (at the user's line), a
    tick on stderr every TICK_SECONDS and a last line with the time taken."""
    path.parent.mkdir(parents=True, exist_ok=True)
    what = f"compiling the native attention kernel into {path.parent}"
    heard = _heard()
    warn_unheard(Notice("native", what, "start"), BUILD_AHEAD, stacklevel=_caller_depth() + 2)
    emit(Notice("native", what, "start"))
    start = time.perf_counter()
    stage = "failed"
    try:
        with contextlib.nullcontext() if heard else _Ticker("compiling the native attention kernel", start):
            _run_compiler(path.stem, path.parent)
        stage = "done"
    finally:
        end = Notice("native", what, stage, time.perf_counter() - start)
        emit(end)
        if not heard:
            print(f"selfattn: native attention kernel: {end.tail}", file=sys.stderr, flush=True)
