"""The `selfattn` command: parse arguments, call the library, print. Nothing else lives here.

Every command that prints numbers has a `--json` twin. All printing is here or in the render
modules only this file calls (`selfattn.render.*`, `selfattn.bench.render`, `selfattn.explain.tables`);
the library returns data.

Errors, one format for every command:

    bad argument (argparse)                      selfattn COMMAND: error: MESSAGE      exit 2
    refused input or file (ValueError, OSError)  selfattn COMMAND: error: MESSAGE      exit 1
    anything else (a bug)                        the traceback, then a line asking     exit 1
                                                 to report it

The CLI checks the type and range of every argument itself, so the library only ever sees values of
the right type: a ValueError from it is a refusal of the user's input (an empty text, a layer that
does not exist, a broken checkpoint file), an OSError a file that cannot be read or written. A
TypeError, KeyError or anything else coming back is a bug, and is shown as one, with its traceback.
Paths and texts the user gave are never read as rich markup.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import traceback
from functools import partial
from pathlib import Path

from . import __version__, checks
from .limits import MAX_LOAD, MAX_SEED, MAX_THREADS, TEMPERATURE_RANGE
from .terminal import printable

REPORT = (
    "this is a bug in selfattn, not a problem with your input; please report it with the command and "
    "the traceback above"
)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


def _print_json(doc, indent: int | None = None) -> None:
    """`doc` as standard JSON on stdout: NaN or infinity are refused (ValueError), never printed bare."""
    print(json.dumps(doc, ensure_ascii=False, indent=indent, allow_nan=False))


def _console():
    from rich.console import Console

    return Console(highlight=False)


# --- commands --------------------------------------------------------------------------------------------------


def _walkthrough(args) -> int:
    from . import walkthrough

    doc = walkthrough.build(lang=args.lang, d_k=args.d_k, seed=args.seed)
    if args.json:
        _print_json(doc, indent=2)
    else:
        from .render.walkthrough import render

        render(doc, _console())
    return 0


def _check_explain_outputs(args) -> None:
    """Every file `explain` will write, checked before the model is loaded: nothing is computed for nothing."""
    from .files import check_writable
    from .model.checkpoint import check_creatable

    for path in (args.npz, args.html):
        if path is not None:
            check_writable(path, force=args.force)
    if args.plots is not None:  # plots.save creates the folder and its parents
        folder = Path(args.plots)
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(f"--plots {folder} is a file; give a folder")
        check_creatable(folder / "grid.png", force=args.force)


def _write_npz(doc: dict, path: str, force: bool) -> None:
    """Every captured tensor into `path` itself (NumPy would add ".npz" to a name without it), atomically."""
    import numpy as np

    from .explain.export import to_arrays
    from .files import write_atomic

    buffer = io.BytesIO()
    np.savez_compressed(buffer, **to_arrays(doc))
    write_atomic(path, buffer.getvalue(), force=force)


def _explain(args) -> int:
    from .explain.session import Explainer
    from .explain.trace import Intervention

    _check_explain_outputs(args)
    explainer = Explainer.load(args.model)
    intervention = Intervention(
        scaling=not args.no_scaling,
        causal=not args.no_causal,
        temperature=args.temperature,
        layer=args.only_layer,
        head=args.only_head,
    )
    doc = explainer.explain(args.text, layer=args.layer, head=args.head, intervention=intervention, find=args.find)
    if args.npz:
        _write_npz(doc, args.npz, args.force)
    if args.html:
        from .explain.views.report import write_html

        write_html(doc, args.html, force=args.force)
    written = []
    if args.plots:
        from .explain import plots

        written = plots.save(doc, args.plots, force=args.force, lang=args.lang)
    if args.json:
        _print_json(doc)
        return 0
    from .explain import tables

    console = _console()
    tables.render(doc, console, lang=args.lang)
    for path in [args.npz, args.html, *written]:
        if path:
            console.print(f"→ {printable(path)}", markup=False)
    return 0


def _train(args) -> int:
    from .model.train import run_training
    from .render.train import format_train_summary

    summary = run_training(
        args.preset,
        args.out,
        seed=args.seed,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        plot=args.plot,
        force=args.force,
        progress=not args.no_progress,
        threads=args.threads,
    )
    if args.json:
        _print_json(summary, indent=2)
    else:
        print(format_train_summary(summary))
    return 0


def _generate(args) -> int:
    from .explain.session import check_text  # generate refuses the texts explain refuses
    from .model.checkpoint import load_checkpoint, load_default
    from .model.generate import generate_text
    from .render.generate import format_generation

    text = check_text(args.text)
    lm, tokenizer, _ = load_default() if args.model is None else load_checkpoint(args.model)
    gen = generate_text(
        lm,
        tokenizer,
        text,
        args.max_new_tokens,
        greedy=args.greedy,
        temperature=args.temperature,
        top_k=args.top_k,
        seed=args.seed,
        use_cache=not args.no_cache,
    )
    if args.json:
        _print_json({**gen.to_dict(), "model": args.model or "default"}, indent=2)
    else:
        print(format_generation(gen))
    return 0


def _bench(args) -> int:
    from . import bench

    if args.explain:
        from .bench.cases import EXTRA_CASES, select, split_names
        from .bench.dispatch import explain_case

        kernel_names, extra_names = split_names(args.case)
        parts = [explain_case(case) for case in select(kernel_names, args.quick)]
        parts += [f"{name}: {EXTRA_CASES[name]}\n  no single attention call to explain" for name in extra_names]
        print("\n\n".join(parts))
        return 0
    console = None if args.json else _console()

    def progress(name: str, what: str) -> None:
        console.print(f"measuring {name} ({what})…", style="dim", markup=False)

    result = bench.run(
        args.case,
        quick=args.quick,
        threads=args.threads,
        measure_memory=not args.no_memory,
        load=args.load,
        progress=None if args.json else progress,
    )
    if args.json:
        _print_json(result, indent=1)
    else:
        bench.render(result, console)
    return 0


def _vocab(args) -> int:
    from .explain.session import vocabulary

    words = vocabulary(args.model)
    if args.json:
        _print_json({"model": args.model or "default", "size": len(words), "tokens": words})
    else:
        print(f"{len(words)} tokens: " + " ".join(words))
    return 0


def _serve(args) -> int:
    from .explain.server import serve
    from .explain.session import Explainer

    serve(Explainer.load(args.model), host=args.host, port=args.port)
    return 0


# --- arguments -------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="selfattn", description="Self-attention, exact and explainable.")
    parser.add_argument("--version", action="version", version=f"selfattn {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = commands.add_parser("walkthrough", help="the tutorial, executed step by step on 一只/蓝色/怪兽/走进/森林")
    p.add_argument("--lang", choices=["zh", "en"], default="zh", help="language of the text (default: zh)")
    p.add_argument(
        "--d-k",
        type=_positive_int,
        default=4,
        dest="d_k",
        help="the d_k used to scale the tutorial's score table (default: 4)",
    )
    p.add_argument("--seed", type=_seed, default=0, help="seed of the random 10×128 run (default: 0)")
    p.add_argument("--json", action="store_true", help="print the same content as JSON")
    p.set_defaults(run=_walkthrough)

    p = commands.add_parser("explain", help="a real model's attention on your sentence: tables, pictures, HTML")
    p.add_argument("text", nargs="?", default="一只蓝色怪兽走进森林", help="the text (default: 一只蓝色怪兽走进森林)")
    p.add_argument(
        "--model",
        metavar="PATH_OR_ID",
        help="a selfattn checkpoint, a local transformers folder (Llama, Qwen2/3, Mistral, Gemma2, GPT-2, "
        "BERT) or a hub id such as Qwen/Qwen2.5-0.5B (default: the bundled model, offline)",
    )
    p.add_argument("--layer", type=_non_negative_int, help="layer to show (default: picked by a rule, printed)")
    p.add_argument("--head", type=_non_negative_int, help="head to show (default: picked by a rule, printed)")
    p.add_argument("--lang", choices=["zh", "en"], default="zh", help="language of the tables (default: zh)")
    p.add_argument("--no-scaling", action="store_true", help="intervene: do not divide the scores by √d_k")
    p.add_argument("--no-causal", action="store_true", help="intervene: let a decoder look at future tokens")
    p.add_argument(
        "--temperature",
        type=_temperature,
        default=1.0,
        help="intervene: softmax temperature, 0.01 to 100 (default 1)",
    )
    p.add_argument(
        "--only-layer",
        type=_non_negative_int,
        dest="only_layer",
        metavar="L",
        help="apply the interventions in layer L only (default: every layer)",
    )
    p.add_argument(
        "--only-head",
        type=_non_negative_int,
        dest="only_head",
        metavar="H",
        help="apply the interventions to head H only (with --only-layer: that one head)",
    )
    p.add_argument(
        "--find",
        nargs=2,
        metavar=("QUERY", "KEY"),
        help="head search: rank every head by the weight from token QUERY to token KEY (e.g. --find 走进 怪兽)",
    )
    p.add_argument("--json", action="store_true", help="print every captured tensor as JSON instead of tables")
    p.add_argument("--npz", metavar="FILE", help="also save every captured tensor to FILE (.npz)")
    p.add_argument("--html", metavar="FILE", help="also write the self-contained HTML report to FILE")
    p.add_argument("--plots", metavar="DIR", help="also save heatmaps (PNG and SVG) into DIR")
    p.add_argument("--force", action="store_true", help="overwrite files that already exist")
    p.set_defaults(run=_explain)

    p = commands.add_parser("train", help="train a decoder-only model on the corpus of the tutorial's sentences")
    p.add_argument(
        "--preset", choices=["tiny", "default"], default="default", help="model and schedule (default: default)"
    )
    p.add_argument("--out", default="out/model", help="checkpoint folder to write (default: out/model)")
    p.add_argument("--seed", type=_seed, default=0, help="seed of corpus, init and batches (default: 0)")
    p.add_argument(
        "--epochs", type=_positive_int, help="epochs (of the last stage, for staged presets; default: the preset's)"
    )
    p.add_argument("--batch-size", type=_positive_int, dest="batch_size", help="batch size (default: the preset's)")
    p.add_argument("--lr", type=_lr, help="peak learning rate, below 1 (default: the preset's)")
    p.add_argument(
        "--plot", metavar="PNG", help="loss-curve picture (default: OUT/loss_curve.png; kept unless --force)"
    )
    p.add_argument("--threads", type=_threads, default=1, help="torch threads (default: 1)")
    p.add_argument("--force", action="store_true", help="overwrite an existing checkpoint in OUT and the picture")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the training summary as JSON")
    p.set_defaults(run=_train)

    p = commands.add_parser("generate", help="continue a text with the default model (or --model PATH)")
    p.add_argument("text", help="the beginning, e.g. 一只蓝色")
    p.add_argument("--model", metavar="PATH", help="a checkpoint folder (default: the bundled model)")
    p.add_argument("--max-new-tokens", type=_positive_int, default=40, dest="max_new_tokens", help="(default: 40)")
    p.add_argument("--greedy", action="store_true", help="always take the most likely token")
    p.add_argument(
        "--temperature",
        type=_temperature,
        default=1.0,
        help="sampling temperature, 0.01 to 100 (default: 1; --greedy for the limit 0)",
    )
    p.add_argument("--top-k", type=_positive_int, dest="top_k", help="sample among the k most likely tokens")
    p.add_argument("--seed", type=_seed, default=0, help="sampling seed (default: 0)")
    p.add_argument("--no-cache", action="store_true", help="recompute the whole prefix each step (no KV cache)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=_generate)

    p = commands.add_parser("bench", help="benchmarks: each backend against PyTorch SDPA and the machine's GEMM peak")
    p.add_argument(
        "--case",
        action="append",
        metavar="NAME",
        help="run only this case (repeatable; default: every kernel case; 'hf' (a transformers model) "
        "and 'ring' (several processes) run only when named; an unknown name lists the cases)",
    )
    p.add_argument("--quick", action="store_true", help="small sizes: the whole suite in well under a minute")
    p.add_argument("--threads", type=_threads, help="torch threads (default: torch's default)")
    p.add_argument(
        "--load",
        type=_load,
        default=0,
        metavar="N",
        help="run N busy processes (one core each) during the run, for reproducible busy-core ratios",
    )
    p.add_argument(
        "--explain",
        action="store_true",
        help="measure nothing: print how each case's request is dispatched (estimates, refusals, choice)",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement (one process per row)")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON")
    p.set_defaults(run=_bench)

    p = commands.add_parser("vocab", help="the words a selfattn model knows (others become <unk>)")
    p.add_argument("--model", metavar="PATH", help="a selfattn checkpoint folder (default: the bundled model)")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(run=_vocab)

    p = commands.add_parser("serve", help="the local web app: type a sentence, see and intervene in its attention")
    p.add_argument("--model", metavar="PATH", help="a checkpoint folder (default: the bundled model)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=_port, default=8000, help="port (default: 8000)")
    p.set_defaults(run=_serve)
    return parser


def _number(
    kind: type,
    *,
    low: float,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    what: str = "",
):
    """An argparse type: `kind` (int or float) within the bounds (closed unless `low_open` / `high_open`).

    The bounds are checked by `checks.integer` / `checks.real`, the library's own rule; a refusal becomes
    argparse's one line "expected WHAT, got 'TEXT'" (exit 2). A float text that is not a finite number (or
    not positive, for a positive range) is told so ("expected a finite number > 0"), not given the range.
    """
    if kind is int:
        if low_open or high_open:
            raise ValueError("an integer range is written closed: use low + 1 or high - 1")
        check = partial(checks.integer, "value", low=low, high=high)
        what = what or f"an integer >= {low}"
        not_number = what
    else:
        check = partial(checks.real, "value", low=low, high=high, low_open=low_open, high_open=high_open)
        positive = low > 0 or (low == 0 and low_open)
        not_number = "a finite number > 0" if positive else "a finite number"
        what = what or not_number

    def parse(text: str):
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"expected {not_number}, got {text!r}") from None
        if kind is float and (not math.isfinite(value) or (positive and value <= 0)):
            raise argparse.ArgumentTypeError(f"expected {not_number}, got {text!r}")
        try:
            return check(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None

    return parse


MIN_TEMPERATURE, MAX_TEMPERATURE = TEMPERATURE_RANGE

_positive_int = _number(int, low=1, what="a positive integer")
_non_negative_int = _number(int, low=0)
_port = _number(int, low=1, high=65535, what="a port in [1, 65535]")
_seed = _number(int, low=0, high=MAX_SEED, what=f"an integer in [0, {MAX_SEED}]")
_threads = _number(int, low=1, high=MAX_THREADS, what=f"an integer in [1, {MAX_THREADS}]")
_load = _number(int, low=0, high=MAX_LOAD, what=f"an integer in [0, {MAX_LOAD}]")
_lr = _number(float, low=0, low_open=True, high=1, high_open=True, what="a learning rate in (0, 1)")
_temperature = _number(
    float,
    low=MIN_TEMPERATURE,
    high=MAX_TEMPERATURE,
    what=f"a temperature in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}]",
)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except BrokenPipeError:  # `selfattn ... | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print(f"selfattn {args.command}: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError) as exc:  # a refused input or file: one line, no raw control character
        print(f"selfattn {args.command}: error: {printable(exc)}", file=sys.stderr)
        return 1
    except Exception:  # a bug: its traceback, and what to do about it
        traceback.print_exc()
        print(f"selfattn {args.command}: internal error: {REPORT}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
