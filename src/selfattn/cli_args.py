"""The arguments of every `selfattn` command: one function per command, each flag's type and range.

    build_parser(runs) -> argparse parser; `runs` maps a command name to the function that runs it (`cli`)

The flags of the interventions (`selfattn explain --no-scaling --temperature T --block QUERY KEY ...`) are
generated from the interventions' registry (`selfattn.explainer.interventions`): one flag per entry,
one argument per parameter, each parsed with the entry's type and range. The CLI checks the type and range
of every argument itself (`_number`), so the library only ever sees values of the right type.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from functools import partial
from typing import Any, cast

from . import __version__, checks
from .limits import DTYPE_BYTES, MAX_LOAD, MAX_SEED, MAX_THREADS, SIZES, TEMPERATURE_RANGE

__all__ = ["build_parser", "intervention_args", "dest", "flag_usage"]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(runs: dict) -> argparse.ArgumentParser:
    """The parser of every command; `runs[name](args) -> exit status` runs command `name` (`cli`)."""
    parser = _Parser(prog="selfattn", description="Self-attention, exact and explainable.")
    parser.add_argument("--version", action="version", version=f"selfattn {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for add in (
        _walkthrough_args,
        _explain_args,
        _heads_args,
        _train_args,
        _generate_args,
        _bench_args,
        _vocab_args,
        _serve_args,
    ):
        add(commands, runs)
    return parser


def _json_flag(p, what: str) -> None:
    p.add_argument("--json", action="store_true", help=what)


def _dtype_flag(p) -> None:
    p.add_argument(
        "--dtype",
        choices=list(DTYPE_BYTES),
        default="float32",
        help="what the model's weights are loaded in; the memory budget counts its bytes (default: float32)",
    )


def _walkthrough_args(commands, runs) -> None:
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
    _json_flag(p, "print the same content as JSON")
    p.set_defaults(run=runs["walkthrough"])


def _explain_args(commands, runs) -> None:
    p = commands.add_parser("explain", help="a real model's attention on your sentence: tables, pictures, HTML")
    p.add_argument("text", nargs="?", help="the text (default: 一只蓝色怪兽走进森林; none with --dataset)")
    p.add_argument(
        "--model",
        metavar="PATH_OR_ID",
        help="a selfattn checkpoint, a local transformers folder (Llama, Qwen2/3, Mistral, Gemma2, GPT-2, "
        "BERT) or a hub id such as Qwen/Qwen2.5-0.5B (default: the bundled model, offline)",
    )
    p.add_argument("--layer", type=_non_negative_int, help="layer to show (default: picked by a rule, printed)")
    p.add_argument("--head", type=_non_negative_int, help="head to show (default: picked by a rule, printed)")
    p.add_argument(
        "--layers",
        type=_layers_list,
        metavar="L,L,…",
        help="the layers whose arrays --html, --json and --npz hold in full, e.g. 3,18 or 0-5 (default: every "
        "layer when the page can hold them in 21 MB, else the shown layer and its neighbours; the output names "
        "the layers held). The model view draws every head either way",
    )
    p.add_argument("--lang", choices=["zh", "en"], default="zh", help="language of the tables (default: zh)")
    _dtype_flag(p)
    intervention_args(p)
    p.add_argument(
        "--find",
        nargs=2,
        metavar=("QUERY", "KEY"),
        help="head search: rank every head by the weight from token QUERY to token KEY (e.g. --find 走进 怪兽)",
    )
    experiment_args(p)
    bos_flag(p)
    _json_flag(p, "print every captured tensor as JSON instead of tables")
    p.add_argument(
        "--evidence",
        action="store_true",
        help="also print, for every credited tutorial relation, the sentences it rests on (text, control, contrasts) "
        "with the query word, key word, weight and what the other words give that key",
    )
    p.add_argument(
        "--every-head",
        action="store_true",
        help="also print every head's sentence (a 24-layer × 14-head model: 336 lines; always in --json)",
    )
    p.add_argument("--npz", metavar="FILE", help="also save every captured tensor to FILE (.npz)")
    p.add_argument("--html", metavar="FILE", help="also write the self-contained HTML report to FILE")
    p.add_argument(
        "--csv", metavar="FILE", help="also write one row per head (types, scores, experiments' effects) to FILE"
    )
    p.add_argument("--plots", metavar="DIR", help="also save heatmaps (PNG and SVG) into DIR")
    dataset_args(p, "explain every prompt (with --ablate, and patching where a row has a corrupted text)")
    p.add_argument("--force", action="store_true", help="overwrite files that already exist")
    p.set_defaults(run=runs["explain"])


def intervention_args(p) -> None:
    """One flag per entry of the interventions' registry (a switch: --no-scaling; with parameters:
    --temperature T, --block QUERY KEY), then the two that limit them to one layer / head."""
    from .explainer.interventions import REGISTRY

    for entry in REGISTRY.values():
        if not entry.cli:  # the CLI has a flag of its own for it (--ablate L.H,…: `_experiment_args`)
            continue
        flag = "--" + entry.name.replace("_", "-")
        if entry.params:
            p.add_argument(flag, action=_Values, entry=entry, dest=dest(entry.name), help=entry.help["en"])
        else:
            p.add_argument(flag, action="store_true", dest=dest(entry.name), help=entry.help["en"])
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


NEEDS = {
    "ablate_mode": ("--ablate-mode", ("--ablate",)),
    "target": ("--target", ("--patch", "--ablate")),
    "foil": ("--foil", ("--patch", "--ablate")),
    "reference": ("--reference", ("--ablate",)),
    "attribution": ("--attribution", ("--patch", "--dataset")),
    "out": ("--out", ("--dataset",)),
    "position": ("--position", ("--logit-lens",)),
}
"""dest: (flag, the flags it goes with): a flag given without any of them is refused (`cli._check_needs`)."""


def bos_flag(p) -> None:
    """--prepend-bos / --no-prepend-bos (`Explainer.bos`); neither: the model's default."""
    p.add_argument(
        "--prepend-bos",
        action=argparse.BooleanOptionalAction,
        default=None,
        dest="prepend_bos",
        help="put the model's BOS token before the text, as TransformerLens does (default: where the model has "
        "one and its tokenizer puts none); --no-prepend-bos: no BOS (the tokenizer's own left out too)",
    )


