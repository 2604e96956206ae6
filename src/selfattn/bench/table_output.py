"""A rich table printed whole: nothing cut to the console's width (`show`), for every table of the bench."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

__all__ = ["show", "UNBOUNDED"]

UNBOUNDED = 10_000
"""The width a table is measured in to find its natural width (rich measures within the console's)."""


def show(console: Console, table: Table) -> None:
    """Print `table` with nothing cut: every column folds what does not fit (no "…"), and where the console is not
    a terminal (a file, a pipe) the table gets its natural width whatever the console's."""
    for column in table.columns:
        column.no_wrap, column.overflow = False, "fold"
    width = console.width
    natural = console.measure(table, options=console.options.update(width=UNBOUNDED)).maximum
    if console.is_terminal or natural <= width:
        console.print(table)
        return
    console.width = natural  # console.print(width=...) cannot go past the console's own width
    try:
        console.print(table)
    finally:
        console.width = width
