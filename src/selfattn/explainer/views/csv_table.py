"""`selfattn explain --csv FILE`: one row per head, to take to a spreadsheet or pandas (the schema: docs/csv.md).

    rows(e, attribution=None) -> [{column: value}]   layer by layer, head by head
    csv_bytes(rows) -> bytes                          UTF-8, a header line, "\\n" line ends

Columns (COLUMNS, in this order): layer, head, kind (the head's verdict, as the sentences name it), types (every
type it is credited with, ";"-joined), entropy (bits), max_weight, first_token, previous, self (`summary.scan`'s
numbers on this text), ablated (1 / 0, empty where no ablation ran), ablation_kl_bits (the KL of the next-token
distribution when the ablated heads are ablated together: on their rows, empty elsewhere), patching_recovered
(the share of the logit difference the head recovers by exact patching), attribution_recovered (the same
estimated by attribution patching). An experiment that did not run leaves its column empty; a number is written
with repr's shortest round-trip digits.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["COLUMNS", "rows", "csv_bytes"]

COLUMNS = (
    "layer",
    "head",
    "kind",
    "types",
    "entropy",
    "max_weight",
    "first_token",
    "previous",
    "self",
    "ablated",
    "ablation_kl_bits",
    "patching_recovered",
    "attribution_recovered",
)
SUMMARY = ("entropy", "max_weight", "first_token", "previous", "self")
"""The columns read from each head's summary."""


def _cell(value) -> Any:
    return "" if value is None else value


def rows(e, attribution: Mapping | None = None) -> list[dict]:
    """One dict per head of Explanation `e` (COLUMNS as keys), with `attribution` (`experiments.attribution`'s dict)
    where it ran."""
    ablation, patching = e.experiments.ablation, e.experiments.patching
    ablated = None if ablation is None else {tuple(h) for h in ablation["heads"]}
    out = []
    for layer in range(e.card.n_layers):
        for head in range(e.card.n_heads):
            summary = e.answers.summaries[layer][head]
            described = e.answers.describe(layer, head)
            row: dict[str, Any] = {"layer": layer, "head": head, "kind": described.get("kind", "")}
            row["types"] = ";".join(str(t) for t in described.get("types", ()))
            row |= {name: _cell(summary.get(name)) for name in SUMMARY}
            hit = None if ablated is None else (layer, head) in ablated
            row["ablated"] = "" if hit is None else int(hit)
            row["ablation_kl_bits"] = ablation["kl_bits"] if hit else ""
            row["patching_recovered"] = "" if patching is None else patching["heads"][layer][head]
            row["attribution_recovered"] = "" if attribution is None else attribution["heads"][layer][head]
            out.append(row)
    return out


def csv_bytes(table: Sequence[Mapping], columns: Sequence[str] = COLUMNS) -> bytes:
    """The rows as CSV (a header of `columns` first: COLUMNS, or a dataset run's `dataset.table` columns), UTF-8;
    None is an empty cell."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in table:
        writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in row.items()})
    return buffer.getvalue().encode("utf-8")
