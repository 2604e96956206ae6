"""`selfattn bench --case bf16`: `explain` of a model in bfloat16 against transformers eager in bfloat16 with
`output_attentions`, peak resident memory and time side by side (a benchmark, not a test).

    run_bf16_case(quick=False) -> {"rows": [{mode, seconds, peak_bytes, extra_bytes}], "ratios": {...}, ...}

The model is the Qwen2.5-3B configuration (36 layers × 16 heads, GQA 16/2, d_model 2048, vocabulary 151,936:
about 3.1 billion parameters, 6.2 GB in bfloat16) with random bfloat16 weights, built offline from `Qwen2Config`
straight in bfloat16 (never in float32); the text is 256 tokens. `quick`: the same widths with 2 layers.
Each mode runs in a fresh process, measured as `explain_case` measures (one warm-up call, then one timed call;
peak = VmHWM during the call). The target: explain's peak ≤ TARGET_RATIO × eager's.
"""

from __future__ import annotations

import json
import sys

from .explain_case import WARM_UP, _model, _tokenizer_and_text, eager_call, measure_in_child, timed_peak
from .timing import best_row

__all__ = ["run_bf16_case", "render_bf16", "child_main", "QWEN_3B", "TARGET_RATIO", "MODES"]

TARGET_RATIO = 1.3
MODES = ("eager", "explain")
QWEN_3B = dict(
    vocab_size=151936,
    hidden_size=2048,
    intermediate_size=11008,
    num_hidden_layers=36,
    num_attention_heads=16,
    num_key_value_heads=2,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    tie_word_embeddings=True,
)
"""Qwen2.5-3B's configuration (its config.json's sizes)."""
QUICK = dict(QWEN_3B, num_hidden_layers=2)
LENGTH, QUICK_LENGTH = 256, 64
CHILD_TIMEOUT_SECONDS = 3600


def run_bf16_case(quick: bool = False, *, rounds: int = 1) -> dict:
    """MODES in fresh processes, taking turns `rounds` times; explain's ratios over eager."""
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            runs[mode].append(_measure({"quick": quick, "mode": mode}))
    rows = [best_row(measured, ("peak_bytes", "extra_bytes")) for measured in runs.values()]
    eager, explain = rows
    ratios = {}
    if not (eager.get("error") or explain.get("error")):
        ratios = {"time": explain["seconds"] / eager["seconds"], "peak": explain["peak_bytes"] / eager["peak_bytes"]}
    return {
        "case": "bf16",
        "model": "Qwen2.5-3B configuration, random bfloat16 weights" + (" (quick: 2 layers)" if quick else ""),
        "length": QUICK_LENGTH if quick else LENGTH,
        "rows": rows,
        "ratios": ratios,
        "target_ratio": TARGET_RATIO,
    }


def _measure(spec: dict) -> dict:
    return measure_in_child(spec, "bf16_case", CHILD_TIMEOUT_SECONDS)


def child_main() -> None:
    """A measuring process: argv[1] is the JSON spec; prints one JSON line."""
    import torch

    spec = json.loads(sys.argv[1])
    config, length = (QUICK, QUICK_LENGTH) if spec["quick"] else (QWEN_3B, LENGTH)
    tok, text = _tokenizer_and_text(length)
    mode = spec["mode"]
    model = _model(config, "eager" if mode == "eager" else "selfattn", dtype=torch.bfloat16)
    ids = tok(text, return_tensors="pt")["input_ids"]
    if mode == "eager":
        call = eager_call(model, ids)
    else:
        from ..explainer.pipeline import Session, Spec
        from ..explainer.session import Explainer

        ex = Explainer.from_transformers(model, tok, name="Qwen2.5-3B configuration")

        def call(n=None):
            session = Session(ex)
            return session.document(session.explain(Spec(text if n is None else text[: n * 4])))

    call(WARM_UP)
    _, seconds, peak, extra = timed_peak(call)
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    row = {"mode": mode, "dtype": dtype, "tokens": int(ids.shape[1]), "seconds": seconds}
    print(json.dumps(row | {"peak_bytes": peak, "extra_bytes": extra}))


def render_bf16(result: dict, console) -> None:
    """Each mode's time and peak memory, and explain's ratios over eager."""
    from rich.table import Table

    table = Table(
        title=f"bf16: {result['model']}, {result['length']} tokens",
        caption=f"× eager: explain over transformers eager in bfloat16 (target peak ≤ {result['target_ratio']})",
    )
    for column in ("mode", "s", "peak MiB", "extra MiB"):
        table.add_column(column)
    for row in result["rows"]:
        if row.get("error"):
            table.add_row(row["mode"], row["error"], "", "")
            continue
        table.add_row(
            row["mode"],
            f"{row['seconds']:.1f}",
            f"{row['peak_bytes'] / 2**20:.0f}",
            f"{row['extra_bytes'] / 2**20:.0f}",
        )
    from .table_output import show

    show(console, table)
    r = result["ratios"]
    if r:
        console.print(f"explain / eager: time {r['time']:.2f}×, peak {r['peak']:.2f}×")
