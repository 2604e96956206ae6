"""Peak extra memory of one call, measured honestly: resident memory of a fresh process.

`tracemalloc` does not see PyTorch's allocations, and PyTorch keeps no statistics for CPU
memory, so the kernel's own bookkeeping cannot be asked. Instead each (case, backend) runs in
a fresh Python process that

  1. builds the inputs (q, k, v, and the output gradient for a backward) and runs the backend
     (for "auto", the one it picks) once at a tiny size, so one-time library set-up is not counted;
  2. gives freed heap back to the system (glibc `malloc_trim`) and reads its resident memory (VmRSS);
  3. resets the peak (writing 5 to /proc/self/clear_refs), makes the one call, and reads the peak
     resident memory (VmHWM);

and reports peak − before − the bytes of what the call returned (the output, and gradients).
One process per backend, not one per case: a second backend measured in the same process
came out about 9 MiB higher than alone (memory the first call left behind). Needs Linux /proc;
elsewhere the figure is reported as unavailable.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
from dataclasses import replace

__all__ = ["METHOD", "child_main", "extra_bytes", "peak_extra_bytes"]

METHOD = (
    "peak RSS during one call in a fresh process (VmHWM after resetting it through /proc/self/clear_refs), "
    "minus RSS before the call, minus the bytes of the output (and gradients); inputs built and a tiny "
    "warm-up call made first"
)

TINY = 64
"""Lengths of the warm-up call that initialises libraries before measuring."""

CHILD_TIMEOUT_SECONDS = 900


def extra_bytes(case_name: str, quick: bool, backend: str, threads: int) -> tuple[int | None, str | None]:
    """(peak extra bytes of one call of `backend`, None) measured in a fresh process, or (None, why not)."""
    if not os.path.exists("/proc/self/clear_refs"):
        return None, "needs Linux /proc/self/clear_refs"
    spec = json.dumps({"case": case_name, "quick": quick, "backend": backend, "threads": threads})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    code = "from selfattn.bench.memory import child_main; child_main()"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, spec], capture_output=True, text=True, env=env, timeout=CHILD_TIMEOUT_SECONDS
        )
    except subprocess.TimeoutExpired:
        return None, f"timed out after {CHILD_TIMEOUT_SECONDS} s"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"measuring process failed: {tail}"
    return json.loads(lines[-1])["extra_bytes"], None


def child_main() -> None:
    """Entry point of the measuring process: argv[1] is the JSON spec; prints one JSON line."""
    import torch

    from .cases import make_call, resolve, select

    spec = json.loads(sys.argv[1])
    torch.set_num_threads(spec["threads"])
    case = select([spec["case"]], quick=spec["quick"])[0]
    q, k, v = case.inputs()
    runs_on, why = resolve(case, spec["backend"], q, k, v)  # "auto": warm up what it picks at full size
    if runs_on is None:
        raise ValueError(f"backend {spec['backend']!r} refuses case {case.name!r}: {why}")
    tiny = replace(
        case,
        len_q=min(case.len_q, TINY),
        len_k=min(case.len_k, TINY),
        window=_tiny_window(case.window),
    )
    make_call(tiny, runs_on, *tiny.inputs())()
    outputs, extra = peak_extra_bytes(make_call(case, spec["backend"], q, k, v))
    returned = sum(t.numel() * t.element_size() for t in outputs if t is not None)
    print(json.dumps({"extra_bytes": max(0, extra - returned)}))


def _tiny_window(window):
    """The case's window at the warm-up's size (TINY): w, or each bounded side of (left, right), at most TINY // 2."""
    if window is None:
        return None
    if isinstance(window, tuple):
        return tuple(None if side is None else min(side, TINY // 2) for side in window)
    return min(window, TINY // 2)


def peak_extra_bytes(call):
    """(what `call()` returned, the peak resident memory during it above the resident memory before it, in
    bytes, at least 0): freed heap handed back first, then VmRSS, the peak reset through clear_refs, the
    call, VmHWM. Linux only (/proc/self)."""
    _trim()
    before = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    result = call()
    return result, max(0, (_status_kib("VmHWM") - before) * 1024)


def _trim() -> None:
    """Collect garbage and hand freed heap back to the system (glibc `malloc_trim`), before reading VmRSS."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _status_kib(field: str) -> int:
    """A memory field of /proc/self/status in KiB: "VmRSS" (resident now), "VmHWM" (peak since clear_refs)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")
