"""The training loss curve as a PNG (matplotlib's Agg canvas: no display, no global pyplot state)."""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path

from ..files import write_atomic

__all__ = ["save_loss_curve"]

SMOOTHING = 0.9
"""Exponential moving average factor for the per-step training loss."""

FIGURE_INCHES = (7, 4)
"""Width and height of the picture in inches."""

DPI = 110
"""Dots per inch: FIGURE_INCHES × DPI = 770 × 440 pixels."""


def save_loss_curve(
    step_losses: Sequence[float],
    epochs: Sequence[dict],
    path: str | os.PathLike,
    title: str = "selfattn train",
    floor: float | None = None,
    force: bool = False,
) -> Path:
    """Plot per-step training loss (raw and smoothed) and per-epoch validation loss.

    step_losses  training loss of every optimiser step
    epochs       dicts with "step" (the step the epoch ended at), "val_loss" and "val_paragraph_loss"
                 (`run_training`'s history: every epoch has all three)
    floor        the grammar's own cross-entropy on the validation split, drawn as a dashed line
    force        replace an existing file at `path` (else FileExistsError); written atomically either way
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    smooth, avg = [], None
    for x in step_losses:
        avg = x if avg is None else SMOOTHING * avg + (1 - SMOOTHING) * x
        smooth.append(avg)
    fig = Figure(figsize=FIGURE_INCHES, dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    steps = range(1, len(step_losses) + 1)
    ax.plot(steps, step_losses, color="tab:blue", alpha=0.25, linewidth=0.8, label="train loss (per step)")
    ax.plot(steps, smooth, color="tab:blue", linewidth=1.6, label=f"train loss (EMA {SMOOTHING})")
    ends = [e["step"] for e in epochs]
    ax.plot(
        ends,
        [e["val_loss"] for e in epochs],
        "o-",
        color="tab:orange",
        linewidth=1.6,
        label="validation loss (per epoch)",
    )
    ax.plot(
        ends,
        [e["val_paragraph_loss"] for e in epochs],
        "s--",
        color="tab:green",
        linewidth=1.2,
        label="validation paragraphs (per epoch)",
    )
    if floor is not None:
        ax.axhline(floor, color="gray", linestyle="--", linewidth=1.0, label=f"grammar floor ({floor:.3f})")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png")
    return write_atomic(path, png.getvalue(), force=force)
