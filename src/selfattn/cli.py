"""The `selfattn` command: parse arguments, call the library, print. Nothing else lives here.

Every command that prints numbers has a `--json` twin. All printing is here or in the render
modules only this file calls (`selfattn.render.*`, `selfattn.bench.render`, `selfattn.explainer.views.tables`);
the library returns data.

Errors, one format for every command:

    bad argument (argparse)                      selfattn COMMAND: error: MESSAGE      exit 2
    refused input or file (ValueError, OSError)  selfattn COMMAND: error: MESSAGE      exit 1
    anything else (a bug)                        the traceback, then a line asking     exit 1
                                                 to report it

The arguments of every command are declared in `cli_args` (the interventions' flags generated from
their registry). The CLI checks the type and range of every argument itself, so the library only ever sees values of
the right type: a ValueError from it is a refusal of the user's input (an empty text, a layer that
does not exist, a broken checkpoint file), an OSError a file that cannot be read or written. A
TypeError, KeyError or anything else coming back is a bug, and is shown as one, with its traceback.
Paths and texts the user gave are never read as rich markup.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import traceback
from pathlib import Path
from typing import Any, cast

from . import cli_args
from .terminal import printable, printable_json

REPORT = (
    "this is a bug in selfattn, not a problem with your input; please report it with the command and "
    "the traceback above"
)


def _print_json(doc, indent: int | None = None) -> None:
    """`doc` as standard JSON on stdout: readable CJK, NaN or infinity refused (ValueError), never printed bare,
    and characters that reorder or hide text (a U+202E in a token) written as escapes, not raw."""
    print(printable_json(json.dumps(doc, ensure_ascii=False, indent=indent, allow_nan=False)))


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
        from .render.print_walkthrough import render

        render(doc, _console())
    return 0


class _UsageError(Exception):
    """A combination of arguments argparse cannot refuse by itself: `selfattn COMMAND: error: ...`, exit 2."""


def _intervention(args):
    """The Intervention the flags ask for (one flag per registry entry, then --only-layer / --only-head)."""
    from .explainer.interventions import REGISTRY, Intervention

    given = {name: getattr(args, cli_args.dest(name)) for name, entry in REGISTRY.items() if entry.cli}
    applied = {name: ({} if value is True else value) for name, value in given.items() if value not in (None, False)}
    scoped = [
        flag
        for flag, value in (("--only-layer", args.only_layer), ("--only-head", args.only_head))
        if value is not None
    ]
    if scoped and not applied:
        flags = ", ".join(cli_args.flag_usage(entry) for entry in REGISTRY.values() if entry.cli)
        raise _UsageError(f"{' and '.join(scoped)} limit an intervention to one layer / head; give one too ({flags})")
    return Intervention(applied, layer=args.only_layer, head=args.only_head)


def _check_needs(args) -> None:
    """A flag that needs another one (--ablate-mode needs --ablate, …: `cli_args.NEEDS`) is refused before any work."""
    for name, (flag, needed) in cli_args.NEEDS.items():
        given = [getattr(args, n.lstrip("-").replace("-", "_"), None) for n in needed]
        if getattr(args, name, None) is not None and not any(given):
            either = " or ".join(needed)
            raise _UsageError(f"{flag} goes with {either}; give {'one' if len(needed) > 1 else needed[0]} too")


def _experiment_files(args) -> list[Path]:
    """The pictures the experiments add to --plots (the patching heatmap), checked with the others."""
    from .explainer.views import patching_plot

    if args.plots is None or args.patch is None:
        return []
    return [Path(args.plots) / name for name in patching_plot.FILES]


PACKING_THREADS = 1
"""torch's threads while the command packs its page: many small operations, which a second thread hardly speeds up
(SmolLM2's page at 128 tokens 0.56 s with two, 0.61 s with one) and a busy core slows down (1.3–1.6 s with two beside
one busy process, 0.60 s with one). Set for the command only: torch's thread count is the process's, which a server
shares between requests."""


@contextlib.contextmanager
def _torch_threads(n: int):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(min(n, before))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _explain(args) -> int:
    from .explainer.views import checkable, outputs

    if args.dataset is not None:
        return _dataset(args, "explain")
    request = _request(args)
    paths = {"npz": args.npz, "html": args.html, "plots_dir": args.plots, "csv": args.csv}
    shown = request.opened()[:2]
    chosen = cast("tuple[int, int] | None", shown if None not in shown else None)
    outputs.check(**paths, force=args.force, selected=chosen)  # before the model is loaded: nothing for nothing
    _check_pictures(_experiment_files(args), args.force)
    from .explainer import pipeline
    from .explainer.probe_store import ProbeStore
    from .explainer.session import Explainer

    # the command never changes the weights it loaded: the probe's measures of these files may be read from disk
    session = pipeline.Session(Explainer.load(args.model, dtype=args.dtype), probe_store=ProbeStore())
    e = session.explain(request)
    wanted = "auto" if args.layers is None else args.layers
    doc = None
    if args.html is not None:  # the page's payload: only for a page
        with _torch_threads(PACKING_THREADS):
            doc = session.document(e, layers=wanted)
    arrays = None if args.npz is None else checkable.npz_arrays(e, layers=args.layers)
    attribution = e.experiments.attribution  # with --attribution, run with the patching (the Spec asks)
    table = None
    if args.csv is not None:
        from .explainer.views import csv_table

        table = csv_table.rows(e, attribution)
    files = outputs.render(e, doc, **paths, force=args.force, lang=args.lang, arrays=arrays, table=table)
    if e.experiments.patching is not None and args.plots is not None:
        from .explainer.views import patching_plot

        pictures = patching_plot.render(dict(e.experiments.patching), lang=args.lang)
        files |= {path: pictures[path.name] for path in _experiment_files(args)}
    written = outputs.write_all(files, force=args.force)
    if args.json:
        printed = checkable.json_document(e, layers=args.layers)
        _print_json(printed)
        return 0
    from .explainer.views import research_tables, tables

    console = _console()
    tables.render(e, console, lang=args.lang, evidence=args.evidence, every_head=args.every_head)
    research_tables.experiments(e.experiments, console, lang=args.lang)
    if attribution is not None:
        from .explainer.views import attribution_table

        attribution_table.render(dict(attribution), console, lang=args.lang)
    for path in written:
        console.print(f"→ {printable(str(path))}", markup=False)
    if doc is not None and "omitted" in doc:  # the page holds some layers only: which, and how to get the others
        console.print(doc["omitted"]["text"][args.lang], markup=False, style="dim")
    return 0


def _check_pictures(paths: list[Path], force: bool) -> None:
    from .files import check_creatable

    for path in paths:
        check_creatable(path, force=force)


def _request(args):
    """The `pipeline.Spec` the flags ask for: the text, the head, the interventions, --find and the experiments
    (--ablate, --patch, --logit-lens), as the app and the Python API build theirs."""
    from .explainer.pipeline import Lens, Patch, Spec
    from .explainer.session import DEFAULT_TEXT

    intervention = _intervention(args)
    _check_needs(args)
    return Spec(
        DEFAULT_TEXT if args.text is None else args.text,
        layer=args.layer,
        head=args.head,
        intervention=intervention,
        find=args.find,
        ablate=args.ablate or None,
        ablate_mode=args.ablate_mode,
        ablate_target=args.target if args.ablate else None,
        ablate_foil=args.foil if args.ablate else None,
        reference=None if args.reference is None else _reference_texts(args.reference),
        patch=None if args.patch is None else Patch(args.patch, target=args.target, foil=args.foil),
        lens=Lens(args.position) if args.logit_lens else None,
        among=tuple(args.layers) if args.layers else None,  # a page opens on a layer it holds
        prepend_bos=args.prepend_bos,
        attribution=bool(args.attribution),
    )


def _reference_texts(path: str) -> list[str]:
    """--reference FILE: its non-blank lines, each a text (UTF-8); a file that cannot be read, or holds no text, is
    refused by name."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise _UsageError(
            f"--reference {printable(path)}: cannot read it as UTF-8 text ({e.__class__.__name__})"
        ) from None
    texts = [line for line in lines if line.strip()]
    if not texts:
        raise _UsageError(f"--reference {printable(path)} holds no text: give one text per line")
    return texts


