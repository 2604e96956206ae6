"""`selfattn bench --case explain`: `selfattn explain` at real size against transformers eager with
`output_attentions`, time and peak memory side by side (a benchmark, not a test).

    run_explain_case(quick=False) -> {"rows": [{mode, seconds, peak_bytes, extra_bytes}], "ratios": {...}, ...}

The model is the Qwen2.5-0.5B configuration (24 layers × 14 heads, GQA 14/2, d_model 896, vocabulary
151,936) with random weights, built offline from `Qwen2Config`; the text is 512 tokens. Each mode runs
in a fresh process (`memory`'s method: the model built and a short warm-up call made first, freed heap
handed back, the peak reset through /proc/self/clear_refs, then one timed call):

    eager      model(ids, output_attentions=True): transformers' own attention weights, every layer × head
    explain    pipeline.explain(text) and its page document: capture, summaries, head descriptions (what
               `selfattn explain` computes before it prints), model attn_implementation "selfattn"; then,
               timed apart, the terminal tables drawn into a console that discards them (tables_seconds) and
               the page of `--html` rendered (page_seconds, page_bytes)

Both modes build the same weights (one seed). Ratios are explain's over eager's; the targets
are ≤ TARGET_RATIO in time and in peak memory. With `--load N` the busy processes run throughout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import cast

from .. import checks
from .timing import best_row

__all__ = ["run_explain_case", "render_explain", "child_main", "MODES", "ROUNDS", "TARGET_RATIO", "QWEN_05B"]

TARGET_RATIO = 1.3
MODES = ("eager", "explain")
ROUNDS = 2
QWEN_05B = dict(
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    tie_word_embeddings=True,
)
"""Qwen2.5-0.5B's configuration (its config.json's sizes)."""
QUICK = dict(QWEN_05B, num_hidden_layers=4, vocab_size=32000)
LENGTH, QUICK_LENGTH = 512, 128
WARM_UP = 16
"""Tokens of the warm-up call that initialises libraries before measuring."""
CHILD_TIMEOUT_SECONDS = 1800
INIT_STD = 0.02
WORDS = (
    "the blue monster walks into the forest while two red fish swim into the sea and a small cat sleeps in "
    "the warm house because the long day was over"
).split()


def run_explain_case(quick: bool = False, *, threads: int | None = None, rounds: int = ROUNDS) -> dict:
    """MODES in fresh processes, taking turns `rounds` times (a busy moment of the machine hits both
    alike); per mode the best time and the smallest peak, and explain's ratios over eager."""
    checks.boolean("quick", quick)
    rounds = checks.integer("rounds", rounds, low=1, high=10)
    import torch

    threads = checks.optional_integer("threads", threads, low=1) or torch.get_num_threads()
    spec = {"quick": quick, "threads": threads}
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            runs[mode].append(_measure(dict(spec, mode=mode)))
    rows = [best_row(measured, ("peak_bytes", "extra_bytes")) for measured in runs.values()]
    eager, explain = rows
    ratios = {}
    if not (eager.get("error") or explain.get("error")):
        ratios = {
            "time": explain["seconds"] / eager["seconds"],
            "time_with_tables": (explain["seconds"] + explain["tables_seconds"]) / eager["seconds"],
            "time_with_page": (explain["seconds"] + explain["page_seconds"]) / eager["seconds"],
            "peak": explain["peak_bytes"] / eager["peak_bytes"],
            "extra": explain["extra_bytes"] / max(1, eager["extra_bytes"]),
        }
    config = QUICK if quick else QWEN_05B
    return {
        "case": "explain",
        "model": "Qwen2.5-0.5B configuration, random weights" + (" (quick: 4 layers, vocab 32,000)" if quick else ""),
        "config": config,
        "length": QUICK_LENGTH if quick else LENGTH,
        "threads": threads,
        "rounds": rounds,
        "rows": rows,
        "ratios": ratios,
        "target_ratio": TARGET_RATIO,
        "method": "per mode, fresh processes taking turns; in each, one timed call after a warm-up; peak = VmHWM "
        "during the call, extra = peak minus VmRSS before it (the model and its inputs); best of the rounds",
    }


def _measure(spec: dict) -> dict:
    return measure_in_child(spec, "explain_case", CHILD_TIMEOUT_SECONDS)


def measure_in_child(spec: dict, case: str, timeout: float) -> dict:
    """Run `selfattn.bench.<case>.child_main` in a fresh process on the JSON `spec`; its one JSON line, or
    {"mode", "error"} saying why there is none."""
    if not os.path.exists("/proc/self/clear_refs"):
        return {"mode": spec["mode"], "error": "needs Linux /proc/self/clear_refs"}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    code = f"from selfattn.bench.{case} import child_main; child_main()"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(spec)],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"mode": spec["mode"], "error": f"timed out after {timeout} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"mode": spec["mode"], "error": f"measuring process failed: {tail}"}
    return json.loads(lines[-1])


def _model(config: dict, attn: str, dtype=None):
    """The configuration with random weights (one seed: the same in every process), attention `attn`;
    `dtype` (a torch dtype): allocated in it from the start (a float32 copy first would double the peak)."""
    import torch
    import transformers
    from transformers.initialization import no_init_weights

    from .. import hf

    hf.register()
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    if dtype is not None:
        torch.set_default_dtype(dtype)
    try:
        with no_init_weights():
            given = config if dtype is None else dict(config, dtype=str(dtype).removeprefix("torch."))
            model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**given))
    finally:
        torch.set_default_dtype(default)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0.0, INIT_STD)
            else:  # norms' gains 1, biases 0
                p.fill_(1.0 if "norm" in name else 0.0)
    model.set_attn_implementation(attn)
    return model.eval()


