"""The cells of tests/kernels/test_transforms_isa.py: torch.compile(fullgraph=True), torch.export, torch.func.vmap and
torch.func.grad over `attention` in float32, bfloat16 and float16, each against the eager call of the same backend.
Run in the test's process, or as the first thing a fresh process does (`python -m tests.kernels.transform_cells
DTYPE,...`: the first dtype's compile is the process's first call; prints one JSON line of failures).

Shapes: B=1, Hq=4, Hkv=2, L=256, D=32 — long enough that "auto" weighs native fastest for sinks, ALiBi, a softcap
and a window (`AUTO_FEATURES`; checked, since those are the cells issue 45 found broken)."""

from __future__ import annotations

import json
import sys

import torch
from torch.func import grad, vmap

import selfattn
from selfattn import kernels
from selfattn.request import build_request

from ..helpers import make_inputs
from ..tolerances import FLOOR, GRADIENT_SUM_FACTOR, TOL

B, HQ, HKV, L, D = 1, 4, 2, 256, 32
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
FEATURES = {
    "causal": dict(causal=True),
    "sinks": dict(sinks=torch.tensor([0.5, -1.0, 0.25, 0.0])),
    "alibi": dict(alibi=torch.tensor([0.25, 0.5, 0.125, 0.0625]), causal=True),
    "softcap": dict(softcap=20.0, causal=True),
    "window": dict(window=(24, 8)),
}
AUTO_FEATURES = ("sinks", "alibi", "softcap", "window")
"""Where "auto" must pick native at these shapes (the cells of the defect)."""


def tolerance(dtype: torch.dtype) -> float:
    """A transform against the eager call of the same backend: the same kernel on the same numbers, so float32's
    tolerance, or the half dtype's floor (one rounding of the output)."""
    return TOL["float32"] if dtype == torch.float32 else FLOOR[dtype]


def inputs(dtype: torch.dtype, seed: int = 0):
    return make_inputs(B, HQ, HKV, L, L, D, dtype=dtype, seed=seed)


def served(backend: str, dtype: torch.dtype) -> list[tuple[str, str]]:
    """(backend, feature) cells `backend` serves in `dtype` ("auto": the AUTO_FEATURES, where it must take native)."""
    q, k, v = inputs(dtype)
    names = AUTO_FEATURES if backend == "auto" else tuple(FEATURES)
    if backend == "auto":
        return [(backend, name) for name in names]
    return [
        (backend, n) for n in names if kernels.BACKENDS[backend].refuse(build_request(q, k, v, **FEATURES[n])) is None
    ]


def auto_choices(dtype: torch.dtype) -> dict[str, str]:
    """The backend "auto" takes for each AUTO_FEATURES cell, eagerly."""
    q, k, v = inputs(dtype)
    return {n: kernels.choose(build_request(q, k, v, **FEATURES[n]), "auto").name for n in AUTO_FEATURES}


def run_all(cells):
    def run(q, k, v):
        return tuple(selfattn.attention(q, k, v, backend=b, **FEATURES[n]) for b, n in cells)

    return run


class _Module(torch.nn.Module):
    def __init__(self, run):
        super().__init__()
        self.run = run

    def forward(self, q, k, v):
        return self.run(q, k, v)


def _gap(got, want) -> float:
    return max(float((g.double() - w.double()).abs().max()) for g, w in zip(got, want, strict=True))


def check(cells, dtype: torch.dtype, transforms=("compile", "export", "vmap", "grad")) -> list[str]:
    """Each transform of `cells` against eager; the failures, each in one line (empty: all passed). "compile" first:
    run first in a process, it is that process's first call."""
    failures = []
    tol = tolerance(dtype)
    q, k, v = inputs(dtype)
    run = run_all(cells)
    for transform in transforms:
        try:
            if transform == "compile":
                torch._dynamo.reset()
                got = torch.compile(run_all(cells), fullgraph=True, backend="eager")(q, k, v)
                want = run(q, k, v)
            elif transform == "export":
                got = torch.export.export(_Module(run), (q, k, v)).module()(q, k, v)
                want = run(q, k, v)
            elif transform == "vmap":
                qs, ks, vs = (torch.stack(p) for p in zip(inputs(dtype, 1), inputs(dtype, 2), strict=True))
                got = [out[i] for out in vmap(run)(qs, ks, vs) for i in range(2)]  # cell by cell, entry by entry
                want = [run(qs[i], ks[i], vs[i])[c] for c in range(len(cells)) for i in range(2)]
            else:  # grad of a weighted sum, against eager autograd
                w = torch.randn(B, HQ, L, D, generator=torch.Generator().manual_seed(9)).to(dtype)

                def loss(q, k, v, w=w):
                    return sum((out.float() * w.float()).sum() for out in run(q, k, v))

                got = grad(loss, argnums=(0, 1, 2))(q, k, v)
                leaves = [t.clone().requires_grad_() for t in (q, k, v)]
                want = torch.autograd.grad(loss(*leaves), leaves)
                tol = tol * len(cells) * GRADIENT_SUM_FACTOR  # a gradient sums every cell's, over L keys
            gap = _gap(got, want)
            if not gap <= tol:
                failures.append(f"{transform} {dtype} {cells}: {gap:.3g} from eager (tolerance {tol:.3g})")
        except Exception as error:  # noqa: BLE001 - every failure is reported, with its cells
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            failures.append(f"{transform} {dtype} {cells}: {type(error).__name__}: {first}")
    return failures


def main(argv: list[str]) -> None:
    """`python -m tests.kernels.transform_cells float32,bfloat16`: for each dtype in order, native's and auto's cells
    compiled (the first dtype's compile is this process's first call), exported, vmapped and differentiated; then
    auto's eager choices. Prints {"failures": [...], "choices": {dtype: {feature: backend}}, "isa": ...}."""
    from selfattn.kernels import cpu

    failures, choices = [], {}
    for name in argv[0].split(","):
        dtype = DTYPES[name]
        failures += check(served("native", dtype) + served("auto", dtype), dtype)
        choices[name] = auto_choices(dtype)
    print(json.dumps({"failures": failures, "choices": choices, "isa": cpu.name()}))


if __name__ == "__main__":
    main(sys.argv[1:])
