"""`selfattn bench --case bf16`: `explain` of a model in bfloat16 against transformers eager in bfloat16 with
`output_attentions`, peak resident memory and time side by side (a benchmark, not a test).

    run_bf16_case(quick=False) -> {"rows": [{mode, seconds, peak_bytes, extra_bytes}], "ratios": {...}, ...}

The model is the Qwen2.5-3B configuration (36 layers × 16 heads, GQA 16/2, d_model 2048, vocabulary 151,936:
about 3.1 billion parameters, 6.2 GB in bfloat16) with random bfloat16 weights, built offline from `Qwen2Config`
straight in bfloat16 (never in float32); the text is 256 tokens. `quick`: the same widths with 2 layers.
Each mode runs in a fresh process, measured as `explain_case` measures (one warm-up call, then one timed call;
peak = VmHWM during the call). The target of issue 26: explain's peak ≤ TARGET_RATIO × eager's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from .explain_case import INIT_STD, WARM_UP, _best, _tokenizer_and_text

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
    rows = [_best(mode, measured) for mode, measured in runs.items()]
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
    if not os.path.exists("/proc/self/clear_refs"):
        return {"mode": spec["mode"], "error": "needs Linux /proc/self/clear_refs"}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    code = "from selfattn.bench.bf16_case import child_main; child_main()"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(spec)],
            capture_output=True,
            text=True,
            env=env,
            timeout=CHILD_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        return {"mode": spec["mode"], "error": f"timed out after {CHILD_TIMEOUT_SECONDS} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"mode": spec["mode"], "error": f"measuring process failed: {tail}"}
    return json.loads(lines[-1])


def _model(config: dict, attn: str):
    """The configuration with random bfloat16 weights (one seed), built in bfloat16, attention `attn`."""
    import torch
    import transformers
    from transformers.initialization import no_init_weights

    from .. import hf

    hf.register()
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # allocated in bfloat16: a float32 copy would double the peak
    try:
        with no_init_weights():
            model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**config, dtype="bfloat16"))
    finally:
        torch.set_default_dtype(default)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0.0, INIT_STD)
            else:
                p.fill_(1.0 if "norm" in name else 0.0)
    model.set_attn_implementation(attn)
    return model.eval()


def child_main() -> None:
    """A measuring process: argv[1] is the JSON spec; prints one JSON line."""
    import torch

    from .memory import _status_kib, peak_extra_bytes

    spec = json.loads(sys.argv[1])
    config, length = (QUICK, QUICK_LENGTH) if spec["quick"] else (QWEN_3B, LENGTH)
    tok, text = _tokenizer_and_text(length)
    mode = spec["mode"]
    model = _model(config, "eager" if mode == "eager" else "selfattn")
    ids = tok(text, return_tensors="pt")["input_ids"]
    if mode == "eager":

        def call(n=None):
            with torch.no_grad():
                out = model(ids[:, :n] if n else ids, output_attentions=True, use_cache=False)
            return out.logits, out.attentions
    else:
        from ..explainer.session import Explainer

        ex = Explainer.from_transformers(model, tok, name="Qwen2.5-3B configuration")

        def call(n=None):
            return ex.explain(text if n is None else text[: n * 4])

    call(WARM_UP)
    box = {}

    def timed():
        start = time.perf_counter()
        box["out"] = call()
        box["seconds"] = time.perf_counter() - start

    before = _status_kib("VmRSS") * 1024
    _, extra = peak_extra_bytes(timed)
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    print(
        json.dumps(
            {
                "mode": mode,
                "dtype": dtype,
                "tokens": int(ids.shape[1]),
                "seconds": box["seconds"],
                "peak_bytes": before + extra,
                "extra_bytes": extra,
            }
        )
    )


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
    console.print(table)
    r = result["ratios"]
    if r:
        console.print(f"explain / eager: time {r['time']:.2f}×, peak {r['peak']:.2f}×")
