"""The native kernel against SDPA in bfloat16, float32 and float64, side by side in one process (issue 20).

    PYTHONPATH=src python scripts/measure_native_dtypes.py [--threads 2] [--rounds 5] [--load N]

Cases (B=1, H=8, D=64, causal): forward L=4096 in bfloat16 (native on the path this CPU takes, and
with the half GEMM forced) and float32, forward L=2048 in float64, forward+backward L=2048 in float32
and float64. Contenders of a case are interleaved round by round (one warm-up call each) and the best
round is kept; a 2048² GEMM of the peak's dtype (float32 for bfloat16: this kernel's float32 sums) runs as
one more contender of each forward case, so "% of the peak" compares rates under the same conditions; the
GEMM rates before and after (bfloat16 too) and the load average are printed with them. `--load N` runs
N busy processes during the run. Not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from selfattn.bench.timing import best_seconds_interleaved
from selfattn.functional import build_request
from selfattn.kernels import native
from selfattn.kernels.native import NativeBackend

BUSY = "import torch\ntorch.set_num_threads(1)\na = torch.randn(1024, 1024)\nwhile True:\n    a @ a\n"
H, D = 8, 64


def gemm_peak(dtype: torch.dtype, n: int = 2048, seconds: float = 1.0) -> float:
    """Best GFLOP/s of one n² × n² torch.matmul in `dtype` within `seconds` (at least two calls)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    best, start, calls = float("inf"), time.perf_counter(), 0
    while calls < 2 or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        a @ b
        best, calls = min(best, time.perf_counter() - t), calls + 1
    return 2 * n**3 / best / 1e9


def qkv(L: int, dtype: torch.dtype, grad: bool = False):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, H, L, D, generator=g).to(dtype).requires_grad_(grad) for _ in range(3)]


def forward_case(L: int, dtype: torch.dtype, forced: bool):
    q, k, v = qkv(L, dtype)
    r = build_request(q, k, v, causal=True)
    auto = NativeBackend()
    fns = {"sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), "native": lambda: auto.forward(r)}
    if forced:
        half = NativeBackend(half_gemm=True)
        fns["native half GEMM forced"] = lambda: half.forward(r)
    return fns


def backward_case(L: int, dtype: torch.dtype):
    q, k, v = qkv(L, dtype, grad=True)
    nb = NativeBackend()

    def sdpa():
        torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(), (q, k, v))

    def nat():
        torch.autograd.grad(nb.forward(build_request(q, k, v, causal=True)).output.sum(), (q, k, v))

    return {"sdpa": sdpa, "native": nat}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--load", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    native.build()
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.load)]
    try:
        time.sleep(1.0 if busy else 0.0)
        before = os.getloadavg()[0]
        peaks = {dt: gemm_peak(dt) for dt in (torch.float32, torch.float64, torch.bfloat16)}
        print(
            f"threads={args.threads} load={args.load} loadavg {before:.2f}; 2048² GEMM GFLOP/s: "
            + ", ".join(f"{str(dt)[6:]} {g:.1f}" for dt, g in peaks.items())
        )
        for dt in (torch.bfloat16, torch.float16):
            print(f"  {str(dt)[6:]}: {native.gemm_path(dt)}")
        cases = [
            ("bf16 causal fwd L=4096", forward_case(4096, torch.bfloat16, True), 4096, torch.float32),
            ("fp32 causal fwd L=4096", forward_case(4096, torch.float32, False), 4096, torch.float32),
            ("fp64 causal fwd L=2048", forward_case(2048, torch.float64, False), 2048, torch.float64),
            ("fp32 causal fwd+bwd L=2048", backward_case(2048, torch.float32), None, None),
            ("fp64 causal fwd+bwd L=2048", backward_case(2048, torch.float64), None, None),
        ]
        results = []
        for name, fns, L, peak_dtype in cases:
            if peak_dtype is not None:  # the GEMM peak under the same conditions: one more contender
                a, b = torch.randn(2048, 2048).to(peak_dtype), torch.randn(2048, 2048).to(peak_dtype)
                fns["gemm"] = lambda a=a, b=b: a @ b
            for fn in fns.values():
                fn()
            results.append((name, best_seconds_interleaved(fns, rounds=args.rounds), L, peak_dtype))
        after = {dt: gemm_peak(dt) for dt in peaks}
        print("2048² GEMM GFLOP/s after: " + ", ".join(f"{str(dt)[6:]} {g:.1f}" for dt, g in after.items()))
        for name, timed, L, peak_dtype in results:
            sdpa = timed["sdpa"][0]
            cells = []
            gemm = 2 * 2048**3 / timed.pop("gemm")[0] / 1e9 if peak_dtype is not None else None
            for n, (s, _) in timed.items():
                cell = f"{n} {s * 1e3:.1f} ms ({s / sdpa:.2f}× sdpa)"
                if L is not None:
                    rate = 4 * H * D * L * (L + 1) / 2 / s / 1e9
                    cell += f" {rate:.0f} GFLOP/s = {100 * rate / gemm:.0f}%"
                cells.append(cell)
            peak = "" if gemm is None else f" [{str(peak_dtype)[6:]} GEMM 2048² interleaved: {gemm:.0f} GFLOP/s]"
            print(f"{name}{peak}: " + "; ".join(cells))
        print(f"loadavg after {os.getloadavg()[0]:.2f}")
    finally:
        for p in busy:
            p.terminate()
            p.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
