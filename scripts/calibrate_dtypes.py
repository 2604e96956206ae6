"""`Cost.dtype_speed` for each CPU backend: its compute rate in bfloat16 and float64 over its float32 rate.

    PYTHONPATH=src python scripts/calibrate_dtypes.py [--threads 2] [--length 2048] [--backward]

For one causal request (B=1, H=8, D=64, L=--length), every backend (sdpa, native, tiled) in every dtype is
timed side by side (interleaved rounds, best kept: other work on the machine hits them alike), and each
backend's ratio rate(dtype) / rate(float32) is printed: the numbers `dtype_speed` holds in the backend's
module. Also printed: the estimate "auto" makes from the current constants against the time measured, and
which backend is fastest, so a wrong choice shows. Not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import os

import torch

from selfattn.bench.timing import best_seconds_interleaved
from selfattn.kernels import cost, dispatch
from selfattn.request import build_request

BACKENDS = ("sdpa", "native", "tiled", "naive")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--backward", action="store_true", help="time forward + backward")
    parser.add_argument("--min-seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    L = args.length
    base = [torch.randn(1, 8, L, 64, generator=g) for _ in range(3)]
    calls, requests = {}, {}
    for dname, dtype in DTYPES.items():
        q, k, v = (t.to(dtype).requires_grad_(args.backward) for t in base)
        grad = torch.randn_like(q)
        for name in BACKENDS:
            r = build_request(q, k, v, causal=True)
            requests[name, dname] = r
            backend = dispatch.BACKENDS[name]

            def call(backend=backend, q=q, k=k, v=v, grad=grad):
                out = backend.forward(build_request(q, k, v, causal=True)).output
                if args.backward:
                    out.backward(grad)

            calls[f"{name} {dname}"] = call
    print(
        f"load average {os.getloadavg()[0]:.1f}; threads {args.threads}; causal L={L}; "
        f"{'forward + backward' if args.backward else 'forward'}"
    )
    timings = best_seconds_interleaved(calls, args.min_seconds)
    print(f"{'backend':8} {'dtype':9} {'ms':>9} {'× fp32 rate':>12} {'estimate ms':>12}")
    for name in BACKENDS:
        fp32 = timings[f"{name} float32"][0]
        for dname in DTYPES:
            seconds = timings[f"{name} {dname}"][0]
            estimate = cost.estimate_seconds(dispatch.BACKENDS[name], requests[name, dname])
            print(f"{name:8} {dname:9} {seconds * 1e3:9.1f} {fp32 / seconds:12.2f} {estimate * 1e3:12.1f}")
    for dname in DTYPES:
        fastest = min(BACKENDS, key=lambda n: timings[f"{n} {dname}"][0])
        chosen = dispatch.choose(requests["sdpa", dname], "auto").name
        ratio = timings[f"{chosen} {dname}"][0] / timings[f"{fastest} {dname}"][0]
        print(f"{dname}: fastest {fastest}, auto takes {chosen} ({ratio:.2f}× the fastest)")
    print(f"load average after {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