def eager_call(model, ids):
    """transformers' own attention weights of `ids` (its first n tokens: call(n)), every layer × head."""
    import torch

    def call(n=None):
        with torch.no_grad():
            out = model(ids[:, :n] if n else ids, output_attentions=True, use_cache=False)
        return out.logits, out.attentions

    return call


def timed_peak(call) -> tuple[object, float, int, int]:
    """(what call() returns, its seconds, the peak resident bytes during it, the part above the resident
    bytes before it), by `memory.peak_extra_bytes`."""
    from .memory import _status_kib, peak_extra_bytes

    box: dict = {}

    def timed():
        start = time.perf_counter()
        box["out"] = call()
        box["seconds"] = time.perf_counter() - start

    before = _status_kib("VmRSS") * 1024
    _, extra = peak_extra_bytes(timed)
    return box["out"], box["seconds"], before + extra, extra


def _tokenizer_and_text(length: int):
    """A byte-level BPE trained here on WORDS, and a text of exactly `length` tokens in it."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([" ".join(WORDS)] * 20, vocab_size=300, min_frequency=1, show_progress=False)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe)
    text = " ".join(WORDS * (length // len(WORDS) + 2))
    enc = tok(text, return_offsets_mapping=True)
    return tok, text[: enc["offset_mapping"][length - 1][1]]


def child_main() -> None:
    """Entry point of a measuring process: argv[1] is the JSON spec; prints one JSON line."""
    import torch

    spec = json.loads(sys.argv[1])
    torch.set_num_threads(spec["threads"])
    config, length = (QUICK, QUICK_LENGTH) if spec["quick"] else (QWEN_05B, LENGTH)
    tok, text = _tokenizer_and_text(length)
    mode = spec["mode"]
    model = _model(config, "eager" if mode == "eager" else "selfattn")
    ids = tok(text, return_tensors="pt")["input_ids"]
    render = None
    if mode == "eager":
        call = eager_call(model, ids)
    else:
        from rich.console import Console

        from ..explainer.pipeline import Session, Spec
        from ..explainer.session import Explainer
        from ..explainer.views import tables

        ex = Explainer.from_transformers(model, tok, name="Qwen2.5-0.5B configuration")

        def call(n=None):
            session = Session(ex)
            e = session.explain(Spec(text if n is None else " ".join(WORDS[:n])))
            return e, session.document(e)

        def render(answer):
            e, _ = answer
            with open(os.devnull, "w") as sink:
                tables.render(e, Console(file=sink, width=100), lang="en")

    if render is not None:
        render(call(WARM_UP))
    else:
        call(WARM_UP)
    out, seconds, peak, extra = timed_peak(call)
    row = {"mode": mode, "tokens": int(ids.shape[1]), "seconds": seconds, "peak_bytes": peak, "extra_bytes": extra}
    if render is not None:
        start = time.perf_counter()
        render(out)
        row["tables_seconds"] = time.perf_counter() - start
        from ..explainer.views import checkable, report

        start = time.perf_counter()
        explained, page_doc = cast("tuple", out)  # explain's Explanation and the page's document
        page = report.render_html(page_doc)
        row["page_seconds"] = time.perf_counter() - start
        row["page_bytes"] = len(page.encode())
        row["json_bytes"] = len(
            json.dumps(checkable.json_document(explained), ensure_ascii=False, allow_nan=False).encode()
        )
    print(json.dumps(row))


def render_explain(result: dict, console) -> None:
    """The table of the explain case: each mode's time and memory, and explain's ratios over eager."""
    from rich.table import Table

    table = Table(
        title=f"explain: {result['model']}, {result['length']} tokens, {result['threads']} threads, "
        f"best of {result['rounds']}",
        title_justify="left",
        caption="× eager: explain over transformers eager with output_attentions (target ≤ "
        f"{result['target_ratio']}); peak: resident memory during the call, extra: above the model",
        caption_justify="left",
    )
    for column in ("mode", "s", "peak MiB", "extra MiB", "× eager time", "× eager peak"):
        table.add_column(column, justify="left" if column == "mode" else "right", no_wrap=True)
    r = result["ratios"]
    for row in result["rows"]:
        if row.get("error"):
            table.add_row(row["mode"], row["error"], "", "", "", "")
            continue
        mine = row["mode"] == "explain" and r
        table.add_row(
            row["mode"],
            f"{row['seconds']:.2f}",
            f"{row['peak_bytes'] / 2**20:.0f}",
            f"{row['extra_bytes'] / 2**20:.0f}",
            f"{r['time']:.2f}" if mine else "—",
            f"{r['peak']:.2f}" if mine else "—",
        )
    from .table_output import show

    show(console, table)
    explain = next((row for row in result["rows"] if row["mode"] == "explain" and not row.get("error")), None)
    if explain is not None and r:
        console.print(
            f"  tables drawn in {explain['tables_seconds']:.2f} s more (× eager with them: "
            f"{r['time_with_tables']:.2f}); --json of this explanation: {explain['json_bytes'] / 2**20:.1f} MiB"
        )
        console.print(
            f"  the page (--html) written in {explain['page_seconds']:.2f} s more (× eager with it: "
            f"{r['time_with_page']:.2f}), {explain['page_bytes'] / 1e6:.1f} MB"
        )
