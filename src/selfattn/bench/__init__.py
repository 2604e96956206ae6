"""`selfattn bench`: how fast each backend is, as ratios measured in one run (not a test).

from selfattn import bench
result = bench.run()                                  # the numbers, as a dict (what --json prints)
result = bench.run(["decode"], quick=True, load=2)    # under 2 busy processes
bench.render(result, console)                         # the tables the CLI prints

runner   run(): the cases, the GEMM peak before and after, the busy-machine warnings
cases    what is measured, at which size, against which backends
timing   best-of-n wall-clock timing, backends taking turns
peak     the machine's fp32 GEMM rate: the yardstick for "% peak"
memory   peak extra memory of one call, in a fresh process
load     N busy processes during the run (`--load N`), so busy-core ratios are reproducible
render   the tables (called by the CLI; `run` prints nothing)
tables   show(): a table printed whole, into a file at its own width, folded on a narrow terminal
"""

from __future__ import annotations

from .cases import CASES
from .render import render
from .runner import run

__all__ = ["run", "render", "CASES"]
