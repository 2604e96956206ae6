"""What a call of `selfattn.attention` costs beyond its kernel: one decoding step (one query over a short KV cache)
through "auto" and through backend="sdpa", against torch's SDPA called bare, interleaved best of N, fp32.

    PYTHONPATH=src python scripts/measure_call_overhead.py [--lk 64 512] [--threads 2] [--load 1]

At a few hundred keys the kernel takes tens of µs, so the checks (`build_request`), the dispatch
(`kernels.choices`) and the overflow check are most of the call. Not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import functools

import torch
from torch.nn.functional import scaled_dot_product_attention

from selfattn.bench.load import busy_processes
from selfattn.bench.timing import best_seconds_interleaved
from selfattn.functional import attention

CALLS_TIMED = 100
"""Calls timed together (one timing of ~10 ms instead of one of ~100 µs, which a timer tick or a switch distorts)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lk", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--load", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    busy = busy_processes(args.load) if args.load else contextlib.nullcontext()
    with busy, torch.no_grad():
        for lk in args.lk:
            best = _timed(lk, args.seconds)
            bare = best["torch SDPA, bare"][0]
            print(f"Lk = {lk} (B 1, H 8, Lq 1, D 64; {args.threads} threads, {args.load} busy)")
            for name, (seconds, n) in best.items():
                print(f"  {name:28s} {seconds * 1e6:8.1f} µs  {seconds / bare:5.2f}× bare  ({n} calls)")


def _timed(lk: int, seconds: float) -> dict[str, tuple[float, int]]:
    """Each way of calling one decoding step over `lk` keys: (best seconds of one call, calls timed)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, 1, 64, generator=g)
    k, v = (torch.randn(1, 8, lk, 64, generator=g) for _ in range(2))
    one = {
        "torch SDPA, bare": lambda: scaled_dot_product_attention(q, k, v),
        'attention(backend="sdpa")': lambda: attention(q, k, v, causal=True, backend="sdpa"),
        "attention (auto)": lambda: attention(q, k, v, causal=True),
    }
    calls = {name: functools.partial(_repeated, call) for name, call in one.items()}
    best = best_seconds_interleaved(calls, seconds)
    return {name: (s / CALLS_TIMED, n * CALLS_TIMED) for name, (s, n) in best.items()}


def _repeated(call) -> None:
    for _ in range(CALLS_TIMED):
        call()


if __name__ == "__main__":
    main()