ONE_TEXT_FLAGS = (
    ("text", "the text argument"),
    ("patch", "--patch (give each row its corrupted text)"),
    ("target", "--target (give each row its target)"),
    ("foil", "--foil (give each row its foil)"),
    ("html", "--html"),
    ("npz", "--npz"),
    ("plots", "--plots"),
    ("logit_lens", "--logit-lens"),
    ("find", "--find"),
    ("layer", "--layer"),
    ("head", "--head"),
    ("layers", "--layers"),
    ("evidence", "--evidence"),
    ("every_head", "--every-head"),
    ("only_layer", "--only-layer"),
    ("only_head", "--only-head"),
)
"""(dest, what it is called): what goes with one text and is refused beside --dataset."""


def _dataset(args, what: str) -> int:
    """`selfattn explain|heads --dataset FILE`: every prompt run, averaged (`explainer.dataset`); the dataset and the
    output files checked before the model loads."""
    from .explainer.interventions import REGISTRY

    given = [said for dest, said in ONE_TEXT_FLAGS if getattr(args, dest, None) not in (None, False)]
    given += [cli_args.flag_usage(e) for n, e in REGISTRY.items() if e.cli and getattr(args, cli_args.dest(n), None)]
    if given:
        raise _UsageError(f"{given[0]} goes with one text; with --dataset the prompts come from the dataset")
    _check_needs(args)
    from .explainer.dataset import rows as dataset_rows
    from .explainer.dataset import store
    from .files import check_writable

    rows = dataset_rows.read_rows(args.dataset)
    store.check_apart(args.dataset, out=args.out, csv=args.csv)
    if args.csv is not None:
        check_writable(args.csv, force=args.force)
    from .explainer.dataset import table
    from .explainer.dataset.running import run_dataset
    from .explainer.session import Explainer

    explainer = Explainer.load(args.model, dtype=args.dtype)
    if what == "explain":
        options = {
            "ablate": args.ablate or None,
            "ablate_mode": args.ablate_mode,
            "reference": None if args.reference is None else _reference_texts(args.reference),
            "attribution": bool(args.attribution),
        }
    else:
        options = {"probe_length": args.probe_length, "seed": args.seed}
    result = run_dataset(
        explainer,
        rows,
        what=what,
        prepend_bos=args.prepend_bos,
        out=args.out,
        force=args.force,
        progress=sys.stderr.isatty(),
        source=args.dataset,
        **options,
    )
    written = []
    if args.csv is not None:
        from .files import write_atomic

        written.append(write_atomic(args.csv, table.csv_bytes(result), force=args.force))
    if args.json:
        _print_json(result.as_dict())
        return 0
    console = _console()
    table.render(result, console, lang=args.lang)
    for path in [*([] if args.out is None else [Path(args.out)]), *written]:
        console.print(f"→ {printable(str(path))}", markup=False)
    return 0


