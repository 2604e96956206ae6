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

__all__ = ["render", "WORDS"]

WORDS = {
    "title": {
        "zh": "归因修补（一阶估计：两次前向、一次反向）：每个头恢复的 logit 差比例（%）",
        "en": "attribution patching (first-order estimate: two forward passes, one backward): each head's share of "
        "the logit difference recovered (%)",
    },
    "beside": {"zh": "格子：精确修补→估计", "en": "cells: exact patching→estimate"},
    "agreement": {
        "zh": "精确修补最强的 {top} 个头上，估计与精确的 Spearman 秩相关 {spearman}；两者前 {top} 名共有 {shared} 个头",
        "en": "on exact patching's top {top} heads, the Spearman rank correlation of estimate and exact is "
        "{spearman}; their top {top} share {shared} heads",
    },
    "layer": {"zh": "层", "en": "layer"},
}


def _say(console: Console, text: str, **kw) -> None:
    console.print(printable(text, keep="\n"), markup=False, **kw)


def render(a: dict, console: Console, lang: str = "zh") -> None:
    _say(console, WORDS["title"][lang], style="bold")
    heads, exact = a["heads"], a.get("exact")
    if exact is not None:
        agreement = exact["agreement"]
        rho = "—" if agreement["spearman"] is None else number(agreement["spearman"], 2)
        _say(console, WORDS["agreement"][lang].format(top=agreement["top"], spearman=rho, shared=agreement["shared"]))
        _say(console, WORDS["beside"][lang])
        cells = [
            [f"{number(100 * x, 0)}→{number(100 * r, 0)}" for x, r in zip(ex, row, strict=True)]
            for ex, row in zip(exact["heads"], heads, strict=True)
        ]
    else:
        cells = [[number(100 * r, 0) for r in row] for row in heads]
    grid(
        console,
        WORDS["layer"][lang],
        [str(l) for l in range(len(heads))],
        [f"H{h}" for h in range(len(heads[0]))],
        cells,
    )
