"""Windows side by side: native at several query-block heights against Flex compiled (and SDPA's dense mask once),
for a causal sliding window, a two-sided window and packed segments; B=1, H=8, D=64, fp32, 2 threads, contenders
interleaved round by round, best round kept; `--load 1` adds the bench's busy process. Not a test: it prints ratios.

    PYTHONPATH=src python scripts/measure_windows.py [--load 1] [--rounds 5] [--block-q 32 64 128]
"""

from __future__ import annotations

import argparse
import contextlib

import torch

from selfattn.bench.load import busy_processes
from selfattn.bench.timing import best_seconds_interleaved
from selfattn.kernels import native
from selfattn.kernels.flex import FlexBackend
from selfattn.kernels.native import NativeBackend
from selfattn.request import build_request

H, D = 8, 64


def requests(L: int) -> dict:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, L, D, generator=g) for _ in range(3))
    segments = (torch.arange(L)[None] * 8 // L).to(torch.int64)  # 8 packed sequences of L/8
    return {
        "window 256": build_request(q, k, v, causal=True, window=256),
        "two-sided 128+128": build_request(q, k, v, window=(128, 128)),
        "8 segments, causal": build_request(q, k, v, causal=True, segments=segments),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--block-q", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    native.build()
    with busy_processes(args.load) if args.load else contextlib.nullcontext():
        for name, r in requests(args.length).items():
            fns = {"flex": lambda r=r: FlexBackend().forward(r)}
            fns["native (as auto runs it)"] = lambda r=r: NativeBackend().forward(r)
            for bq in args.block_q:
                fns[f"native bq={bq}"] = lambda r=r, bq=bq: NativeBackend(block_q=bq).forward(r)
            for fn in fns.values():  # compile flex, build native, first-touch memory
                fn()
            best = best_seconds_interleaved(fns, rounds=args.rounds)
            base = best["flex"][0]
            cells = "  ".join(f"{c} {base / s:.2f}×" for c, (s, _) in best.items() if c != "flex")
            print(f"{name} L={args.length} load={args.load}: flex {base * 1e3:.1f} ms; faster than flex: {cells}")


if __name__ == "__main__":
    main()
