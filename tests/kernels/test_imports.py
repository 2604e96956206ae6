"""A plain (not compiled) `attention` call imports no compiler stack: no torch._dynamo, torch._inductor, sympy
or torch.onnx (issue 29: they cost ~1 s and ~80 MiB on a first call that compiles nothing)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from selfattn.scores import constant_when_compiled

COMPILER_STACK = ("torch._dynamo", "torch._inductor", "sympy", "torch.onnx")
SRC = str(Path(__file__).resolve().parents[2] / "src")

PROGRAM = """
import sys, torch, selfattn
q = torch.randn(1, 2, 8, 4)
selfattn.attention(q, q, q, causal=True, backend={backend!r})
print(",".join(m for m in {stack!r} if m in sys.modules))
"""


@pytest.mark.parametrize("backend", ["auto", "naive", "tiled", "sdpa", "native"])
def test_a_plain_call_imports_no_compiler(backend):
    if backend == "native":
        from selfattn.kernels import native_build

        if native_build.unavailable_reason() is not None:
            pytest.skip(native_build.unavailable_reason())
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    program = PROGRAM.format(backend=backend, stack=COMPILER_STACK)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"backend={backend!r} imported {done.stdout.strip()}"


def test_the_constant_mark_is_torchs():
    """`constant_when_compiled` sets the mark `torch.compiler.assume_constant_result` sets (it must not import
    torch._dynamo to do it), and a compiled graph then holds the function's result as a constant."""

    def probe():
        return 3

    def marked():
        return 3

    torch.compiler.assume_constant_result(probe)
    constant_when_compiled(marked)
    assert {k: v for k, v in vars(probe).items()} == {k: v for k, v in vars(marked).items()} != {}
