"""Torch transforms over `attention` in the dtypes the CPU kernels serve (float32, bfloat16, float16), on each answer
the CPU probe (`selfattn.kernels.cpu`) can give: torch.compile(fullgraph=True), torch.export, torch.func.vmap and
torch.func.grad, each against the eager call of the same backend (`transform_cells`).

Issue 45 defect 4: on an AVX512 CPU torch.compile(fullgraph=True) through native — by name, or through "auto" where it
picks native (sinks, ALiBi, a softcap, a window) — failed, as the first call of a process and after an eager one:
native asked torch.cpu's private probes inside the traced function ("Attempted to call function marked as skipped"),
and in bfloat16 `torch.backends.mkl.is_available()` ("torch.* op returned non-Tensor"). The probe is now read once,
outside any traced region (`cpu.has` and the rest are constants of the graph), and can be forced (`cpu.forced`, the
SELFATTN_CPU_ISA environment variable) to each answer: AVX2, AVX512, AVX512-BF16, AMX, AMX-FP16 — only the Python
side's decisions follow a forced answer; the kernel still runs what cpuid says.

float64 and every backend's refusals are tests/kernels/test_transforms.py's; the fresh processes here are the first
call of a process, the in-process cells come after eager calls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from selfattn.kernels import cpu

from . import transform_cells as cells

ROOT = Path(__file__).resolve().parents[2]


def _fresh(dtypes: str, isa: str | None) -> dict:
    """`transform_cells` as a fresh process's first calls, the probe forced to `isa` by the environment (None: this
    CPU's answer)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]))
    env.pop(cpu.ENVIRONMENT, None)
    if isa is not None:
        env[cpu.ENVIRONMENT] = isa
    command = [sys.executable, "-m", "tests.kernels.transform_cells", dtypes]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _assert_native_chosen(choices: dict[str, dict[str, str]]) -> None:
    for dtype, chosen in choices.items():
        assert set(chosen.values()) == {"native"}, f"{dtype}: auto took {chosen}, not native: the cells miss the defect"


@pytest.mark.parametrize("order", ["float32,bfloat16", "bfloat16,float16"])
def test_compile_fullgraph_as_the_first_call_of_a_process(native_built, order):
    """The defect as found: native's and auto's cells compiled with fullgraph=True as the process's first call (the
    first dtype in `order`), then exported, vmapped and differentiated; the next dtype after those calls."""
    result = _fresh(order, None)
    assert result["isa"] == "this CPU"
    assert result["failures"] == []
    _assert_native_chosen(result["choices"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "isa, order",
    [
        ("AVX2", "bfloat16,float32,float16"),
        ("AVX512", "float32,float16,bfloat16"),
        ("AVX512-BF16", "bfloat16,float32,float16"),
        ("AMX", "float16,bfloat16,float32"),
        ("AMX-FP16", "float16,float32,bfloat16"),
    ],
)
def test_every_transform_on_each_forced_answer_in_a_fresh_process(native_built, isa, order):
    """Each answer of the probe forced through the environment, every dtype, the first of `order` first."""
    result = _fresh(order, isa)
    assert result["isa"] == isa
    assert result["failures"] == []
    _assert_native_chosen(result["choices"])


SLOW_IN_PROCESS = ("AVX512", "AMX-FP16")
"""Answers whose in-process cells only the slow run takes (AVX2, AVX512-BF16 and AMX differ most: no AVX512 tiles,
this CPU's tiles, MKL's GEMMs over the tiles)."""


@pytest.mark.parametrize(
    "isa", [pytest.param(isa, marks=pytest.mark.slow) if isa in SLOW_IN_PROCESS else isa for isa in cpu.ISA_NAMES]
)
def test_native_and_auto_under_each_forced_answer_after_eager_calls(native_built, isa):
    """The probe forced in a block (`cpu.forced`), after eager calls in this process: float32 and bfloat16 compiled,
    exported, vmapped and differentiated through native and auto."""
    with cpu.forced(isa):
        assert cpu.name() == isa
        failures = []
        for dtype in (torch.float32, torch.bfloat16):
            failures += cells.check(cells.served("native", dtype) + cells.served("auto", dtype), dtype)
            _assert_native_chosen({str(dtype): cells.auto_choices(dtype)})
    assert failures == []
    torch._dynamo.reset()  # the graphs hold the forced answer as a constant


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.bfloat16, pytest.param(torch.float16, marks=pytest.mark.slow)],
    ids=list(cells.DTYPES),
)
def test_the_other_cpu_backends_in_each_dtype(dtype):
    """naive, sdpa and tiled (which never ask the probe) in one graph per dtype, each cell it serves."""
    served = [cell for backend in ("naive", "sdpa", "tiled") for cell in cells.served(backend, dtype)]
    assert {backend for backend, _ in served} == {"naive", "sdpa", "tiled"}
    assert cells.check(served, dtype) == []