def _heads(args) -> int:
    from .explainer import experiments
    from .explainer.session import Explainer

    if args.dataset is not None:
        return _dataset(args, "heads")
    for flag, value in (("--out", args.out), ("--csv", args.csv)):
        if value is not None:
            raise _UsageError(f"{flag} goes with --dataset (selfattn heads --dataset FILE {flag} …)")

    from .explainer.probe_store import ProbeStore

    explainer = Explainer.load(args.model, dtype=args.dtype)
    t = experiments.taxonomy(
        explainer,
        args.text,
        length=args.probe_length,
        seed=args.seed,
        prepend_bos=args.prepend_bos,
        store=ProbeStore(),  # the command never changes the weights it loaded
    )
    if args.json:
        _print_json(t)
    else:
        from .explainer.views import research_tables

        research_tables.taxonomy(t, _console(), lang=args.lang)
    return 0


def _check_train_outputs(args) -> None:
    """Refuse, before training, a --plot that is one of the files the checkpoint in --out will be written to."""
    from .model.checkpoint import FILES

    if args.plot is None:
        return
    plot = Path(args.plot).resolve()
    for name in FILES:
        if plot == (Path(args.out) / name).resolve():
            raise ValueError(f"--plot {args.plot} is the checkpoint's {name} in --out {args.out}: give another file")


