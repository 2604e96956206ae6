"""Cost-model constants for "native" and "flex" (B=1, H=8, D=64, fp32), as `kernels.cost` defines them:

RATE_GFLOPS   2·(D + Dv) flops per *visible* (query, key) pair and head, per second, by regime
READ_GBPS     bytes of K and V read per second by one decoding step (Lq=1, Lk=16384)
CALL_SECONDS  one call at L=16 (flex: L=128, its smallest on a CPU)
BACKWARD_FACTOR  (forward + backward) / forward, causal L=2048 (native only: flex has no CPU backward)

PYTHONPATH=src python scripts/calibrate_native.py [--threads 1] [--load 0] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import torch

from selfattn.bench.timing import best_seconds_interleaved
from selfattn.functional import build_request
from selfattn.kernels import cost, native
from selfattn.kernels.flex import FlexBackend
from selfattn.kernels.native import NativeBackend

sys.path.insert(0, os.path.dirname(__file__))
from measure_native import BUSY, D, H, gemm_gflops, qkv  # noqa: E402


def best(fn, rounds):
    """Best seconds of one call of `fn` over `rounds` timed calls, after one untimed warm-up call."""
    fn()
    return best_seconds_interleaved({"call": fn}, rounds=rounds)["call"][0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--load", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    native.build()
    nb, fx = NativeBackend(), FlexBackend()
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.load)]
    out = {}
    try:
        time.sleep(1.0 if busy else 0.0)
        gemm = gemm_gflops()
        flops = 2 * H * (D + D)
        for regime, L, kw in (
            ("full", 4096, {}),
            ("causal", 4096, dict(causal=True)),
            ("window", 8192, dict(causal=True, window=256)),
        ):
            r = build_request(*qkv(L, L), **kw)
            pairs = cost.visible_pairs(L, L, causal=kw.get("causal", False), window=kw.get("window"))
            out[f"native {regime}"] = pairs * flops / best(lambda r=r: nb.forward(r), args.rounds) / 1e9
            if regime != "full":
                out[f"flex {regime}"] = pairs * flops / best(lambda r=r: fx.forward(r), args.rounds) / 1e9
        r = build_request(*qkv(1, 16384), causal=True)
        kv_bytes = H * 16384 * 2 * D * 4
        out["native read GB/s"] = kv_bytes / best(lambda: nb.forward(r), args.rounds * 4) / 1e9
        r = build_request(*qkv(16, 16), causal=True)
        out["native call µs"] = best(lambda: nb.forward(r), args.rounds * 20) * 1e6
        r = build_request(*qkv(128, 128), causal=True)
        out["flex call µs (L=128)"] = best(lambda: fx.forward(r), args.rounds * 4) * 1e6
        g = qkv(2048, 2048, grad=True)
        r = build_request(*g, causal=True)
        with torch.no_grad():
            fwd = best(lambda: nb.forward(build_request(*(t.detach() for t in g), causal=True)), args.rounds)
        both = best(lambda: torch.autograd.grad(nb.forward(r).output.sum(), g), args.rounds)
        out["native backward factor"] = both / fwd
    finally:
        for p in busy:
            p.terminate()
            p.wait(timeout=10)
    print(f"threads={args.threads} load={args.load} loadavg={os.getloadavg()[0]:.2f} 1-thread GEMM {gemm:.0f} GFLOP/s")
    for name, value in out.items():
        print(f"  {name:28s} {value:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
