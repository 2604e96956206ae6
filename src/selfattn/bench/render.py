"""The bench's tables, drawn with rich: one per case (called by the CLI; `selfattn.bench.run` prints nothing).

Text that comes from the machine or from errors (the CPU name, a refusal, a failed measurement) is
printed as text, never read as rich markup. Every table is printed whole (`show`): into a file or a pipe at its
own width (rich would cut it to 80 columns, "108.…"), and on a terminal narrower than a table its cells fold
onto a second line rather than lose their last digits."""

from __future__ import annotations

from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from .table_output import show

__all__ = ["render_header", "render_case", "render_targets", "render_hf", "render_ring", "render", "show", "load_words"]


def load_words(result: dict) -> str:
    """The load the run measured, in words: "idle", "under load N" (`--load`), "busy" where other processes shared
    the cores (the run's busy-machine warning), or both."""
    busy = result["machine"].get("busy_processes", 0)
    others = "other processes shared the cores (see the warning)" if result.get("warnings") else ""
    if busy:
        return f"under load {busy}" + (f", and {others}" if others else "")
    return f"busy: {others}" if others else "idle"


def render_header(result: dict, console: Console) -> None:
    machine = result["machine"]
    busy = machine.get("busy_processes", 0)
    under = f", under load {busy} ({busy} busy process{'es' if busy != 1 else ''}, one core each)" if busy else ""
    console.print(
        f"[bold]selfattn bench[/bold]{'  (quick sizes)' if result['quick'] else ''}: "
        f"torch {machine['torch']}, {machine['threads']} threads{under}, ",
        Text(machine["cpu"]),
        sep="",
    )
    if "instruction_set" in machine:
        console.print(Text(f"instruction set: {machine['instruction_set']}"))
    console.print(f"GEMM peak: {machine['gemm_peak_gflops']:.1f} GFLOP/s ({machine['gemm']})")
    for what in machine.get("gemm_other_dtypes", []):
        console.print(Text(f"GEMM peak of another dtype: {what}"))
    for key, text in result["method"].items():
        console.print(f"[dim]{key}: {text}[/dim]")
    for text in result.get("warnings", []):
        console.print("[bold yellow]warning:[/bold yellow]", Text(text))


def render_case(case: dict, console: Console) -> None:
    dtype = case.get("size", {}).get("dtype", "float32")
    table = Table(
        title=f"{case['name']}: {case['title']}",
        title_justify="left",
        caption=f"% peak: of the {dtype} GEMM peak · × SDPA: time over SDPA's · +MiB: peak extra memory",
        caption_justify="left",
    )
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("backend", "left"),
        ("shape", "left"),
        ("ms", "right"),
        ("GFLOP/s", "right"),
        ("% peak", "right"),
        ("× SDPA", "right"),
        ("+MiB", "right"),
    )
    for column, justify in columns:
        table.add_column(column, justify=justify, no_wrap=True)
    for row in case["rows"]:
        name = row["backend"] if row["chosen"] in (None, row["backend"]) else f"{row['backend']} → {row['chosen']}"
        if row["skipped"]:
            table.add_row(name, case["shape"], "—", "—", "—", "—", "—")
            continue
        table.add_row(
            name,
            case["shape"],
            f"{row['ms']:.2f}",
            f"{row['gflops']:.1f}",
            f"{row['peak_percent']:.0f}%",
            "—" if row["vs_sdpa"] is None else f"{row['vs_sdpa']:.2f}",
            "—" if row["extra_mib"] is None else f"{row['extra_mib']:.1f}",
        )
    show(console, table)
    for row in case["rows"]:
        if row["skipped"]:
            console.print(Text(f"  {row['backend']} skipped: {row['skipped']}", style="dim"))
        elif row["memory_error"]:
            console.print(Text(f"  {row['backend']} memory not measured: {row['memory_error']}", style="dim"))


def render_targets(result: dict, console: Console) -> None:
    """The speed targets (`bench.targets`): each ratio of two rows of this run, the bound, met or not."""
    table = Table(
        title=f"targets ({load_words(result)}; instruction set: {result['machine'].get('instruction_set', '?')})",
        title_justify="left",
    )
    for column in ("target", "case", "ratio", "needed", "met", "note"):
        table.add_column(column, justify="right" if column in ("ratio", "needed") else "left")
    marks = {True: "yes", False: "NO", None: "—"}
    for row in result["targets"]:
        ratio = "—" if row["ratio"] is None else f"{row['ratio']:.2f}×"
        table.add_row(row["target"], row["cases"], ratio, row["needed"], marks[row["met"]], Text(row["note"]))
    show(console, table)


