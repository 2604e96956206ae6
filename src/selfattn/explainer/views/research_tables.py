"""The experiments in the terminal: the heads taxonomy, ablation, patching and the logit lens, drawn with rich.

    taxonomy(t, console, lang)        `selfattn heads`: layers × heads, each cell its clearest type and share (a
                                      head measured on too few rows: "n/m"); the probe's length, seed and BOS; the
                                      relations held on the text
    experiments(e, console, lang)     `selfattn explain --ablate/--patch/--logit-lens`: the Explanation's
                                      `Experiments` (the dicts of `selfattn.explainer.experiments`)

Reads only those dicts, so the terminal shows the numbers of --json. Wide tables are split into blocks of
columns that fit the console (80 columns included): every head and every position is shown. Nothing from
the model or the text is read as rich markup; a token is printed through `terminal.printable`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...terminal import printable
from ..analysis.head_types import REGISTRY
from ..analysis.relations import WORDS as RELATION_WORDS
from ..pieces import shown_text
from .head_words import p_words, percent, type_words
from .tables import number
from .texts import TEXTS

if TYPE_CHECKING:
    from ..result import Experiments

__all__ = ["taxonomy", "experiments", "grid"]


def _say(console: Console, *parts: str, **kw) -> None:
    console.print(*(printable(p, keep="\n") for p in parts), markup=False, **kw)


COLUMN_GAP = 2
"""Cells a column adds besides its text: its right padding and the separator."""


def grid(
    console: Console, corner: str, rows: list[str], columns: list[str], cells: list[list[str]], styles=None
) -> None:
    """One table of short cells, split into blocks of columns that fit the console's width."""
    label = max([cell_len(r) for r in rows] + [cell_len(corner)])
    widths = [max([cell_len(c)] + [cell_len(row[j]) for row in cells]) for j, c in enumerate(columns)]
    blocks, start, used = [], 0, label + COLUMN_GAP
    for j, w in enumerate(widths):
        if j > start and used + w + COLUMN_GAP > console.width:
            blocks.append((start, j))
            start, used = j, label + COLUMN_GAP
        used += w + COLUMN_GAP
    blocks.append((start, len(columns)))
    for a, b in blocks:
        table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)
        for header in [corner, *columns[a:b]]:
            table.add_column(Text(header), no_wrap=True, justify="right")
        for r, (row_label, row) in enumerate(zip(rows, cells, strict=True)):
            looks = styles[r] if styles else [""] * len(row)
            table.add_row(Text(row_label), *(Text(printable(row[j]), style=looks[j]) for j in range(a, b)))
        console.print(table)


def _cell(c: dict, lang: str) -> str:
    if not c["types"] and c.get("relations"):  # a relation held on the text, and no type
        return f"{type_words('relation', 'short', lang)} {percent(c['relations'][0]['score']).rstrip('%')}"
    if not c["types"]:
        return "·" if c.get("measurable", True) else TEXTS["research.unmeasurable"][lang]
    e = c["types"][0]
    share = f"{e['score']:.2f}" if e["type"] == "broad" else percent(e["score"]).rstrip("%")
    return f"{type_words(e['type'], 'short', lang)} {share}"


LENS_SHOWN = 3
"""Tokens per layer the terminal's lens table shows (--json has every one computed)."""

UNTYPED_STYLE = "dim"
"""A head with no clear type, in the taxonomy table (a type's own look is its registry entry's `style`)."""


def taxonomy(t: dict, console: Console, lang: str = "zh") -> None:
    """The taxonomy (`experiments.taxonomy`): the table, one line per type naming its clearest heads, the rule."""
    text = TEXTS["research.with_text"][lang] if t.get("text") else ""
    probe = t["probe"]
    header = TEXTS["research.taxonomy"][lang].format(
        model=t["model"], n=probe["length"], seed=probe["seed"], bos=_bos(probe.get("bos"), lang), text=text
    )
    _say(console, header)
    heads = t["heads"]
    rows = [str(l) for l in range(len(heads))]
    columns = [f"H{h}" for h in range(len(heads[0]))] if heads else []
    cells = [[_cell(c, lang) for c in row] for row in heads]
    styles = [[REGISTRY[c["type"]].style if c["type"] else UNTYPED_STYLE for c in row] for row in heads]
    grid(console, TEXTS["common.layer"][lang], rows, columns, cells, styles)
    for line in t["findings"][lang]:
        _say(console, line)
    if t.get("text"):
        if t.get("bos"):  # the BOS before the text (the probe's is in the header)
            _say(console, t["bos"]["text"][lang])
        for line in relation_lines(t, lang):
            _say(console, line)
    _say(console, t["rule"][lang], style="dim")


def _bos(bos: dict | None, lang: str) -> str:
    if bos is None:
        return TEXTS["research.bos_none"][lang]
    return TEXTS["research.bos_added" if bos["added"] else "research.bos_frame"][lang].format(
        token=printable(bos["token"])
    )


