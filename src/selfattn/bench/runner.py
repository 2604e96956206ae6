"""`selfattn.bench.run`: every chosen case on every backend it lists, with the GEMM peak before and after.

For every case (causal forward, forward + backward, sliding window, GQA, one decoding step,
peak memory at L = 32768) and every backend it lists (naive, sdpa, native, flex, tiled, auto), a row gives

    ms        best wall-clock time of one call (after a warm-up), on the current torch threads;
              the backends of a case take turns, so a busy moment of the machine hits all alike
    GFLOP/s   useful flops (4·D per visible query-key pair, ×3.5 with the backward) per second
    % peak    that rate against a matmul in the case's dtype timed in the same run on the same threads
    × SDPA    this row's time over PyTorch SDPA's in the same case (below 1: faster than SDPA)
    +MiB      peak memory above inputs and outputs during one call, in a fresh process
              (see `selfattn.bench.memory`)

A backend that refuses a case (naive past its memory budget) gets a row saying why.
Benchmarks are not tests: nothing here asserts a speed. Nothing here prints either: `run`
returns the numbers and the CLI draws them (`selfattn.bench.render`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from .. import checks
from ..kernels import native
from ..limits import MAX_THREADS
from . import memory
from .cases import EXTRA_CASES, Case, make_call, resolve, select, split_names
from .load import busy_processes
from .peak import GEMM_SIZE, QUICK_GEMM_SIZE, gemm_peak
from .targets import targets
from .timing import MIN_SECONDS, QUICK_MIN_SECONDS, best_seconds_interleaved, cpu_name

__all__ = ["run"]

MIB = 1 << 20

BUSY_LOAD = 1.0
"""Load (1-minute average) from other processes, beyond the CPUs torch leaves idle, that marks a busy machine."""

BUSY_LOAD_BEFORE = 2.0
"""The same before the run, higher: a 1-minute average still remembers the command just before."""

PEAK_SPREAD = 1.25
"""The GEMM peak is timed before and after the cases; one this much below the other marks a busy machine."""

NOT_MEASURED = {
    True: "not measured with --quick (one process per row: minutes); run a case without --quick to measure it",
    False: "not measured (--no-memory)",
}
"""What the method line says of the +MiB column where memory was not measured, by `quick`."""

PROBE_SIZE, SLOW_GFLOPS = 256, 10.0
"""A half-precision GEMM is first timed at PROBE_SIZE²; below SLOW_GFLOPS it is not timed at full size."""


def run(
    cases=None,
    quick: bool = False,
    *,
    threads: int | None = None,
    measure_memory: bool | None = None,
    load: int = 0,
    progress: Callable[[str, str], None] | None = None,
) -> dict:
    """Run the benchmark cases named in `cases` (all when None) and return the numbers as a dict.

    quick           small sizes, and no memory column unless measure_memory=True: seconds, plus FlexAttention's
                    compiles where they are not cached (each announced with its time through `kernels.notices`)
    threads         torch threads to run on (default: torch.get_num_threads())
    measure_memory  measure peak extra memory (one fresh process per row, which dwarfs quick's sizes); else those
                    fields are None. None: measured at full size, not with quick
    load            run this many busy processes (one core each, `selfattn.bench.load`) during the whole
                    run, GEMM peaks included, and stop them after
    progress        called with (case name, what it measures) before each case (the CLI shows "measuring …")
    """
    kernel_names, extra_names = split_names(cases)
    chosen = select(kernel_names, quick)
    checks.optional_integer("threads", threads, low=1, high=MAX_THREADS)
    checks.boolean("quick", quick)
    if measure_memory is None:
        measure_memory = not quick
    checks.boolean("measure_memory", measure_memory)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable or None, got {type(progress).__name__}")
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        load_before = _load_average()  # before our own busy processes start
        with busy_processes(load):
            if any("native" in case.backends for case in chosen):
                _build_native()
            result = _run(chosen, quick, torch.get_num_threads(), measure_memory, load, load_before, progress)
            result["extra"] = {name: _run_extra(name, quick, progress) for name in extra_names}
            return result
    finally:
        torch.set_num_threads(before)


def _build_native() -> None:
    """Compile the native kernel now if it is not built (it announces itself through
    `selfattn.kernels.notices`, with the time it took): its rows then time the kernel, not the compiler.
    A failed build leaves the rows refused with why."""
    if not native.is_built():
        try:
            native.build()
        except RuntimeError:
            pass  # not_supported_reasons now carries the reason


def _run_extra(name: str, quick: bool, progress) -> dict:
    """One of `EXTRA_CASES`: a whole model (hf) or several processes (ring)."""
    if progress is not None:
        progress(name, EXTRA_CASES[name])
    if name == "hf":
        from .hf_case import run_hf_case

        return run_hf_case(512 if quick else 2048, quick=quick)
    if name == "explain":
        from .explain_case import run_explain_case

        return run_explain_case(quick=quick)
    if name == "gguf":
        from .gguf_case import run_gguf_case

        return run_gguf_case()
    if name == "attribution":
        from .attribution_case import run_attribution_case

        return run_attribution_case()
    if name == "bf16":
        from .bf16_case import run_bf16_case

        return run_bf16_case(quick=quick)
    if name == "command":
        from .command_case import run_command_case

        return run_command_case(quick=quick, progress=None if progress is None else lambda line: progress(name, line))
    from .ring_case import ring_case

    return ring_case(quick=quick)


def _load_average() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def _peak(n: int, min_seconds: float, dtype: torch.dtype) -> dict:
    """`gemm_peak` in `dtype`; a half dtype first at PROBE_SIZE, and at n only where that ran at a useful rate
    (a torch without bf16 GEMM instructions multiplies 2048² bf16 matrices in about a minute)."""
    if dtype.itemsize >= 4:
        return gemm_peak(n, min_seconds, dtype)
    probe = gemm_peak(PROBE_SIZE, min_seconds / 10, dtype)
    return probe if probe["gflops"] < SLOW_GFLOPS else gemm_peak(n, min_seconds, dtype)


def _run(
    chosen: list[Case], quick: bool, threads: int, measure_memory: bool, busy: int, load: float | None, progress
) -> dict:
    min_seconds = QUICK_MIN_SECONDS if quick else MIN_SECONDS
    gemm_size = QUICK_GEMM_SIZE if quick else GEMM_SIZE
    dtypes = list(dict.fromkeys([torch.float32, *(case.dtype for case in chosen)]))
    before = {dtype: _peak(gemm_size, min_seconds, dtype) for dtype in dtypes}
    entries = []
    for case in chosen:
        if progress is not None:
            progress(case.name, case.shape)
        entries.append(_run_case(case, quick, threads, min_seconds, measure_memory))
    after = {dtype: _peak(gemm_size, min_seconds, dtype) for dtype in dtypes}  # a busy moment must not lower it
    load_after = _load_average()
    best = {dtype: max(before[dtype], after[dtype], key=lambda p: p["gflops"]) for dtype in dtypes}
    for dtype in dtypes:  # a half GEMM slower than fp32 (no bf16 instructions): the yardstick is converting to fp32
        if dtype.itemsize < 4 and best[dtype]["gflops"] < best[torch.float32]["gflops"]:
            slow = best[dtype]
            best[dtype] = best[torch.float32] | {
                "dtype": slow["dtype"],
                "what": f"{slow['what']} ran at {slow['gflops']:.1f} GFLOP/s, slower than fp32: the fp32 peak stands",
            }
    peaks = [before[torch.float32], after[torch.float32]]
    peak = best[torch.float32]
    for case, entry in zip(chosen, entries, strict=True):
        entry["gemm_peak_gflops"] = best[case.dtype]["gflops"]
        for row in entry["rows"]:
            if row["gflops"] is not None:
                row["peak_percent"] = 100.0 * row["gflops"] / best[case.dtype]["gflops"]
    result = {
        "quick": quick,
        "machine": {
            "cpu": cpu_name(),
            "instruction_set": native.instruction_set(),
            "bf16_gemm": native.has_half_gemm(torch.bfloat16),
            "cpus": os.cpu_count(),
            "threads": threads,
            "torch": torch.__version__,
            "gemm_peak_gflops": peak["gflops"],
            "gemm": f"{peak['what']}, the better of a run before and one after the cases",
            "load_before": load,
            "load_after": load_after,
            "busy_processes": busy,
            "gemm_peaks_gflops": [p["gflops"] for p in peaks],
            "gemm_peaks_by_dtype": {p["dtype"]: p["gflops"] for p in best.values()},
            "gemm_other_dtypes": [
                f"{p['dtype']} {p['gflops']:.1f} GFLOP/s ({p['what']})" for d, p in best.items() if d != torch.float32
            ],
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        },
        "warnings": _warnings(load, load_after, [p["gflops"] for p in peaks], threads, busy),
        "method": {
            "time": (
                f"best of n calls after one warm-up, the backends of a case taking turns, n rounds so "
                f"that at least {min_seconds:g} s is spent"
            ),
            "flops": "4·D per visible (query, key) pair and head; forward+backward counts 3.5× the forward",
            "memory": memory.METHOD if measure_memory else NOT_MEASURED[quick],
        },
        "cases": entries,
    }
    result["targets"] = targets(result)
    return result


def _run_case(case: Case, quick: bool, threads: int, min_seconds: float, measure_memory: bool) -> dict:
    q, k, v = case.inputs()
    rows: list[dict[str, Any]] = []
    for backend in case.backends:
        runs_on, why = resolve(case, backend, q, k, v)
        rows.append(
            {
                "backend": backend,
                "chosen": runs_on,
                "shape": case.shape,
                "ms": None,
                "gflops": None,
                "peak_percent": None,
                "vs_sdpa": None,
                "extra_mib": None,
                "memory_error": None,
                "skipped": why,
                "repeats": 0,
            }
        )
    calls = {row["backend"]: make_call(case, row["backend"], q, k, v) for row in rows if row["skipped"] is None}
    timings = best_seconds_interleaved(calls, min_seconds, case.rounds)
    for row in rows:
        if row["skipped"] is not None:
            continue
        seconds, row["repeats"] = timings[row["backend"]]
        row["ms"] = seconds * 1e3
        row["gflops"] = case.flops / seconds / 1e9
        if measure_memory and row["chosen"] == "flex":
            row["memory_error"] = "not measured: a fresh process would measure torch.compile, not the kernel"
        elif measure_memory:
            nbytes, row["memory_error"] = memory.extra_bytes(case.name, quick, row["backend"], threads)
            row["extra_mib"] = None if nbytes is None else nbytes / MIB
    sdpa_ms = next((r["ms"] for r in rows if r["backend"] == "sdpa" and r["ms"] is not None), None)
    for row in rows:
        if row["ms"] is not None and sdpa_ms is not None:
            row["vs_sdpa"] = row["ms"] / sdpa_ms
    return {
        "name": case.name,
        "title": case.title,
        "shape": case.shape,
        "size": {
            "B": case.batch,
            "Hq": case.q_heads,
            "Hkv": case.kv_heads,
            "Lq": case.len_q,
            "Lk": case.len_k,
            "D": case.head_dim,
            "window": list(case.window) if isinstance(case.window, tuple) else case.window,
            "features": list(case.features),
            "causal": case.causal,
            "backward": case.backward,
            "dtype": str(case.dtype).removeprefix("torch."),
        },
        "gflop": case.flops / 1e9,
        "rows": rows,
    }


def _warnings(
    load_before: float | None, load_after: float | None, peaks: list[float], threads: int, busy: int = 0
) -> list[str]:
    """Why the figures may not be what this machine can do: other processes on its cores, beyond the
    `busy` processes the run started on purpose (`--load`)."""
    cpus = os.cpu_count() or threads
    idle = max(0, cpus - threads)  # CPUs torch leaves to others
    signs = []
    if load_before is not None and load_before > BUSY_LOAD_BEFORE + idle:
        signs.append(f"load average {load_before:.1f} on {cpus} CPUs before the run")
    if load_after is not None and load_after > threads + busy + BUSY_LOAD + idle:  # the bench adds threads + busy
        signs.append(f"{load_after:.1f} after it")
    if min(peaks) < max(peaks) / PEAK_SPREAD:
        signs.append(f"GEMM peak {min(peaks):.0f} against {max(peaks):.0f} GFLOP/s in the same run")
    if not signs:
        return []
    text = f"the machine was busy ({'; '.join(signs)}): other processes shared the cores with the torch threads."
    if (os.environ.get("OMP_WAIT_POLICY") or "").upper() != "PASSIVE":
        text += (
            " With OpenMP's default wait policy, a thread that waits for a preempted one spins and takes "
            "its CPU, so kernels of many small steps (tiled, naive) slow down far more than SDPA's one "
            "fused call; rerun with OMP_WAIT_POLICY=PASSIVE in the environment, or on idle cores."
        )
    return [text]
