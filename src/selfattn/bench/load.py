"""Busy processes for `selfattn bench --load N`: the busy-core figures, made reproducible.

Each process multiplies two small float64 matrices on one BLAS thread, forever, until stopped: a
steady pure-CPU load of one core each. `busy_processes(n)` starts them, waits until each has done
its first product (so the load is there when the timing starts), and stops them all on the way
out, even on an error or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

from .. import checks
from ..limits import MAX_LOAD

__all__ = ["busy_processes", "MAX_LOAD", "MATRIX_SIZE"]

MATRIX_SIZE = 256
"""n of the n×n @ n×n float64 product each busy process repeats (a few ms: it never sleeps)."""

STOP_SECONDS = 5.0
"""How long a busy process gets to end after SIGTERM before it is killed."""

SPIN = f"""
import sys
import numpy as np
rng = np.random.default_rng(0)
a, b = rng.standard_normal(({MATRIX_SIZE}, {MATRIX_SIZE})), rng.standard_normal(({MATRIX_SIZE}, {MATRIX_SIZE}))
a @ b
print("ready", flush=True)
while True:
    a @ b
"""

ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


@contextlib.contextmanager
def busy_processes(n: int):
    """Inside the block, `n` processes each keep one core busy; yields their process ids."""
    checks.integer("load", n, low=0, high=MAX_LOAD)
    procs: list[subprocess.Popen] = []
    try:
        env = dict(os.environ, **ONE_THREAD)
        for _ in range(n):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", SPIN], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
                )
            )
        for proc in procs:
            assert proc.stdout is not None  # stdout=subprocess.PIPE
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"busy process {proc.pid} did not start (exit status {proc.poll()})")
        yield [proc.pid for proc in procs]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            assert proc.stdout is not None  # stdout=subprocess.PIPE
            proc.stdout.close()