def render_hf(hf: dict, console: Console) -> None:
    """The `hf` case: one forward pass of a tiny Llama per attention implementation."""
    table = Table(
        title=f"hf: {hf['model']} forward, L = {hf['length']} ({hf['device']})",
        title_justify="left",
        caption=f"× sdpa: time over attn_implementation='sdpa' (target for selfattn: ≤ {hf['target_ratio']}); "
        f"largest logit difference from eager {hf['max_logit_error_vs_eager']:.1e}",
        caption_justify="left",
    )
    for column in ("attn_implementation", "ms", "× sdpa"):
        table.add_column(column, justify="left" if column == "attn_implementation" else "right", no_wrap=True)
    for name, seconds in hf["seconds"].items():
        table.add_row(name, f"{seconds * 1e3:.1f}", f"{hf['ratio_to_sdpa'][name]:.2f}")
    show(console, table)


def render_ring(ring: dict, console: Console) -> None:
    """The `ring` case: time, bytes and memory per rank at each world size, then the simulated scaling."""
    spec = ring["spec"]
    table = Table(
        title=f"ring: causal zigzag ring attention, L = {spec['seq_len']}, forward + backward, "
        f"{ring['threads_per_rank']} thread per rank on {ring['cores']} cores",
        title_justify="left",
        caption="bytes: sent by each rank in one step, measured / by the formula of docs/distributed.md",
        caption_justify="left",
    )
    for column in ("ranks", "s / step", "MB sent per rank (measured / formula)", "peak MiB per rank"):
        table.add_column(column, justify="right", no_wrap=True)
    for m in ring["measured"]:
        ranks = m["ranks"]
        sent = max(sum(r["bytes_sent"].values()) for r in ranks) / 1e6
        formula = max(sum(r["bytes_formula"].values()) for r in ranks) / 1e6
        peak = max(r["peak_extra_bytes"] for r in ranks) / 2**20
        table.add_row(str(m["world"]), f"{m['seconds_per_step']:.3f}", f"{sent:.2f} / {formula:.2f}", f"{peak:.1f}")
    show(console, table)
    simulated = (ring.get("simulated") or {}).get("long")
    if simulated:
        sim = Table(
            title=f"ring, simulated: L = {simulated[0]['seq_len']}, from the measured compute rate and a "
            f"{ring['link_bytes_per_s'] * 8 / 1e9:.0f} Gb/s link",
            title_justify="left",
        )
        for column in ("ranks", "L per rank", "s / step", "speedup", "efficiency", "bound", "MB sent per rank"):
            sim.add_column(column, justify="right", no_wrap=True)
        for row in simulated:
            sim.add_row(
                str(row["world"]),
                str(row["local_len"]),
                f"{row['seconds_per_step']:.3g}",
                f"{row['speedup']:.1f}",
                f"{row['efficiency']:.0%}",
                row["bound"],
                f"{row['bytes_sent_per_rank'] / 1e6:.1f}",
            )
        show(console, sim)


def render(result: dict, console: Console | None = None) -> None:
    """Print the header and every case's table of a `selfattn.bench.run` result."""
    console = console or Console()
    render_header(result, console)
    for case in result["cases"]:
        render_case(case, console)
    if result.get("targets"):
        render_targets(result, console)
    extra = result.get("extra", {})
    if "hf" in extra:
        render_hf(extra["hf"], console)
    if "ring" in extra:
        render_ring(extra["ring"], console)
    if "explain" in extra:
        from .explain_case import render_explain

        render_explain(extra["explain"], console)
    if "gguf" in extra:
        from .gguf_case import render_gguf

        render_gguf(extra["gguf"], console)
    if "attribution" in extra:
        from .attribution_case import render_attribution

        render_attribution(extra["attribution"], console)
    if "bf16" in extra:
        from .bf16_case import render_bf16

        render_bf16(extra["bf16"], console)
    if "command" in extra:
        from .command_case import render_command

        render_command(extra["command"], console)
