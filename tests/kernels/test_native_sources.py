"""The native kernel's C++ is one translation unit laid out in headers (csrc/): every header is part of the cached
library's name (a header change rebuilds), each is reached from attention.cpp, and the unit compiles for a CPU
capability torch may report without AVX512 (AVX2: the AVX512 code is compiled by function-level targets and chosen on
cpuid at run time)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from selfattn.kernels import native_build

INCLUDE = re.compile(r'^#include "([^"]+)"', re.MULTILINE)


@pytest.fixture
def csrc_copy(monkeypatch, tmp_path):
    """native_build reading a copy of csrc/ (its name cache emptied before and after)."""
    copy = tmp_path / "csrc"
    shutil.copytree(native_build.CSRC, copy)
    monkeypatch.setattr(native_build, "CSRC", copy)
    monkeypatch.setattr(native_build, "SOURCE", copy / "attention.cpp")
    native_build._name.cache_clear()
    yield copy
    native_build._name.cache_clear()


def test_a_change_to_any_header_changes_the_library_name(csrc_copy):
    headers = native_build.headers()
    assert len(headers) > 10 and all(h.parent == csrc_copy for h in headers)
    names = [native_build._name()]
    for header in headers:
        header.write_text(header.read_text() + "\n")
        native_build._name.cache_clear()
        names.append(native_build._name())
    (csrc_copy / "attention.cpp").write_text((csrc_copy / "attention.cpp").read_text() + "\n")
    native_build._name.cache_clear()
    names.append(native_build._name())
    assert len(set(names)) == len(names) == len(headers) + 2


def test_attention_cpp_reaches_every_header_and_only_those():
    """What the build compiles is what the name hashes (and what the package must ship): the headers reached from
    attention.cpp by `#include "..."` are exactly the files `headers()` lists."""
    reached, todo = set(), [native_build.SOURCE]
    while todo:
        for name in INCLUDE.findall(todo.pop().read_text()):
            path = native_build.CSRC / name
            assert path.is_file(), f"{name} is included but not in csrc/"
            if path not in reached:
                reached.add(path)
                todo.append(path)
    assert reached == set(native_build.headers())
    assert all(h.read_text().count("#pragma once") == 1 for h in native_build.headers())


@pytest.mark.slow
@pytest.mark.parametrize("capability", ["AVX2", "AVX512"])
def test_the_unit_compiles_for_each_vector_capability(capability, tmp_path):
    """An object file (code generated: target mismatches show only there) with the build's flags for `capability`."""
    from torch.utils.cpp_extension import include_paths

    if shutil.which("c++") is None:
        pytest.skip("no C++ compiler")
    flags = [*native_build.BASE_FLAGS, *native_build.ARCH_FLAGS[capability], "-fPIC"]
    includes = [f"-I{p}" for p in (*include_paths(), native_build.CSRC)]
    command = ["c++", "-c", *flags, *includes, str(native_build.SOURCE), "-o", str(tmp_path / "attention.o")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Wpsabi" not in done.stderr  # the AVX512 exp's lanes, were they compiled alone (`exp.h`)
