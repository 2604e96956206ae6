"""The score features' cost on the native kernel, side by side with plain causal attention in one run.

    PYTHONPATH=src python scripts/measure_features.py [--threads 2] [--length 4096] [--load N]

B=1, H=8, D=64, fp32 forward: plain causal, causal + sinks, causal + ALiBi, and a two-sided window (1024, 1024)
without the causal rule (the same number of visible pairs as causal), timed in interleaved rounds (best kept),
so that other work on the machine hits them alike; each printed as a ratio to plain causal. `--load N` runs N
busy processes beside it. Not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import os

import torch

from selfattn.bench.load import busy_processes
from selfattn.bench.timing import best_seconds_interleaved
from selfattn.kernels import native
from selfattn.kernels.native import NativeBackend
from selfattn.request import build_request


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--length", type=int, default=4096)
    parser.add_argument("--load", type=int, default=0)
    parser.add_argument("--min-seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    native.build()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, args.length, 64, generator=g) for _ in range(3))
    sinks = torch.randn(8, generator=g)
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / 8) for h in range(8)])
    cases = {
        "causal": dict(causal=True),
        "causal + sinks": dict(causal=True, sinks=sinks),
        "causal + ALiBi": dict(causal=True, alibi=slopes),
        "two-sided (1024, 1024)": dict(window=(1024, 1024)),
    }
    backend = NativeBackend()
    calls = {name: (lambda kw=kw: backend.forward(build_request(q, k, v, **kw))) for name, kw in cases.items()}
    with busy_processes(args.load):
        before = os.getloadavg()[0]
        timings = best_seconds_interleaved(calls, args.min_seconds)
        after = os.getloadavg()[0]
    base = timings["causal"][0]
    print(
        f"native, L={args.length}, {args.threads} threads, {args.load} busy processes, load {before:.1f} → {after:.1f}"
    )
    for name, (seconds, rounds) in timings.items():
        print(f"  {name:24} {seconds * 1e3:8.1f} ms  {seconds / base:5.2f}× causal  ({rounds} rounds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
