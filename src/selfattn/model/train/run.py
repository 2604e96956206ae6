"""`run_training`: check every output, train, evaluate, save the checkpoint and the loss curve.

    run_training("default", "out/model", seed=0)  ->  the summary `selfattn train --json` prints

The outputs are checked before any work (a run that could not be saved fails at once); the
checkpoint is saved as a unit (`checkpoint.save_checkpoint`), then the loss-curve PNG.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from ... import checks
from ...files import check_creatable
from ...limits import MAX_SEED, MAX_THREADS
from ..checkpoint import FILES, check_checkpoint_folder, save_checkpoint
from ..loss_curve import save_loss_curve
from ..tutorial_probe import attention_probe, paragraph_probe
from .loop import loop
from .presets import Preset, resolve
from .records import final_metrics, training_record
from .setup import setup as _setup

__all__ = ["run_training", "check_outputs"]


def run_training(
    preset: str | Preset = "default",
    out_dir: str | os.PathLike = "out/model",
    *,
    seed: int = 0,
    epochs: int | None = None,
    batch_size: int | None = None,
    lr: float | None = None,
    plot: str | os.PathLike | None = None,
    force: bool = False,
    progress: bool = True,
    threads: int | None = 1,
) -> dict:
    """Train, evaluate and save a model; return a summary (what `selfattn train --json` prints).

    preset      a name in PRESETS ("tiny", "default") or a Preset
    out_dir     checkpoint folder; an existing checkpoint there is kept unless force=True. Every output is
                checked before training starts, so a run that could not be saved fails at once
    seed        corpus, initial weights and batch order
    epochs, batch_size, lr   override the preset's values
    plot        loss-curve PNG path (default: out_dir/loss_curve.png); an existing one is kept unless force=True
    progress    show the rich progress bar (on stderr)
    threads     torch threads for the run, restored afterwards (None: leave torch's setting). The
                default 1 is deliberate: these matrices are too small to gain much from a second
                thread, and on a machine whose cores are shared, two spinning OpenMP threads can
                make a step 50× slower
    """
    name, p, overrides = resolve(preset, epochs, batch_size, lr)
    checks.integer("seed", seed, low=0, high=MAX_SEED)
    checks.optional_integer("threads", threads, low=1, high=MAX_THREADS)
    checks.boolean("force", force)
    out = Path(out_dir)
    plot_path = Path(plot) if plot is not None else out / "loss_curve.png"
    check_outputs(out, plot_path, force)
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _train(name, p, out, plot_path, seed, overrides, force, progress)
    finally:
        torch.set_num_threads(previous_threads)


def check_outputs(out: Path, plot_path: Path, force: bool) -> None:
    """Refuse, before any work, what the save at the end would refuse: an `out` that is a file, an existing
    checkpoint or picture without `force`, a folder that cannot be created or written."""
    check_checkpoint_folder(out, force=force)
    check_creatable(out / FILES[0], force=force)
    check_creatable(plot_path, force=force)


def _train(
    name: str, p: Preset, out: Path, plot_path: Path, seed: int, overrides: dict, force: bool, progress: bool
) -> dict:
    """The body of `run_training`, after its arguments and outputs are checked: set up, train, evaluate, save."""
    started = time.perf_counter()
    s = _setup(p, seed)
    run = loop(s, p, progress, started)
    if run.best_state is None:
        raise ValueError("no epoch had a finite validation loss: there is no best state to keep")
    s.model.load_state_dict(run.best_state)
    s.model.eval()
    metrics = final_metrics(s.model, s.tokenizer, s.corpus, seed)
    probe = attention_probe(s.model, s.tokenizer, s.corpus.test)
    late_probe = paragraph_probe(s.model, s.tokenizer, s.corpus.test)
    training = training_record(name, p, seed, out, overrides, s, run, metrics, probe, late_probe, started)
    files = save_checkpoint(s.model, s.tokenizer, out, training=training, force=force)
    files["loss_curve"] = str(
        save_loss_curve(
            run.step_losses,
            run.history,
            plot_path,
            force=force,
            floor=metrics["val_grammar_floor"]["loss"],
            title=f"selfattn train --preset {name} --seed {seed}",
        )
    )
    return {
        "out_dir": str(out),
        "files": files,
        "parameters": s.model.num_parameters(),
        "vocab_size": s.tokenizer.vocab_size,
        "steps": run.step,
        **training,
    }
