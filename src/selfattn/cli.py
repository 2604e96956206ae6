"""The `selfattn` command: parse arguments, call the library, print. Nothing else lives here.

Every command that prints numbers has a `--json` twin. A bad argument gets one line on
stderr and exit status 2; a refused request (ValueError/TypeError from the library)
gets one line and exit status 1 — never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import __version__


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


def _walkthrough(args) -> int:
    from . import walkthrough

    doc = walkthrough.build(lang=args.lang, d_k=args.d_k, seed=args.seed)
    if args.json:
        print(json.dumps(doc, ensure_ascii=False, indent=2))
    else:
        walkthrough.render(doc, _console())
    return 0


def _console():
    from rich.console import Console

    return Console(highlight=False)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="selfattn", description="Self-attention, exact and explainable.")
    parser.add_argument("--version", action="version", version=f"selfattn {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = commands.add_parser("walkthrough", help="the tutorial, executed step by step on 一只/蓝色/怪兽/走进/森林")
    p.add_argument("--lang", choices=["zh", "en"], default="zh", help="language of the text (default: zh)")
    p.add_argument("--d-k", type=_positive_int, default=4, dest="d_k",
                   help="the d_k used to scale the tutorial's score table (default: 4)")
    p.add_argument("--seed", type=_non_negative_int, default=0, help="seed of the random 10×128 run (default: 0)")
    p.add_argument("--json", action="store_true", help="print the same content as JSON")
    p.set_defaults(run=_walkthrough)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except (ValueError, TypeError, FileNotFoundError, FileExistsError) as exc:
        print(f"selfattn {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `selfattn ... | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print(f"selfattn {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
