"""Training a `DecoderLM` on the corpus: presets, the loop, evaluation, the checkpoint.

    run_training("default", "out/model", seed=0)
      corpus (make_corpus) → tokenizer (WordTokenizer.from_words) → DecoderLM
      → epochs of AdamW with warmup + cosine decay, a rich progress bar (loss, tokens/s, ETA)
      → validation loss / perplexity / accuracy after each epoch; the epoch with the lowest
        validation loss is the one kept (early stopping)
      → test: perplexity, measure-word agreement, 这+measure agreement, attention probe,
        and how many sentences sampled from the model the grammar accepts
      → out/model/{model.safetensors, config.json, tokenizer.json}  and a loss-curve PNG

Everything random follows from `seed`: the corpus, the initial weights, the batch order.
On the same machine and thread count the result is the same bit for bit.
"""

from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from .checkpoint import FILES, save_checkpoint
from .corpus import all_words, log_prob, make_corpus
from .data import encode_sentences, iterate_batches, next_token_loss
from .decoder import DecoderConfig, DecoderLM
from .evaluate import lm_metrics, measure_agreement, ref_agreement, sample_grammaticality
from .loss_curve import save_loss_curve
from .probe import attention_probe
from .tokenizer import WordTokenizer

__all__ = ["Preset", "PRESETS", "run_training", "default_command", "train_command_line"]


@dataclass(frozen=True)
class Preset:
    """Model size, corpus size and optimiser settings of one training run."""

    d_model: int
    n_layers: int
    n_heads: int
    n_train: int
    n_val: int
    n_test: int
    epochs: int
    batch_size: int
    lr: float
    warmup_steps: int
    weight_decay: float = 0.01
    max_len: int = 32
    dropout: float = 0.0


PRESETS: dict[str, Preset] = {
    # seconds: for tests and trying the command out
    "tiny": Preset(d_model=32, n_layers=1, n_heads=2, n_train=1500, n_val=200, n_test=200,
                   epochs=2, batch_size=32, lr=3e-3, warmup_steps=10),
    # the shipped model: well under 5 minutes on 2 CPU cores
    "default": Preset(d_model=96, n_layers=2, n_heads=4, n_train=16000, n_val=1000, n_test=1000,
                      epochs=2, batch_size=64, lr=2e-3, warmup_steps=100, dropout=0.1),
}

MIN_LR_FRACTION = 0.1
"""The cosine schedule decays the learning rate to this fraction of its peak."""


def train_command_line(preset: str, seed: int, out: str | os.PathLike, overrides: dict | None = None) -> str:
    """The `selfattn train` command line that repeats a run (written into its config.json)."""
    extra = "".join(f" --{k.replace('_', '-')} {v}" for k, v in sorted((overrides or {}).items()))
    return f"selfattn train --preset {preset} --seed {seed}{extra} --out {Path(out).as_posix()}"


def default_command(preset: str = "default", seed: int = 0) -> str:
    """The command that rebuilt the bundled model, as recorded in its config.json."""
    return train_command_line(preset, seed, "src/selfattn/model/default")


