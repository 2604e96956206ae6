"""Building and loading the native kernel (csrc/attention.cpp and its headers): compiled on first use, cached, never at
import.

The C++ is compiled with `torch.utils.cpp_extension.load` (ninja) and cached under
`$XDG_CACHE_HOME/selfattn/torch_extensions/<torch version>/`; the library's name carries a hash of the sources (the
.cpp and every header of csrc/), the compiler flags and the CPU capability, so a cached build never goes stale and a
build for another CPU is never loaded. `build()` compiles if needed, loads the library (its ops are
`torch.ops.selfattn_native`) and says so through `selfattn.kernels.notices`; without a compiler, or
when the build fails, it raises once with the reason and remembers it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import torch

from ..dirs import cache_dir
from ..scores import constant_when_compiled
from .notice import Notice, emit, warn_unheard

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

BUILD_AHEAD = "10 to 60 s on idle cores, once per machine; `python -m selfattn.kernels build` does it ahead"
"""What the first build's warning adds: how long, and how to build ahead."""


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
    """The library's path for these environment values, built once: "auto" asks on every call."""
    name = _name()
    return build_dir() / name / f"{name}.so"


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

    def load(self, stacklevel: int):
        """`build()`: the ops, compiled first if needed; RuntimeError with the reason, kept, where that fails.
        `stacklevel`: the frame the first build's warning names, counted as `warnings.warn` counts from this
        method's caller (1: the caller)."""
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
                    _compile(path, stacklevel + 1)
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

    The first compile takes tens of seconds and reports itself as a start and a done (or failed)
    `selfattn.kernels.Notice`.
    Raises RuntimeError with the reason if there is no compiler or the build fails (and remembers
    it: the backend then refuses with that reason instead of retrying)."""
    return _LIBRARY.load(stacklevel=2)


def _compile(path: Path, stacklevel: int = 2) -> None:
    """Compile the library into `path`, with its notices; `stacklevel`: the frame the first build's warning names,
    counted as `warnings.warn` counts from this function's caller (2: the caller's caller, `build`'s)."""
    from torch.utils.cpp_extension import load

    path.parent.mkdir(parents=True, exist_ok=True)
    what = f"compiling the native attention kernel (once, about a minute) into {path.parent}"
    warn_unheard(Notice("native", what, "start"), BUILD_AHEAD, stacklevel=stacklevel + 2)
    emit(Notice("native", what, "start"))
    start = time.perf_counter()
    try:
        load(
            name=path.stem,
            sources=[str(SOURCE)],
            extra_cflags=list(_flags()),
            extra_include_paths=[str(CSRC)],
            extra_ldflags=list(LINK_FLAGS),
            build_directory=str(path.parent),
            is_python_module=False,
            verbose=False,
        )
    except Exception:
        emit(Notice("native", what, "failed", time.perf_counter() - start))
        raise
    emit(Notice("native", what, "done", time.perf_counter() - start))
