"""A dataset run as tables: its CSV (one row per head per prompt) and the terminal's table of means.

    columns(result) -> the CSV's header;  rows(result) -> [{column: value}];  csv_bytes(result) -> bytes
    render(result, console, lang)   each head's means with their intervals, the types it holds, then the sentences

The CSV (docs/csv.md, "a dataset run"): `prompt` (the prompt's index, from 0) and `line` (its line in the dataset),
then, for an explain run, the columns of `selfattn explain --csv` (`csv_table.COLUMNS`); for a heads run `layer`,
`head`, `type` (the head's clearest type, probe and text merged), `types` (the types credited on this prompt's text,
";"-joined) and each type's score on the text (`running.heads_numbers`). Numbers as repr writes them; an empty cell: not
measured.
"""

from __future__ import annotations

from ..views import csv_table
from .running import heads_numbers

__all__ = ["columns", "rows", "csv_bytes", "render"]

PROMPT_COLUMNS = ("prompt", "line")
HEADS_COLUMNS = ("layer", "head", "type", "types")


def columns(result) -> tuple[str, ...]:
    """The CSV's header for `result`'s kind of run."""
    per_head = csv_table.COLUMNS if result.what == "explain" else HEADS_COLUMNS + heads_numbers()
    return PROMPT_COLUMNS + tuple(per_head)


def rows(result) -> list[dict]:
    """One dict per head per prompt: the prompt's index and line, then the head's numbers on that prompt."""
    names = columns(result)[len(PROMPT_COLUMNS) :]
    return [
        {"prompt": p.index, "line": p.row.line} | {k: h.get(k) for k in names} for p in result.prompts for h in p.heads
    ]


def csv_bytes(result) -> bytes:
    """`rows(result)` as CSV (`csv_table.csv_bytes`: a header, repr's digits, UTF-8)."""
    return csv_table.csv_bytes(rows(result), columns(result))


def _cell(mean) -> str:
    """ "0.335 [0.302, 0.367]": the mean and its interval, every minus sign "−" as the other tables print it."""
    from ..views.tables import number

    if mean.mean is None:
        return ""
    if mean.low is None:
        return number(mean.mean, 3)
    return f"{number(mean.mean, 3)} [{number(mean.low, 3)}, {number(mean.high, 3)}]"


def render(result, console, *, lang: str = "zh") -> None:
    """The terminal's view: a table of each head's means [95 % interval] and the types it holds (k/n), then the
    sentences. Nothing the user gave is read as markup."""
    from rich.table import Table
    from rich.text import Text

    from ..catalogue import text
    from ..views.type_legend import legend

    shown = [n for n in result.numbers if any(h.means[n].n for h in result.heads)]
    table = Table(title=Text(result.text[lang][0]), title_justify="left")
    table.add_column(text("common.layer", lang), justify="right")
    table.add_column(text("common.head", lang), justify="right")
    for name in shown:
        table.add_column(name, justify="right")
    table.add_column(text("dataset.types_column", lang))
    short = legend()["short"]  # each type's short name in the language asked
    for h in result.heads:
        held = ", ".join(f"{short[t][lang] if t in short else t} {k}/{result.n}" for t, k in h.holds.items())
        table.add_row(str(h.layer), str(h.head), *(_cell(h.means[n]) for n in shown), held)
    console.print(table)
    for line in result.text[lang][1:]:
        console.print(line, markup=False)
