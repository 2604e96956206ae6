"""`selfattn explain --patch … --attribution` in the terminal: each head's share of the logit difference estimated
by attribution patching (`experiments.attribution`'s dict), beside the exact share where patching ran.

    render(a, console, lang)   a sentence (what was estimated, and how well it ranks patching's top heads), then a
                               grid layers × heads of "estimate" or "exact→estimate" percentages

Reads only the dict, so the terminal shows the numbers of --json's "attribution".
"""

from __future__ import annotations

from rich.console import Console

from ...terminal import printable
from .research_tables import grid
from .tables import number
from .texts import text

__all__ = ["render"]


def _say(console: Console, text: str, **kw) -> None:
    console.print(printable(text, keep="\n"), markup=False, **kw)


def render(a: dict, console: Console, lang: str = "zh") -> None:
    _say(console, text("attribution.title", lang), style="bold")
    heads, exact = a["heads"], a.get("exact")
    if exact is not None:
        agreement = exact["agreement"]
        rho = "—" if agreement["spearman"] is None else number(agreement["spearman"], 2)
        _say(
            console, text("attribution.agreement", lang, top=agreement["top"], spearman=rho, shared=agreement["shared"])
        )
        _say(console, text("attribution.beside", lang))
        cells = [
            [f"{number(100 * x, 0)}→{number(100 * r, 0)}" for x, r in zip(ex, row, strict=True)]
            for ex, row in zip(exact["heads"], heads, strict=True)
        ]
    else:
        cells = [[number(100 * r, 0) for r in row] for row in heads]
    grid(
        console,
        text("common.layer", lang),
        [str(l) for l in range(len(heads))],
        [f"H{h}" for h in range(len(heads[0]))],
        cells,
    )