def experiment_args(p) -> None:
    """The experiments of `selfattn explain` (`selfattn.explainer.experiments`): ablation, patching, the lens."""
    p.add_argument(
        "--ablate",
        type=_heads_list,
        metavar="L.H[,L.H…]",
        help="ablate these heads (layer.head, from 0; e.g. 3.1,5.2): their output set to zero (or --ablate-mode "
        "mean), and the change in the next-token prediction and the loss said in a sentence",
    )
    p.add_argument(
        "--ablate-mode",
        choices=["zero", "mean"],
        dest="ablate_mode",
        help="with --ablate: replace the output by zero (default) or by its mean over the text (or --reference)",
    )
    p.add_argument(
        "--reference",
        metavar="FILE",
        help="with --ablate --ablate-mode mean: the mean is taken over every position of these texts (a UTF-8 "
        "file, one text per line) instead of the text's own",
    )
    p.add_argument(
        "--patch",
        metavar="CORRUPTED_TEXT",
        help="activation patching: each head's output (and each layer's residual per position) taken from the "
        "text into CORRUPTED_TEXT (the same token length); the share of the logit difference each recovers",
    )
    p.add_argument(
        "--attribution",
        action="store_const",
        const=True,
        help="with --patch: also estimate each head's share by attribution patching (two passes and one backward), "
        "shown beside the exact shares with their rank agreement",
    )
    p.add_argument(
        "--target",
        metavar="TOKEN",
        help="with --patch or --ablate: the target token of the logit difference target − foil at the last position "
        "(--patch default: the text's top prediction)",
    )
    p.add_argument(
        "--foil",
        metavar="TOKEN",
        help="with --patch or --ablate: the foil token (--patch default: CORRUPTED_TEXT's top prediction)",
    )
    p.add_argument(
        "--logit-lens",
        action="store_true",
        dest="logit_lens",
        help="the top next tokens after every layer at one position (the last, or --position P), as a table",
    )
    p.add_argument(
        "--position", type=_non_negative_int, metavar="P", help="with --logit-lens: the position (default: the last)"
    )


def _heads_list(text: str) -> list[tuple[int, int]]:
    from .explainer.experiments import parse_heads  # no torch at import: experiments imports it, so only here

    try:
        return parse_heads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _layers_list(text: str) -> list[int]:
    """--layers 3,18 or 0-5,9: the layer indices (each in [0, SIZES["layers"]): no model has more; the model's
    own count is checked once loaded). Each range is bounded before it is expanded."""
    out: set[int] = set()
    top = SIZES["layers"] - 1
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if not _decimal(low) or (high and not _decimal(high)):
            raise argparse.ArgumentTypeError(f"expected layers such as 3,18 or 0-5, got {text!r:.80} (at {part!r:.40})")
        for end in (low, high):
            if end and (len(end) > len(str(top)) or int(end) > top):
                raise argparse.ArgumentTypeError(
                    f"layer {end:.40} is past any model's: at most {SIZES['layers']} layers (0-{top}), in {text!r:.80}"
                )
        if high and int(high) < int(low):
            raise argparse.ArgumentTypeError(f"expected layers such as 3,18 or 0-5, got {text!r:.80} (at {part!r:.40})")
        out.update(range(int(low), int(high or low) + 1))
    return sorted(out)


def _decimal(text: str) -> bool:
    """Whether `text` is written in the digits 0-9 only (not "²", "٣" or "")."""
    return text.isascii() and text.isdecimal()


