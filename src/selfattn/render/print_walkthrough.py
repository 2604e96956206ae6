"""What `selfattn walkthrough` prints: `selfattn.walkthrough.build`'s content drawn with rich."""

from __future__ import annotations

from rich.table import Table

from ..walkthrough import TEXT

__all__ = ["render"]

DIGITS = {"mask": 0, "weights": 3, "output": 3}
"""Decimals shown per section's table (2 for the others)."""

DEFAULT_DIGITS = 2


def render(doc: dict, console) -> None:
    """Draw `build`'s content on a rich console."""
    t = TEXT[doc["lang"]]
    console.rule(f"[bold]{doc['title']}")
    for section in doc["sections"]:
        console.print()
        console.print(section["text"])
        if "table" in section:
            console.print(_rich_table(section["table"], DIGITS.get(section["id"], DEFAULT_DIGITS)))
        if section["id"] == "output":
            for line in section["top_lines"]:
                console.print("  " + line)
        if section["id"] == "softmax":
            for ex in section["examples"]:
                console.print(f"  softmax({_fmt_list(ex['scores'])}) = {_fmt_list(ex['softmax'], 3)}")
        if section["id"] == "random":
            shapes = Table(t["step"], t["shape_of"], show_edge=False)
            for row in section["shapes"]:
                shapes.add_row(row["step"], "×".join(map(str, row["shape"])))
            console.print(shapes)
            console.print(t["last_row"], _fmt_list(section["last_row_weights"], 3))
            c = section["checks"]
            console.print(
                t["checks"].format(
                    sum_dev=c["row_sum_max_deviation"],
                    future_max=c["future_weight_max"],
                    out_shape="×".join(map(str, c["output_shape"])),
                    in_shape="×".join(map(str, c["input_shape"])),
                )
            )


def _rich_table(table: dict, digits: int) -> Table:
    out = Table(table["corner"], *table["columns"], show_edge=False, header_style="bold")
    for label, row in zip(table["rows"], table["values"], strict=True):
        out.add_row(label, *(_cell(x, digits) for x in row))
    return out


def _cell(x, digits: int) -> str:
    if isinstance(x, str) and x not in ("-inf", "inf"):
        return x
    if x == "-inf":
        return "[red]−inf[/red]"
    if digits == 0:
        return f"{x:.0f}" if x else "[dim]0[/dim]"
    text = f"{x:.{digits}f}"
    return f"[dim]{text}[/dim]" if x == 0 else text


def _fmt_list(values, digits: int = 1) -> str:
    return "[" + ", ".join("−inf" if v == "-inf" else f"{v:.{digits}f}" for v in values) + "]"
