"""auto's choice against every CPU backend on a grid of decoding steps and small prefills, side by side.

    PYTHONPATH=src python scripts/measure_auto.py [--load N] [--json out.json]

The grid the decoding rows of `selfattn.kernels.cost` were refitted on: one decoding step (Lq = 1) over
Lk = 512, 2048, 4096, 16384 keys with Hkv = 8 and 1 (GQA 8/1), causal prefills at L = 128–2048, full attention at
512 and 2048, a chunked prefill (256 over 4096) and a window of 128. B = 1, Hq = 8, D = 64, fp32, the backends
interleaved round by round (`bench.timing.best_seconds_interleaved`), at least 1 s each. `--load N` runs N busy
processes (`bench.load`) during the run. Prints each shape's times, auto's choice and its time over the fastest.
Not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import json

import torch

import selfattn
from selfattn import kernels
from selfattn.bench.load import busy_processes
from selfattn.bench.timing import best_seconds_interleaved
from selfattn.request import build_request

BACKENDS = ("sdpa", "native", "tiled", "naive")


def shapes() -> list[dict]:
    out = [dict(Lq=1, Lk=Lk, Hkv=hkv, causal=True, window=None) for Lk in (512, 2048, 4096, 16384) for hkv in (8, 1)]
    out += [dict(Lq=L, Lk=L, Hkv=8, causal=True, window=None) for L in (128, 256, 512, 1024, 2048)]
    out += [dict(Lq=L, Lk=L, Hkv=8, causal=False, window=None) for L in (512, 2048)]
    out += [
        dict(Lq=256, Lk=4096, Hkv=8, causal=True, window=None),
        dict(Lq=2048, Lk=2048, Hkv=8, causal=True, window=128),
    ]
    return out


def measure(shape: dict) -> dict:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, shape["Lq"], 64, generator=g)
    k = torch.randn(1, shape["Hkv"], shape["Lk"], 64, generator=g)
    v = torch.randn(1, shape["Hkv"], shape["Lk"], 64, generator=g)
    kw = dict(causal=shape["causal"], window=shape["window"])
    chosen = kernels.choose(build_request(q, k, v, **kw), "auto").name
    calls = {}
    for name in BACKENDS:
        if not kernels.BACKENDS[name].not_supported_reasons(build_request(q, k, v, **kw)):
            calls[name] = lambda name=name: selfattn.attention(q, k, v, backend=name, **kw)
    with torch.no_grad():
        timings = best_seconds_interleaved(calls, 1.0, None)
    ms = {name: seconds * 1e3 for name, (seconds, _) in timings.items()}
    return dict(shape, chosen=chosen, ms=ms, over_fastest=ms[chosen] / min(ms.values()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    kernels.native.build()
    rows = []
    with busy_processes(args.load):
        for shape in shapes():
            row = measure(shape)
            rows.append(row)
            times = "  ".join(f"{name} {ms:.3f}" for name, ms in row["ms"].items())
            print(
                f"Lq={row['Lq']:<5} Lk={row['Lk']:<6} Hkv={row['Hkv']} causal={row['causal']!s:<5} "
                f"window={row['window']!s:<5} auto→{row['chosen']:<7} {row['over_fastest']:.2f}×  ({times} ms)",
                flush=True,
            )
    print(f"worst: {max(r['over_fastest'] for r in rows):.2f}× the fastest")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