def _train(args) -> int:
    from .model.train import run_training
    from .render.print_train import format_train_summary

    _check_train_outputs(args)
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
    from .explainer.session import check_text  # generate refuses the texts explain refuses
    from .model.checkpoint import load_checkpoint, load_default
    from .model.generate import generate_text
    from .render.print_generate import format_generation

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
        from .bench.dispatch_report import explain_case

        kernel_names, extra_names = split_names(args.case)
        parts = [explain_case(case) for case in select(kernel_names, args.quick)]
        parts += [f"{name}: {EXTRA_CASES[name]}\n  no single attention call to explain" for name in extra_names]
        print("\n\n".join(parts))
        return 0
    console = None if args.json else _console()

    def progress(name: str, what: str) -> None:
        assert console is not None  # progress is passed only without --json
        console.print(f"measuring {name} ({what})…", style="dim", markup=False)

    result = bench.run(
        args.case,
        quick=args.quick,
        threads=args.threads,
        measure_memory=False if args.no_memory else None,  # None: measured at full size, not --quick
        load=args.load,
        progress=None if args.json else progress,
    )
    if args.json:
        _print_json(result, indent=1)
    else:
        bench.render(result, console)
    return 0


def _vocab(args) -> int:
    from .explainer.session import vocabulary
    from .render.print_vocab import format_vocabulary

    words = vocabulary(args.model)
    if args.json:
        _print_json({"model": args.model or "default", "size": len(words), "tokens": words})
    else:
        print(format_vocabulary(words))
    return 0


def _serve(args) -> int:
    from .explainer.session import Explainer
    from .explainer.web.server import serve

    serve(Explainer.load(args.model, dtype=args.dtype), host=args.host, port=args.port)
    return 0


def build_parser():
    """The parser of every command (`cli_args.build_parser`), each running its function here."""
    runs = {
        "walkthrough": _walkthrough,
        "explain": _explain,
        "heads": _heads,
        "train": _train,
        "generate": _generate,
        "bench": _bench,
        "vocab": _vocab,
        "serve": _serve,
    }
    return cli_args.build_parser(runs)


class _NoticeLines(logging.Handler):
    """The library's notices (a compile that makes the user wait: `selfattn.kernels.notice`, logged to the
    "selfattn" logger) as the CLI's lines on stderr: a start notice opens a line, its end closes it. Read
    from the logger, so a command that never imports torch (walkthrough) pays nothing for it."""

    def emit(self, record: logging.LogRecord) -> None:
        notice: Any = record.args[0] if isinstance(record.args, tuple) and record.args else None
        stage = getattr(notice, "stage", None)
        line = str(notice) + " " if stage == "start" else notice.tail + "\n" if stage else record.getMessage() + "\n"
        sys.stderr.write(line)
        sys.stderr.flush()


def _show_notices() -> None:
    logger = logging.getLogger("selfattn")
    if not any(isinstance(h, _NoticeLines) for h in logger.handlers):
        logger.addHandler(_NoticeLines(logging.INFO))
        logger.setLevel(logging.INFO)
        logger.propagate = False


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    _show_notices()
    try:
        return args.run(args)
    except BrokenPipeError:  # `selfattn ... | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except _UsageError as exc:  # flags that do not go together: like argparse's own refusals
        print(f"selfattn {args.command}: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"selfattn {args.command}: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError) as exc:  # a refused input or file: one line, no raw control character
        print(f"selfattn {args.command}: error: {printable(str(exc))}", file=sys.stderr)
        return 1
    except Exception:  # a bug: its traceback, and what to do about it
        traceback.print_exc()
        print(f"selfattn {args.command}: internal error: {REPORT}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
