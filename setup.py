"""The wheel carries the native kernel compiled: a build step of setuptools' build_py.

`pip wheel --no-build-isolation .` or `python -m build --no-isolation` (torch importable in the build environment,
a C++ compiler and ninja on PATH) compiles src/selfattn/kernels/csrc into the wheel's selfattn/kernels/prebuilt/
(`selfattn.kernels.native_build.prebuild`), and the wheel is tagged for this platform. `import selfattn` then loads
that library where the installed torch, its C++ ABI and the CPU capability give the same library (else the first
use compiles it, as from source). Where torch cannot be imported (an isolated build without it), or with
SELFATTN_PREBUILD=0, the wheel is built without it and says so; a compile that fails fails the build.
An editable install (`pip install -e .`) never compiles here: it builds on first use, into the cache.
Everything else is in pyproject.toml.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel  # setuptools >= 70.1 (pyproject.toml asks for 77)
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SWITCH = "SELFATTN_PREBUILD"
"""Set to 0 to build a wheel without the compiled kernel."""


def _why_not_prebuilt() -> str | None:
    """Why this build cannot carry the compiled kernel (None: it does), decided before anything is built: the
    wheel's layout and tag depend on it."""
    if os.environ.get(SWITCH, "1") == "0":
        return f"{SWITCH}=0"
    try:
        import torch  # noqa: F401
    except ImportError:
        return "torch is not importable in this build environment (build with `pip wheel --no-build-isolation .`)"
    return None


WHY_NOT = _why_not_prebuilt()


def _prebuild(into: Path) -> None:
    """Compile the kernel into `into` (the wheel's selfattn/kernels/prebuilt/) with this source's selfattn."""
    sys.path.insert(0, str(ROOT / "src"))  # this source's selfattn, not an installed one
    try:
        from selfattn.kernels import native_build
    finally:
        sys.path.remove(str(ROOT / "src"))
    print(f"selfattn: compiling the native kernel into the wheel ({native_build.BUILD_TIME})", file=sys.stderr)
    library = native_build.prebuild(into)
    print(f"selfattn: the wheel carries {library.name}", file=sys.stderr)


class BuildPyWithKernel(build_py):
    """build_py, then the compiled kernel into the build's selfattn/kernels/prebuilt/ (not for an editable install)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        if WHY_NOT is not None:
            print(f"selfattn: the wheel carries no compiled kernel (built on first use): {WHY_NOT}", file=sys.stderr)
            return
        _prebuild(Path(self.build_lib) / "selfattn" / "kernels" / "prebuilt")


class KernelDistribution(Distribution):
    """A distribution with the compiled kernel is not pure: its files go to the wheel's root as a platform's."""

    def has_ext_modules(self) -> bool:
        return WHY_NOT is None


class BdistWheelForPlatform(bdist_wheel):
    """A wheel that carries the compiled kernel is this platform's, py3-none-<platform>: the library is an operator
    library that torch loads, with no Python C API, so any Python 3 of the platform loads it."""

    def get_tag(self) -> tuple[str, str, str]:
        tag = super().get_tag()
        return ("py3", "none", tag[2]) if WHY_NOT is None else tag


setup(
    distclass=KernelDistribution,
    cmdclass={"build_py": BuildPyWithKernel, "bdist_wheel": BdistWheelForPlatform},
)