def _heads_args(commands, runs) -> None:
    p = commands.add_parser("heads", help="every head's type (previous-token, induction, sink, …) with its score")
    p.add_argument("text", nargs="?", help="also measure the heads on this text (its tutorial links included)")
    p.add_argument(
        "--model",
        metavar="PATH_OR_ID",
        help="a selfattn checkpoint, a transformers folder or a hub id, as for explain (default: the bundled model)",
    )
    p.add_argument("--lang", choices=["zh", "en"], default="zh", help="language of the table (default: zh)")
    _dtype_flag(p)
    p.add_argument(
        "--probe-length",
        type=_probe_length,
        default=30,
        dest="probe_length",
        help="random tokens in each copy of the induction probe (default: 30)",
    )
    p.add_argument("--seed", type=_seed, default=0, help="seed of the probe's tokens (default: 0)")
    bos_flag(p)
    _json_flag(p, "print the taxonomy as JSON")
    dataset_args(p, "measure the heads on every prompt")
    p.add_argument(
        "--csv", metavar="FILE", help="with --dataset: also write one row per head per prompt (type scores) to FILE"
    )
    p.add_argument("--force", action="store_true", help="with --dataset: overwrite --csv, start --out over")
    p.set_defaults(run=runs["heads"])


def dataset_args(p, what: str) -> None:
    """--dataset FILE and --out FILE (docs/dataset.md)."""
    p.add_argument(
        "--dataset",
        metavar="FILE",
        help=f"a .jsonl or .csv file of prompts (fields text; corrupted, target, foil): {what}, then each number's "
        "mean over the prompts with its 95%% confidence interval",
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        help="with --dataset: write each prompt's result to FILE (JSONL) as it finishes; rerun with the same FILE to "
        "resume (its prompts are read back, the rest run)",
    )


def dest(name: str) -> str:
    return f"intervene_{name}"


def flag_usage(entry) -> str:
    return " ".join(["--" + entry.name.replace("_", "-"), *(p.name.upper() for p in entry.params)])


class _Values(argparse.Action):
    """The values of one intervention with parameters: one argument per parameter, each parsed by its
    type and range (`_param_type`), stored as {param: value}."""

    def __init__(self, option_strings, dest, entry, **kwargs):
        self.entry = entry
        names = tuple(p.name.upper() for p in entry.params)
        super().__init__(option_strings, dest, nargs=len(names), metavar=names, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        out = {}
        for param, text in zip(self.entry.params, values, strict=True):
            try:
                out[param.name] = _param_type(self.entry, param)(text)
            except argparse.ArgumentTypeError as e:
                raise argparse.ArgumentError(self, str(e)) from None
        setattr(namespace, self.dest, out)


def _param_type(entry, param):
    """The argparse type of one registry parameter: its type, bounds and a message naming them."""
    if param.type is bool:
        return _boolean
    name = entry.name if len(entry.params) == 1 else f"{entry.name} {param.name}"
    if param.type is int:
        high = "" if param.max is None else f" and <= {param.max}"
        return _number(int, low=param.min or 0, high=param.max, what=f"an integer >= {param.min or 0}{high}")
    low, high = param.min, param.max
    return _number(float, low=low, high=high, what=f"a {name} in [{low:g}, {high:g}]")


def _boolean(text: str) -> bool:
    words = {"true": True, "on": True, "yes": True, "false": False, "off": False, "no": False}
    if text.lower() not in words:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return words[text.lower()]


def _train_args(commands, runs) -> None:
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
    _json_flag(p, "print the training summary as JSON")
    p.set_defaults(run=runs["train"])


def _generate_args(commands, runs) -> None:
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
    _json_flag(p, "print the result as JSON")
    p.set_defaults(run=runs["generate"])


def _bench_args(commands, runs) -> None:
    p = commands.add_parser("bench", help="benchmarks: each backend against PyTorch SDPA and the machine's GEMM peak")
    p.add_argument(
        "--case",
        action="append",
        metavar="NAME",
        help="run only this case (repeatable; default: every kernel case; 'hf' (a transformers model) "
        "and 'ring' (several processes) run only when named; an unknown name lists the cases)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes, no memory column: seconds, plus any Flex compile not cached yet",
    )
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
    _json_flag(p, "print the numbers as JSON")
    p.set_defaults(run=runs["bench"])


def _vocab_args(commands, runs) -> None:
    p = commands.add_parser("vocab", help="the words a selfattn model knows (others become <unk>)")
    p.add_argument("--model", metavar="PATH", help="a selfattn checkpoint folder (default: the bundled model)")
    _json_flag(p, "print the list as JSON")
    p.set_defaults(run=runs["vocab"])


def _serve_args(commands, runs) -> None:
    p = commands.add_parser("serve", help="the local web app: type a sentence, see and intervene in its attention")
    p.add_argument("--model", metavar="PATH", help="a checkpoint folder (default: the bundled model)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=_port, default=8000, help="port (default: 8000)")
    _dtype_flag(p)
    p.set_defaults(run=runs["serve"])


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
        check: Callable[..., Any] = partial(checks.integer, "value", low=cast(int, low), high=cast("int | None", high))
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
MAX_PROBE = 512
"""Longest induction probe `selfattn heads` accepts (each copy; the model's context shortens it further)."""

_positive_int = _number(int, low=1, what="a positive integer")
_probe_length = _number(int, low=2, high=MAX_PROBE, what=f"an integer in [2, {MAX_PROBE}]")
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