def test_a_forced_answer_is_what_every_probe_says_and_ends_with_its_block():
    real = (cpu.name(), cpu.capability(), [cpu.has(p) for p in cpu.PROBES])
    expected = {
        "AVX2": ("AVX2", {"avx2"}, None, None),
        "AVX512": ("AVX512", {"avx2", "avx512"}, None, None),
        "AVX512-BF16": ("AVX512", {"avx2", "avx512", "avx512_bf16"}, "AVX512-BF16", None),
        "AMX": ("AVX512", {"avx2", "avx512", "avx512_bf16", "amx_tile"}, "AMX-BF16", None),
        "AMX-FP16": ("AVX512", set(cpu.PROBES), "AMX-BF16", "AMX-FP16"),
    }
    assert set(expected) == set(cpu.ISA_NAMES)
    for isa, (capability, features, bf16, fp16) in expected.items():
        with cpu.forced(isa) as answer:
            assert answer.name == cpu.name() == isa and cpu.capability() == capability
            assert {p for p in cpu.PROBES if cpu.has(p)} == features
            mkl = torch.backends.mkl.is_available()
            assert cpu.half_gemm_isa(torch.bfloat16) == (bf16 if mkl else None)
            assert cpu.half_gemm_isa(torch.float16) == (fp16 if mkl else None)
            assert cpu.has_half_gemm(torch.float32) is False
    assert (cpu.name(), cpu.capability(), [cpu.has(p) for p in cpu.PROBES]) == real
    with pytest.raises(ValueError, match=r"must be one of AVX2, AVX512, .*got 'SSE2'"):
        with cpu.forced("SSE2"):
            pass


def test_this_cpus_answer_is_torchs():
    """Unforced, the probe answers what torch says of this CPU: AVX2 and AVX512 from its public capability, the
    extensions no public API answers from its private probes."""
    assert cpu.name() == "this CPU"
    capability = torch.backends.cpu.get_cpu_capability()
    assert cpu.capability() == capability
    assert set(cpu.PROBES) == set(cpu.PRIVATE_PROBES) | {"avx2", "avx512"}
    assert cpu.has("avx2") is (capability in ("AVX2", "AVX512"))
    assert cpu.has("avx512") is (capability == "AVX512")
    for probe in cpu.PRIVATE_PROBES:
        fn = getattr(torch.cpu, f"_is_{probe}_supported", None)
        assert cpu.has(probe) is (fn is not None and bool(fn()))


def test_a_capability_lowered_for_torch_is_lowered_here():
    """ATEN_CPU_CAPABILITY=avx2 makes torch run its AVX2 kernels (and native is then built with AVX2 flags): the
    public capability says so, and the probe follows it (torch.cpu's private probe still answers the hardware)."""
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        pytest.skip("needs a CPU torch runs at AVX512")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]), ATEN_CPU_CAPABILITY="avx2")
    env.pop(cpu.ENVIRONMENT, None)
    code = "from selfattn.kernels import cpu; print(cpu.capability(), cpu.has('avx2'), cpu.has('avx512'))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["AVX2", "True", "False"]


def test_a_wrong_environment_answer_is_named(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]), **{cpu.ENVIRONMENT: "AVX1024"})
    code = "from selfattn.kernels import cpu; cpu.has('avx2')"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "must be one of AVX2, AVX512, AVX512-BF16, AMX, AMX-FP16, got 'AVX1024'" in done.stderr


@pytest.mark.slow
def test_flex_where_it_applies_compiled_exported_and_refused_under_vmap():
    """flex on the CPU (L >= 128, forward only): compiled with fullgraph=True and exported, each cell against eager
    (before, its forward took its bookkeeping's lock inside the graph: "Unsupported context manager"); under vmap it
    is refused by name (its eager call compiles, which fails on vmap's tensors)."""
    served = cells.served("flex", torch.float32)
    if not served:
        pytest.skip("flex serves none of these cells here (each refusal is named by kernels.explain)")
    assert cells.check(served, torch.float32, transforms=("compile", "export")) == []
    (failure,) = cells.check(served[:1], torch.float32, transforms=("vmap",))
    assert "cannot run under a torch.func transform" in failure
