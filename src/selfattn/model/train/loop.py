"""The training loop: every epoch of the plan, a validation after each, the best epoch's weights kept.

run = loop(setup, preset, progress=True, started=time.perf_counter())
  → run.step_losses, run.history (one row per epoch), run.best_epoch, run.best_state
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ...functional import use_backend
from ...terminal import progress_bar
from ..data import next_token_loss
from ..evaluate import lm_metrics, paragraph_loss
from .presets import Preset
from .schedule import CLIP_NORM, lr_at
from .setup import Setup

__all__ = ["TRAIN_BACKEND", "Run", "loop", "train_epoch", "validate"]

TRAIN_BACKEND = "sdpa"
"""The attention backend while training (and choosing the epoch to keep). Fixed rather than "auto",
whose choice follows a cost model (`selfattn.kernels.cost`) that may be retuned: a rebuild of the
bundled model must not change with it. The trained model is handed back with "auto"."""


@dataclass
class Run:
    """What the loop produced: per-step losses, per-epoch history, the kept epoch and its weights."""

    step_losses: list[float] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)
    best_loss: float = float("inf")
    best_epoch: int = 0
    best_state: dict | None = None
    tokens_seen: int = 0
    train_seconds: float = 0.0
    step: int = 0


def train_epoch(s: Setup, p: Preset, part: dict, run: Run, bar, task, label: str) -> tuple[float, int]:
    """One pass over `part["batches"]`: (summed token loss, tokens). Updates `run` step by step."""
    s.model.train()
    t0 = time.perf_counter()
    epoch_loss, epoch_tokens = 0.0, 0
    for batch, start in part["batches"]:  # (B, L), (B,)
        for group in s.opt.param_groups:
            group["lr"] = lr_at(run.step, s.total_steps, p)
        loss = next_token_loss(s.model(batch[:, :-1], start=start), batch, s.tokenizer.pad_id)
        s.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(s.model.parameters(), CLIP_NORM)
        s.opt.step()
        n = int((batch[:, 1:] != s.tokenizer.pad_id).sum())
        run.step += 1
        run.tokens_seen += n
        epoch_tokens += n
        epoch_loss += float(loss.detach()) * n
        run.step_losses.append(float(loss.detach()))
        elapsed = run.train_seconds + time.perf_counter() - t0
        bar.update(task, advance=1, epoch=label, loss=run.step_losses[-1], tps=run.tokens_seen / elapsed)
    run.train_seconds += time.perf_counter() - t0
    return epoch_loss, epoch_tokens


def validate(s: Setup) -> tuple[dict, dict, float]:
    """(validation metrics of single sentences, of paragraphs, the loss that chooses the kept epoch)."""
    val = lm_metrics(s.model, s.tokenizer, s.corpus.val)
    val_par = paragraph_loss(s.model, s.tokenizer, s.corpus.val)
    return val, val_par, (val["loss"] + val_par["loss"]) / 2


def loop(s: Setup, p: Preset, progress: bool, started: float) -> Run:
    """Every epoch of the plan, on TRAIN_BACKEND; keeps the weights of the epoch with the lowest selection loss."""
    run = Run()
    fields = ("loss {task.fields[loss]:.3f}", "{task.fields[tps]:>8,.0f} tok/s")
    with use_backend(TRAIN_BACKEND), progress_bar(progress, "epoch {task.fields[epoch]}", *fields) as bar:
        task = bar.add_task("train", total=s.total_steps, epoch=f"1/{len(s.plan)}", loss=float("nan"), tps=0.0)
        for epoch, part in enumerate(s.plan, 1):
            label = f"{epoch}/{len(s.plan)} (≤{part['max_sentences']} sentences)"
            epoch_loss, epoch_tokens = train_epoch(s, p, part, run, bar, task, label)
            val, val_par, chosen_by = validate(s)
            run.history.append(
                {
                    "epoch": epoch,
                    "stage": part["stage"],
                    "max_sentences": part["max_sentences"],
                    "step": run.step,
                    "train_loss": epoch_loss / epoch_tokens,
                    "val_loss": val["loss"],
                    "val_perplexity": val["perplexity"],
                    "val_accuracy": val["accuracy"],
                    "val_paragraph_loss": val_par["loss"],
                    "val_paragraph_perplexity": val_par["perplexity"],
                    "seconds": round(time.perf_counter() - started, 2),
                }
            )
            if chosen_by < run.best_loss:
                run.best_loss, run.best_epoch = chosen_by, epoch
                run.best_state = {k: v.detach().clone() for k, v in s.model.state_dict().items()}
            bar.console.print(
                f"epoch {label}: train loss {epoch_loss / epoch_tokens:.4f} · "
                f"val loss {val['loss']:.4f} (ppl {val['perplexity']:.3f}) · "
                f"val paragraphs loss {val_par['loss']:.4f} (ppl {val_par['perplexity']:.3f})",
                markup=False,
            )
    return run