def _lr_at(step: int, total: int, preset: Preset) -> float:
    """Linear warmup to preset.lr, then cosine decay to MIN_LR_FRACTION · lr."""
    if step < preset.warmup_steps:
        return preset.lr * (step + 1) / preset.warmup_steps
    progress = (step - preset.warmup_steps) / max(1, total - preset.warmup_steps)
    return preset.lr * (MIN_LR_FRACTION + (1 - MIN_LR_FRACTION) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def _resolve(preset: str | Preset, epochs, batch_size, lr) -> tuple[str, Preset]:
    if isinstance(preset, Preset):
        name = "custom"
    elif isinstance(preset, str):
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
        name, preset = preset, PRESETS[preset]
    else:
        raise TypeError(f"preset must be a str or Preset, got {type(preset).__name__}")
    for label, v in (("epochs", epochs), ("batch_size", batch_size)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{label} must be an int >= 1, got {v!r}")
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < 1):
        raise ValueError(f"lr must be a number in (0, 1), got {lr!r}")
    changes = {k: v for k, v in (("epochs", epochs), ("batch_size", batch_size), ("lr", lr)) if v is not None}
    return name, replace(preset, **changes)


def _progress(enabled: bool):
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    return Progress(
        TextColumn("epoch {task.fields[epoch]}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.3f}"), TextColumn("{task.fields[tps]:>8,.0f} tok/s"),
        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
        console=Console(stderr=True), disable=not enabled,
    )


def run_training(preset: str | Preset = "default", out_dir: str | os.PathLike = "out/model", *, seed: int = 0,
                 epochs: int | None = None, batch_size: int | None = None, lr: float | None = None,
                 plot: str | os.PathLike | None = None, force: bool = False, progress: bool = True,
                 threads: int | None = 1) -> dict:
    """Train, evaluate and save a model; return a summary (what `selfattn train --json` prints).

    preset      a name in PRESETS ("tiny", "default") or a Preset
    out_dir     checkpoint folder; an existing checkpoint there is kept unless force=True
    seed        corpus, initial weights and batch order
    epochs, batch_size, lr   override the preset's values
    plot        loss-curve PNG path (default: out_dir/loss_curve.png)
    progress    show the rich progress bar (on stderr)
    threads     torch threads for the run, restored afterwards (None: leave torch's setting). The
                default 1 is deliberate: these matrices are too small to gain much from a second
                thread, and on a machine whose cores are shared, two spinning OpenMP threads can
                make a step 50× slower
    """
    name, p = _resolve(preset, epochs, batch_size, lr)
    overrides = {k: v for k, v in (("epochs", epochs), ("batch_size", batch_size), ("lr", lr)) if v is not None}
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    out = Path(out_dir)
    if not force:
        for f in FILES:
            if (out / f).exists():
                raise FileExistsError(f"{out / f} already exists; pass force=True (--force) to overwrite")
    plot_path = Path(plot) if plot is not None else out / "loss_curve.png"
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be an int >= 1, got {threads!r}")
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _train(name, p, out, plot_path, seed, overrides, force, progress)
    finally:
        torch.set_num_threads(previous_threads)


def _final_metrics(model: DecoderLM, tokenizer: WordTokenizer, corpus, seed: int) -> dict:
    """Everything `selfattn train` reports about the kept model, on validation and test."""
    floor = -sum(log_prob(s) for s in corpus.val) / sum(len(s.words) + 1 for s in corpus.val)
    return {
        "val": lm_metrics(model, tokenizer, corpus.val),
        "val_grammar_floor": {"loss": floor, "perplexity": math.exp(floor)},
        "test": lm_metrics(model, tokenizer, corpus.test),
        "measure_agreement": measure_agreement(model, tokenizer, corpus.test),
        "ref_agreement": ref_agreement(model, tokenizer, corpus.test),
        "samples": sample_grammaticality(model, tokenizer, n=200, seed=seed),
    }


def _train(name: str, p: Preset, out: Path, plot_path: Path, seed: int, overrides: dict, force: bool,
           progress: bool) -> dict:
    """The body of `run_training`, after its arguments are checked."""
    started = time.perf_counter()
    corpus = make_corpus(p.n_train, p.n_val, p.n_test, seed=seed)
    tokenizer = WordTokenizer.from_words([s.words for s in corpus.train + corpus.val + corpus.test],
                                         user_words=all_words())
    train_ids = encode_sentences(tokenizer, corpus.train)
    torch.manual_seed(seed)
    config = DecoderConfig(vocab_size=tokenizer.vocab_size, d_model=p.d_model, n_layers=p.n_layers,
                           n_heads=p.n_heads, max_len=p.max_len, dropout=p.dropout)
    model = DecoderLM(config)
    decay = [q for n, q in model.named_parameters() if q.dim() >= 2]
    no_decay = [q for n, q in model.named_parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": p.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=p.lr, betas=(0.9, 0.95))
    order = torch.Generator().manual_seed(seed)
    steps_per_epoch = math.ceil(len(train_ids) / p.batch_size)
    total_steps = steps_per_epoch * p.epochs

    step_losses: list[float] = []
    history: list[dict] = []
    best = (float("inf"), 0, None)          # (val loss, epoch, weights): the epoch that is kept
    tokens_seen, train_seconds, step = 0, 0.0, 0
    with _progress(progress) as bar:
        task = bar.add_task("train", total=total_steps, epoch=f"1/{p.epochs}", loss=float("nan"), tps=0.0)
        for epoch in range(1, p.epochs + 1):
            model.train()
            t0 = time.perf_counter()
            epoch_loss, epoch_tokens = 0.0, 0
            for batch in iterate_batches(train_ids, p.batch_size, tokenizer.pad_id, generator=order):  # (B, L)
                for group in opt.param_groups:
                    group["lr"] = _lr_at(step, total_steps, p)
                loss = next_token_loss(model(batch[:, :-1]), batch, tokenizer.pad_id)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                n = int((batch[:, 1:] != tokenizer.pad_id).sum())
                step += 1
                tokens_seen += n
                epoch_tokens += n
                epoch_loss += float(loss.detach()) * n
                step_losses.append(float(loss.detach()))
                elapsed = train_seconds + time.perf_counter() - t0
                bar.update(task, advance=1, epoch=f"{epoch}/{p.epochs}", loss=step_losses[-1], tps=tokens_seen / elapsed)
            train_seconds += time.perf_counter() - t0
            val = lm_metrics(model, tokenizer, corpus.val)
            history.append({"epoch": epoch, "step": step, "train_loss": epoch_loss / epoch_tokens,
                            "val_loss": val["loss"], "val_perplexity": val["perplexity"],
                            "val_accuracy": val["accuracy"], "seconds": round(time.perf_counter() - started, 2)})
            if val["loss"] < best[0]:
                best = (val["loss"], epoch, {k: v.detach().clone() for k, v in model.state_dict().items()})
            bar.console.print(f"epoch {epoch}/{p.epochs}: train loss {epoch_loss / epoch_tokens:.4f} · "
                              f"val loss {val['loss']:.4f} · val ppl {val['perplexity']:.3f} · "
                              f"val acc {val['accuracy']:.2%}")

    model.load_state_dict(best[2])
    model.eval()
    metrics = _final_metrics(model, tokenizer, corpus, seed)
    floor = metrics["val_grammar_floor"]["loss"]
    probe = attention_probe(model, tokenizer, corpus.test)
    seconds = time.perf_counter() - started
    training = {
        "preset": name, "settings": asdict(p), "seed": seed,
        "corpus": {"n_train": p.n_train, "n_val": p.n_val, "n_test": p.n_test, "seed": seed},
        "command": None if name == "custom" else train_command_line(name, seed, out, overrides),
        "history": history, "best_epoch": best[1], "metrics": metrics,
        "probe": {c["query"]: {"heads_hit": c["heads_hit"], "n_heads": c["n_heads"], "example": c["example"]}
                  for c in probe["claims"]},
        "train_seconds": round(train_seconds, 2), "seconds": round(seconds, 2),
        "tokens_per_second": round(tokens_seen / train_seconds), "threads": torch.get_num_threads(),
        "torch": torch.__version__, "machine": platform.machine(),
    }
    files = save_checkpoint(model, tokenizer, out, training=training, force=force)
    files["loss_curve"] = str(save_loss_curve(step_losses, history, plot_path, floor=floor,
                                              title=f"selfattn train --preset {name} --seed {seed}"))
    return {"out_dir": str(out), "files": files, "parameters": model.num_parameters(),
            "vocab_size": tokenizer.vocab_size, "steps": step, **training, "probe": probe}
