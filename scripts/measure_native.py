"""Measure the native kernel against SDPA, Flex (compiled) and tiled, side by side in one process.

    PYTHONPATH=src python scripts/measure_native.py [--threads 2] [--rounds 5] [--load N] [--json out.json]

Cases (B=1, H=8, D=64, fp32): causal forward L=4096; window w=256 L=8192 (native, flex compiled,
SDPA with a dense mask, tiled); causal forward+backward L=2048; one decoding step Lq=1 Lk=4096;
peak extra memory of a causal forward at L=32768 (in a child process, from its peak RSS).
Contenders are interleaved round by round and the best round is kept, so that other work on the
machine hits them alike. `--load N` runs N busy processes (a one-thread 1024² matmul loop) during
the run: the busy-core ratios. The load average and a one-thread GEMM rate are printed before
and after. Not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from selfattn.bench.memory import peak_extra_bytes
from selfattn.bench.timing import best_seconds_interleaved
from selfattn.functional import build_request
from selfattn.kernels import flex, native, sdpa
from selfattn.kernels.flex import FlexBackend
from selfattn.kernels.native import NativeBackend
from selfattn.kernels.tiled import TiledBackend

BUSY = "import torch\ntorch.set_num_threads(1)\na = torch.randn(1024, 1024)\nwhile True:\n    a @ a\n"
H, D = 8, 64


def gemm_gflops(seconds: float = 0.5) -> float:
    """One-thread 1024² matmul rate: how fast this machine is right now."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    a = torch.randn(1024, 1024)
    a @ a
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ a
        n += 1
    torch.set_num_threads(before)
    return 2 * 1024**3 * n / (time.perf_counter() - start) / 1e9


def qkv(Lq, Lk, grad=False):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, n, D, generator=g) for n in (Lq, Lk, Lk))
    return [t.requires_grad_(grad) for t in (q, k, v)]


def cases():
    """name → {contender: zero-argument callable}; the first contender is the baseline."""
    out = {}
    q, k, v = qkv(4096, 4096)
    r = build_request(q, k, v, causal=True)
    out["causal fwd L=4096"] = {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "native": lambda: NativeBackend().forward(r),
        "tiled": lambda: TiledBackend().forward(r),
    }
    wq, wk, wv = qkv(8192, 8192)
    wr = build_request(wq, wk, wv, causal=True, window=256)
    dense = sdpa.dense_mask(wr)
    out["window w=256 L=8192"] = {
        "flex": lambda: FlexBackend().forward(wr),
        "native": lambda: NativeBackend().forward(wr),
        "sdpa-dense": lambda: F.scaled_dot_product_attention(wq, wk, wv, attn_mask=dense),
        "tiled": lambda: TiledBackend().forward(wr),
    }
    gq, gk, gv = qkv(2048, 2048, grad=True)

    def fwd_bwd(run):
        def go():
            out = run()
            torch.autograd.grad(out.sum(), (gq, gk, gv))

        return go

    gr = build_request(gq, gk, gv, causal=True)
    out["causal fwd+bwd L=2048"] = {
        "sdpa": fwd_bwd(lambda: F.scaled_dot_product_attention(gq, gk, gv, is_causal=True)),
        "native": fwd_bwd(lambda: NativeBackend().forward(gr).output),
        "tiled": fwd_bwd(lambda: TiledBackend().forward(gr).output),
    }
    dq, dk, dv = qkv(1, 4096)
    dr = build_request(dq, dk, dv, causal=True)
    out["decode Lq=1 Lk=4096"] = {
        "sdpa": lambda: F.scaled_dot_product_attention(dq, dk, dv),
        "native": lambda: NativeBackend().forward(dr),
        "tiled": lambda: TiledBackend().forward(dr),
    }
    return out


def measure(rounds: int) -> dict:
    """name → {contender: best seconds of one call}: one warm-up call each (builds, compiles, first-touch
    allocations), then `rounds` rounds of one call of every contender."""
    table = {}
    for name, contenders in cases().items():
        for run in contenders.values():
            run()
        table[name] = {c: t for c, (t, _) in best_seconds_interleaved(contenders, rounds=rounds).items()}
    return table


def peak_memory_child(L: int) -> None:
    """In a child: peak RSS growth of one native causal forward at L, minus its output and lse.
    The peak (VmHWM) is reset first by writing 5 to /proc/self/clear_refs (Linux)."""
    q, k, v = qkv(L, L)
    r = build_request(q, k, v, causal=True)
    NativeBackend().forward(build_request(*qkv(256, 256), causal=True))  # load the library, start the threads
    res, grown = peak_extra_bytes(lambda: NativeBackend().forward(r))
    kept = res.output.numel() * 4 + H * L * 4  # the output, and the lse the kernel makes
    print(json.dumps({"L": L, "extra_MiB": round((grown - kept) / 2**20, 1), "returned_MiB": round(kept / 2**20, 1)}))


def peak_memory(L: int) -> dict:
    env = dict(os.environ)
    done = subprocess.run(
        [sys.executable, __file__, "--memory-child", str(L)], capture_output=True, text=True, env=env, timeout=600
    )
    if done.returncode != 0:
        return {"L": L, "error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--load", type=int, default=0, help="busy processes to run beside the measurement")
    parser.add_argument("--json", help="also write the table here")
    parser.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        peak_memory_child(args.memory_child)
        return 0
    torch.set_num_threads(args.threads)
    native.build()
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.load)]
    try:
        time.sleep(1.0 if busy else 0.0)
        before = {"load": os.getloadavg(), "gemm_gflops_1thread": gemm_gflops()}
        table = measure(args.rounds)
        after = {"load": os.getloadavg(), "gemm_gflops_1thread": gemm_gflops()}
    finally:
        for p in busy:
            p.terminate()
        for p in busy:
            p.wait(timeout=10)
    memory = peak_memory(32768)
    print(f"threads={args.threads} busy processes={args.load} rounds={args.rounds} torch {torch.__version__}")
    print(
        f"load average before {before['load'][0]:.2f}, after {after['load'][0]:.2f}; 1-thread GEMM "
        f"{before['gemm_gflops_1thread']:.0f} → {after['gemm_gflops_1thread']:.0f} GFLOP/s"
    )
    for name, best in table.items():
        base_name = next(iter(best))
        cells = "  ".join(f"{c} {t * 1e3:8.2f} ms ({t / best[base_name]:.2f}×)" for c, t in best.items())
        print(f"{name:24s} {cells}")
    print(f"peak extra memory, native causal fwd L=32768: {memory}")
    print(f"flex compile seconds: {[round(s, 1) for s in flex.compile_seconds.values()]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "threads": args.threads,
                    "load": args.load,
                    "before": before,
                    "after": after,
                    "seconds": table,
                    "memory": memory,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