def relation_lines(t: dict, lang: str) -> list[str]:
    """The relations held on the text, one line per head that holds one (`verdicts.verdict`'s relations): its share
    and chance, on the control sentence, on the pooled test, and what the other words give the same keys beside its
    query word's (the baseline it is credited against); or why there are none: the text has no roles, or no
    relation survives its controls."""
    if t.get("roles") is False:
        return [TEXTS["research.no_roles"][lang]]
    lines = []
    for c in (c for row in t["heads"] for c in row):
        for r in c.get("relations", ()):
            kept = r.get("control")
            control = "" if kept is None else TEXTS["research.relation_control"][lang].format(share=percent(kept))
            name = f"L{c['layer']}H{c['head']}"
            words = TEXTS[RELATION_WORDS[r["relation"]]][lang]
            tested = r.get("tested")
            if tested and tested.get("rows"):
                control += TEXTS["research.relation_tested"][lang].format(
                    sentences=tested["sentences"],
                    rows=tested["rows"],
                    share=percent(tested["weight"]),
                    c=percent(tested["chance"]),
                    p=p_words(tested["p"], lang),
                )
            b = r.get("baseline") or {}
            if b.get("weight") is not None and b.get("rows"):  # what the other words give the same keys
                control += TEXTS["research.relation_baseline"][lang].format(
                    base=percent(b["weight"]), mine=percent(b["query"]), rows=b["rows"], p=p_words(b["p"], lang)
                )
            line = TEXTS["research.relation"][lang].format(
                head=name, relation=words, share=percent(r["score"]), c=percent(r["chance"]), control=control
            )
            lines.append(line)
    return [TEXTS["research.relations"][lang], *lines] if lines else [TEXTS["research.no_relation"][lang]]


def experiments(done: Experiments, console: Console, lang: str = "zh") -> None:
    """Whatever of ablation, patching and the lens the command asked for (`Explanation.experiments`)."""
    if done.ablation is not None:
        _say(console, TEXTS["research.ablation"][lang] + done.ablation["text"][lang], style="bold")
    if done.patching is not None:
        _patching(dict(done.patching), console, lang)
    if done.lens is not None:
        _lens(dict(done.lens), console, lang)


def _patching(p: dict, console: Console, lang: str) -> None:
    _say(console, TEXTS["research.patching"][lang] + p["text"][lang], style="bold")
    top = {(x["layer"], x["head"]) for x in p["top_heads"]}
    _say(console, TEXTS["research.heads"][lang])
    heads = p["heads"]
    cells = [[number(100 * r, 0) for r in row] for row in heads]
    styles = [["reverse" if (l, h) in top else "" for h in range(len(row))] for l, row in enumerate(heads)]
    grid(
        console,
        TEXTS["common.layer"][lang],
        [str(l) for l in range(len(heads))],
        [f"H{h}" for h in range(len(heads[0]))],
        cells,
        styles,
    )
    _say(console, TEXTS["research.residual"][lang])
    tokens = p["clean"].get("labels") or p["clean"]["tokens"]  # as a person reads them (`pieces` labels)
    columns = [f"{i} {_cut(tok)}" for i, tok in enumerate(tokens)]
    cells = [[number(100 * r, 0) for r in row] for row in p["residual"]]
    grid(console, TEXTS["common.layer"][lang], [str(l) for l in range(len(cells))], columns, cells)


def _cut(token: str, width: int = 6) -> str:
    token = printable(shown_text(token.strip(" ") or token))  # the one notation of `pieces.shown_text`
    return token if len(token) <= width else token[: width - 1] + "…"


def _lens(lens: dict, console: Console, lang: str) -> None:
    _say(console, TEXTS["research.lens"][lang] + lens["text"][lang], style="bold")
    _say(console, TEXTS["research.lens_table"][lang].format(p=lens["position"], tok=f"“{lens['token']}”"))
    k = min(LENS_SHOWN, len(lens["layers"][0]["top"]))
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)
    table.add_column(Text(TEXTS["common.layer"][lang]), justify="right", no_wrap=True)
    table.add_column(Text(TEXTS["research.top"][lang].format(k=k)))
    table.add_column(Text(TEXTS["common.entropy_bits"][lang]), justify="right", no_wrap=True)
    final = lens["layers"][-1]["top"][0]["id"]
    for row in lens["layers"]:
        items = "  ".join(f"“{printable(e['token'])}” {100 * e['prob']:.1f}%" for e in row["top"][:k])
        style = "bold" if row["top"][0]["id"] == final and row["layer"] >= lens["settled"] else ""
        table.add_row(Text(str(row["layer"])), Text(items, style=style), Text(number(row["entropy_bits"])))
    console.print(table)
