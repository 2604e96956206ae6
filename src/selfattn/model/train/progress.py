"""The progress bar of a training run (rich, on stderr): epoch, steps, loss, tokens/s, elapsed time, ETA.

Training is a command's long job, and the bar is how it shows it is alive; `progress=False` turns
the bar off (tests, `--no-progress`). The line after each epoch goes to the same stderr console.
"""

from __future__ import annotations

__all__ = ["progress_bar"]


def progress_bar(enabled: bool):
    """A rich Progress on stderr (a no-op when not `enabled`); `bar.console.print` writes the epoch lines."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("epoch {task.fields[epoch]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.3f}"),
        TextColumn("{task.fields[tps]:>8,.0f} tok/s"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not enabled,
    )
