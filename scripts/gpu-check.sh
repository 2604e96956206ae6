#!/usr/bin/env bash
# GPU checks in one go, for a machine with a CUDA GPU:
#   1. the GPU-marked tests (pytest -m gpu; they skip cleanly without CUDA),
#   2. a GPU timing of SDPA (flash/cuDNN/efficient, as PyTorch picks) and flex (compiled) side by side.
# Usage: scripts/gpu-check.sh [python]   (default: .venv/bin/python if present, else python3)
# Exit status: non-zero if there is no CUDA GPU, or any GPU test fails.
set -euo pipefail

cd "$(dirname "$0")/.."
PY="${1:-}"
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu-check: no CUDA GPU visible to torch ($("$PY" -c 'import torch; print(torch.__version__)')); nothing to check" >&2
  exit 2
fi
"$PY" -c 'import torch; p = torch.cuda.get_device_properties(0); print(f"gpu-check: {p.name}, {p.total_memory / 2**30:.0f} GiB, torch {torch.__version__}")'

echo "== GPU-marked tests"
"$PY" -m pytest -q -m gpu tests -p no:cacheprovider

echo "== GPU timing: sdpa vs flex (compiled), B=1 H=8 D=64"
"$PY" - <<'EOF'
import time

import torch
import torch.nn.functional as F

from selfattn.functional import build_request
from selfattn.kernels import flex, sdpa
from selfattn.kernels.flex import FlexBackend

H, D = 8, 64


def timed(fn, repeat=20):
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / repeat)
    return best


for dtype in (torch.bfloat16, torch.float16):
    for name, L, kwargs in (("causal", 8192, dict(causal=True)), ("window 256", 16384, dict(causal=True, window=256)),
                            ("softcap 30 causal", 8192, dict(causal=True, softcap=30.0))):
        q, k, v = (torch.randn(1, H, L, D, device="cuda", dtype=dtype) for _ in range(3))
        r = build_request(q, k, v, **kwargs)
        row = {}
        if r.softcap is None:
            is_causal = r.window is None
            mask = None if is_causal else sdpa.dense_mask(r)
            row["sdpa"] = timed(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal))
        start = time.perf_counter()
        FlexBackend().forward(r)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - start
        row["flex"] = timed(lambda: FlexBackend().forward(r))
        cells = "  ".join(f"{b} {t * 1e3:7.2f} ms" for b, t in row.items())
        print(f"{str(dtype):15s} {name:18s} L={L:6d}  {cells}  (flex first call {compile_s:.1f} s)")
        del q, k, v
        torch.cuda.empty_cache()
EOF
echo "gpu-check: done"
