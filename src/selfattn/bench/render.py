"""The bench's tables, drawn with rich: one per case (called by the CLI; `selfattn.bench.run` prints nothing).

Text that comes from the machine or from errors (the CPU name, a refusal, a failed measurement) is
printed as text, never read as rich markup."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["render_header", "render_case", "render"]


def render_header(result: dict, console: Console) -> None:
    machine = result["machine"]
    busy = machine.get("busy_processes", 0)
    under = f", under load {busy} ({busy} busy process{'es' if busy != 1 else ''}, one core each)" if busy else ""
    console.print(f"[bold]selfattn bench[/bold]{'  (quick sizes)' if result['quick'] else ''}: "
                  f"torch {machine['torch']}, {machine['threads']} threads{under}, ", Text(machine["cpu"]), sep="")
    console.print(f"GEMM peak: {machine['gemm_peak_gflops']:.1f} GFLOP/s ({machine['gemm']})")
    for key, text in result["method"].items():
        console.print(f"[dim]{key}: {text}[/dim]")
    for text in result.get("warnings", []):
        console.print("[bold yellow]warning:[/bold yellow]", Text(text))


def render_case(case: dict, console: Console) -> None:
    table = Table(title=f"{case['name']}: {case['title']}", title_justify="left",
                  caption="% peak: of the fp32 GEMM peak · × SDPA: time over SDPA's · +MiB: peak extra memory",
                  caption_justify="left")
    for column, justify in (("backend", "left"), ("shape", "left"), ("ms", "right"), ("GFLOP/s", "right"),
                            ("% peak", "right"), ("× SDPA", "right"), ("+MiB", "right")):
        table.add_column(column, justify=justify, no_wrap=True)
    for row in case["rows"]:
        name = row["backend"] if row["chosen"] in (None, row["backend"]) else f"{row['backend']} → {row['chosen']}"
        if row["skipped"]:
            table.add_row(name, case["shape"], "—", "—", "—", "—", "—")
            continue
        table.add_row(name, case["shape"], f"{row['ms']:.2f}", f"{row['gflops']:.1f}", f"{row['peak_percent']:.0f}%",
                      "—" if row["vs_sdpa"] is None else f"{row['vs_sdpa']:.2f}",
                      "—" if row["extra_mib"] is None else f"{row['extra_mib']:.1f}")
    console.print(table)
    for row in case["rows"]:
        if row["skipped"]:
            console.print(Text(f"  {row['backend']} skipped: {row['skipped']}", style="dim"))
        elif row["memory_error"]:
            console.print(Text(f"  {row['backend']} memory not measured: {row['memory_error']}", style="dim"))


def render(result: dict, console: Console | None = None) -> None:
    """Print the header and every case's table of a `selfattn.bench.run` result."""
    console = console or Console()
    render_header(result, console)
    for case in result["cases"]:
        render_case(case, console)
