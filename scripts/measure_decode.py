"""Decode side by side: one query (or a few) over a long KV cache, SDPA against native with and without split-K
(and split-K chunk sizes), interleaved best of N, fp32, 2 threads; `--load 1` adds the bench's busy process.

    PYTHONPATH=src python scripts/measure_decode.py [--load 1] [--lk 16384] [--hkv 8]
"""

from __future__ import annotations

import argparse
import contextlib

import torch

from selfattn.bench.load import busy_processes
from selfattn.bench.timing import best_seconds_interleaved
from selfattn.functional import attention
from selfattn.kernels import native
from selfattn.kernels.native import NativeBackend
from selfattn.request import build_request


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=int, default=0)
    parser.add_argument("--lk", type=int, nargs="+", default=[16384])
    parser.add_argument("--lq", type=int, default=1)
    parser.add_argument("--hkv", type=int, nargs="+", default=[8, 1])
    parser.add_argument("--chunks", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    torch.set_num_threads(2)
    native.build()
    with busy_processes(args.load) if args.load else contextlib.nullcontext():
        for hkv in args.hkv:
            for lk in args.lk:
                measure(args.lq, lk, hkv, args.chunks, args.seconds, args.load)


def measure(lq: int, lk: int, hkv: int, chunks: list[int], seconds: float, load: int) -> None:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, lq, 64, generator=g)
    k, v = (torch.randn(1, hkv, lk, 64, generator=g) for _ in range(2))
    r = build_request(q, k, v, causal=True)
    fns = {"sdpa": lambda: attention(q, k, v, causal=True, backend="sdpa")}
    fns["auto"] = lambda: attention(q, k, v, causal=True)
    fns["native no split"] = lambda: NativeBackend(split_keys=None).forward(r)
    for c in chunks:
        fns[f"native split {c}"] = lambda c=c: NativeBackend(split_keys=c).forward(r)
    best = best_seconds_interleaved(fns, seconds)
    base = best["sdpa"][0]
    cells = "  ".join(f"{name} {s / base:.2f}×" for name, (s, _) in best.items() if name != "sdpa")
    print(f"Lq={lq} Lk={lk} Hkv={hkv} load={load}: sdpa {base * 1e3:.3f} ms; time over SDPA's: {cells}", flush=True)


if __name__ == "__main__":
    main()
