"""Training a `DecoderLM` on the corpus: presets, the loop, evaluation, the checkpoint.

    run_training("default", "out/model", seed=0)
      corpus (make_corpus) → tokenizer (WordTokenizer.from_words) → DecoderLM
      → stages of a length curriculum, each some epochs of AdamW (warmup + one cosine decay over
        the whole run), a rich progress bar (loss, tokens/s, ETA). An epoch reads every training
        sentence once: a share alone at position 0, the rest in paragraphs of up to the stage's
        number of sentences, each paragraph at a random start position (`data.epoch_batches`)
      → validation loss after each epoch on the validation sentences read alone and packed into
        paragraphs of max_len tokens; the epoch with the lowest mean of the two is kept
      → test: perplexity, measure-word agreement, 这+measure agreement, attention probe, how many
        sentences sampled from the model the grammar accepts, and the same questions asked of
        sentences late in paragraphs of max_len tokens
      → out/model/{model.safetensors, config.json, tokenizer.json}  and a loss-curve PNG

Everything random follows from `seed`: the corpus, the initial weights, the batch order.
On the same machine and thread count the result is the same bit for bit.
"""

from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from .. import checks
from ..functional import use_backend
from ..limits import MAX_SEED, MAX_THREADS
from .checkpoint import FILES, check_checkpoint_folder, check_creatable, save_checkpoint
from .corpus import all_words, log_prob, make_corpus
from .data import epoch_batches, next_token_loss
from .decoder import INIT_STD, DecoderConfig, DecoderLM
from .evaluate import (
    lm_metrics,
    measure_agreement,
    paragraph_loss,
    paragraph_metrics,
    ref_agreement,
    sample_grammaticality,
)
from .loss_curve import save_loss_curve
from .probe import attention_probe, paragraph_probe
from .tokenizer import WordTokenizer

__all__ = [
    "Stage",
    "Preset",
    "PRESETS",
    "run_training",
    "default_command",
    "train_command_line",
    "fourier_positions",
    "POS_INITS",
]

POS_INITS = ("normal", "fourier")
"""How the position embeddings start: GPT-2's N(0, 0.02), or `fourier_positions`."""


@dataclass(frozen=True)
class Stage:
    """One stage of the length curriculum.

    epochs         passes over the training sentences
    max_sentences  the paragraphs of this stage hold 1..max_sentences sentences (uniform), as many
                   as fit in max_len + 1 tokens
    batch_tokens   about this many tokens per batch of paragraphs
    """

    epochs: int
    max_sentences: int
    batch_tokens: int

    def __post_init__(self):
        for name in ("epochs", "max_sentences", "batch_tokens"):
            checks.integer(f"Stage {name}", getattr(self, name), low=1)


@dataclass(frozen=True)
class Preset:
    """Model size, corpus size, data and optimiser settings of one training run.

    epochs, max_sentences, batch_tokens   the last stage (the one `--epochs` changes)
    curriculum     the stages before it, shortest paragraphs first
    batch_size     rows per batch of single sentences read at position 0
    single_share   share of the sentences of each epoch of the last stage read alone at position 0,
                   as `selfattn generate` and the single-sentence metrics read text (1.0: all of them,
                   no paragraphs at all). The curriculum stages read none alone at position 0
    anchored_share share of the paragraphs that start at position 0; the others start at random
    pos_init       "normal" (GPT-2) or "fourier" (`fourier_positions` with width pos_sigma)
    """

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
    max_sentences: int = 1
    batch_tokens: int = 2048
    curriculum: tuple[Stage, ...] = ()
    single_share: float = 1.0
    anchored_share: float = 0.0
    pos_init: str = "normal"
    pos_sigma: float = 2.0

    def __post_init__(self):
        if self.pos_init not in POS_INITS:
            raise ValueError(f"pos_init must be one of {POS_INITS}, got {self.pos_init!r}")
        for name in ("single_share", "anchored_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)!r}")

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The curriculum, then the last stage."""
        return self.curriculum + (Stage(self.epochs, self.max_sentences, self.batch_tokens),)


PRESETS: dict[str, Preset] = {
    # seconds: for tests and trying the command out (single sentences only, like a short-context model)
    "tiny": Preset(
        d_model=32,
        n_layers=1,
        n_heads=2,
        n_train=1500,
        n_val=200,
        n_test=200,
        epochs=2,
        batch_size=32,
        lr=3e-3,
        warmup_steps=10,
    ),
    # the shipped model: reads up to 1,024 tokens; under 3 minutes on 1 thread of 2 shared cores
    "default": Preset(
        d_model=96,
        n_layers=2,
        n_heads=4,
        n_train=16000,
        n_val=1000,
        n_test=1000,
        epochs=4,
        batch_size=64,
        lr=2e-3,
        warmup_steps=100,
        max_len=1024,
        max_sentences=80,
        batch_tokens=2048,
        curriculum=(Stage(2, 1, 896), Stage(1, 4, 896), Stage(1, 16, 1280), Stage(3, 40, 2048)),
        single_share=0.1,
        anchored_share=0.3,
        pos_init="fourier",
        pos_sigma=2.0,
    ),
}

MIN_LR_FRACTION = 0.1
"""The cosine schedule decays the learning rate to this fraction of its peak."""

TRAIN_BACKEND = "sdpa"
"""The attention backend while training (and choosing the epoch to keep). Fixed rather than "auto",
whose choice follows a cost model (`selfattn.kernels.cost`) that may be retuned: a rebuild of the
bundled model must not change with it. The trained model is handed back with "auto"."""

ADAM_BETAS = (0.9, 0.95)
"""AdamW's (β1, β2): the values of GPT-3 and nanoGPT; a β2 below 0.999 steadies training on short runs."""

CLIP_NORM = 1.0
"""The gradients of every step are clipped to this global L2 norm."""

SAMPLED_SENTENCES = 200
"""Sentences sampled from <bos> to measure how many the grammar accepts, after training."""


def train_command_line(preset: str, seed: int, out: str | os.PathLike, overrides: dict | None = None) -> str:
    """The `selfattn train` command line that repeats a run (written into its config.json)."""
    extra = "".join(f" --{k.replace('_', '-')} {v}" for k, v in sorted((overrides or {}).items()))
    return f"selfattn train --preset {preset} --seed {seed}{extra} --out {Path(out).as_posix()}"


def default_command(preset: str = "default", seed: int = 0) -> str:
    """The command that rebuilt the bundled model, as recorded in its config.json."""
    return train_command_line(preset, seed, "src/selfattn/model/default")


def fourier_positions(max_len: int, d_model: int, sigma: float, generator: torch.Generator) -> torch.Tensor:
    """Position embeddings that start out alike for nearby positions, everywhere: (max_len, d_model).

    Row i = a · [cos(ω_1 i) … cos(ω_m i), sin(ω_1 i) … sin(ω_m i)] with ω_k ~ N(0, 1/sigma²), the
    random Fourier features of a Gaussian kernel, so that

        row_i · row_j  ≈  INIT_STD² · d_model · exp(−(i − j)² / 2 sigma²)

    for every i, j in [0, max_len): position 500 resembles 499 as much as 5 resembles 4, and
    "one position back" is the same rotation of the features everywhere. Each entry has the
    root-mean-square INIT_STD of GPT-2's N(0, 0.02) initialisation (a = INIT_STD · √2).
    """
    m = (d_model + 1) // 2
    omega = torch.randn(m, generator=generator, dtype=torch.float64) / sigma  # (m,)
    angle = torch.arange(max_len, dtype=torch.float64)[:, None] * omega  # (max_len, m)
    features = torch.cat([angle.cos(), angle.sin()], dim=1)[:, :d_model]  # (max_len, d_model)
    return (features * INIT_STD * math.sqrt(2)).float()


def _lr_at(step: int, total: int, preset: Preset) -> float:
    """Linear warmup to preset.lr, then cosine decay to MIN_LR_FRACTION · lr."""
    if step < preset.warmup_steps:
        return preset.lr * (step + 1) / preset.warmup_steps
    progress = (step - preset.warmup_steps) / max(1, total - preset.warmup_steps)
    return preset.lr * (MIN_LR_FRACTION + (1 - MIN_LR_FRACTION) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def _resolve(preset: str | Preset, epochs, batch_size, lr) -> tuple[str, Preset, dict]:
    """(the preset's name, the preset with the overrides applied, the overrides given: {name: value})."""
    if isinstance(preset, Preset):
        name = "custom"
    elif isinstance(preset, str):
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
        name, preset = preset, PRESETS[preset]
    else:
        raise TypeError(f"preset must be a str or Preset, got {type(preset).__name__}")
    for label, v in (("epochs", epochs), ("batch_size", batch_size)):
        checks.optional_integer(label, v, low=1)
    if lr is not None:
        checks.real("lr", lr, low=0, low_open=True, high=1, high_open=True)
    overrides = {k: v for k, v in (("epochs", epochs), ("batch_size", batch_size), ("lr", lr)) if v is not None}
    return name, replace(preset, **overrides), overrides


def _progress(enabled: bool):
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
    name, p, overrides = _resolve(preset, epochs, batch_size, lr)
    checks.integer("seed", seed, low=0, high=MAX_SEED)
    checks.optional_integer("threads", threads, low=1, high=MAX_THREADS)
    checks.boolean("force", force)
    out = Path(out_dir)
    plot_path = Path(plot) if plot is not None else out / "loss_curve.png"
    _check_outputs(out, plot_path, force)
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
        "samples": sample_grammaticality(model, tokenizer, n=SAMPLED_SENTENCES, seed=seed),
        "paragraphs": paragraph_metrics(model, tokenizer, corpus.test),
    }


def _plan(p: Preset, train_ids: list[list[int]], tokenizer: WordTokenizer, seed: int) -> list[dict]:
    """Every epoch's batches, decided before training starts (so the schedule knows its length)."""
    order = torch.Generator().manual_seed(seed)
    plan = []
    for number, stage in enumerate(p.stages, 1):
        for _ in range(stage.epochs):
            last = number == len(p.stages)
            batches = epoch_batches(
                train_ids,
                max_sentences=stage.max_sentences,
                single_share=p.single_share if last else 0.0,
                anchored_share=p.anchored_share,
                max_len=p.max_len,
                batch_size=p.batch_size,
                batch_tokens=stage.batch_tokens,
                bos_id=tokenizer.bos_id,
                eos_id=tokenizer.eos_id,
                pad_id=tokenizer.pad_id,
                generator=order,
            )
            plan.append({"stage": number, "max_sentences": stage.max_sentences, "batches": batches})
    return plan


def _probe_record(probe: dict) -> dict:
    """What config.json (and `selfattn train --json`) keeps of `attention_probe`: the threshold, and per claim
    {query: {"heads_hit", "n_heads", "example"}}."""
    return {
        "threshold": probe["threshold"],
        **{
            c["query"]: {"heads_hit": c["heads_hit"], "n_heads": c["n_heads"], "example": c["example"]}
            for c in probe["claims"]
        },
    }


def _late_claim(claim: dict) -> dict:
    """What config.json keeps of one `paragraph_probe` claim: heads hit, and the head with the highest lift
    (the one place that picks it; `selfattn.render.train` prints it)."""
    best = max(claim["heads"], key=lambda h: h["lift"])
    return {
        "targets": claim["targets"],
        "heads_hit": claim["heads_hit"],
        "n_heads": claim["n_heads"],
        "best_head": {
            "layer": best["layer"],
            "head": best["head"],
            "lift": round(best["lift"], 2),
            "mean_weight": round(best["mean_weight"], 4),
            "hit_rate": round(best["hit_rate"], 4),
        },
    }


def _position_counts(plan: list[dict], max_len: int, pad_id: int) -> torch.Tensor:
    """(max_len,) how many training tokens are read at each position over the whole run."""
    counts = torch.zeros(max_len, dtype=torch.long)
    for epoch in plan:
        for batch, start in epoch["batches"]:
            pos = start[:, None] + torch.arange(batch.shape[1] - 1)  # (B, L-1)
            counts += torch.bincount(pos[batch[:, 1:] != pad_id], minlength=max_len)
    return counts


def _check_outputs(out: Path, plot_path: Path, force: bool) -> None:
    """Refuse, before any work, what the save at the end would refuse: an `out` that is a file, an existing
    checkpoint or picture without `force`, a folder that cannot be created or written."""
    check_checkpoint_folder(out, force=force)
    check_creatable(out / FILES[0], force=force)
    check_creatable(plot_path, force=force)


@dataclass
class _Setup:
    """Everything decided before the first step: data, model, optimiser, every epoch's batches."""

    corpus: object
    tokenizer: WordTokenizer
    model: DecoderLM
    pos_start: torch.Tensor  # (max_len, d_model) position embeddings before training
    opt: torch.optim.Optimizer
    plan: list[dict]
    counts: torch.Tensor  # (max_len,) training tokens read at each position
    total_steps: int


@dataclass
class _Run:
    """What the loop produced: per-step losses, per-epoch history, the kept epoch and its weights."""

    step_losses: list[float] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)
    best_loss: float = float("inf")
    best_epoch: int = 0
    best_state: dict | None = None
    tokens_seen: int = 0
    train_seconds: float = 0.0
    step: int = 0


def _setup(p: Preset, seed: int) -> _Setup:
    corpus = make_corpus(p.n_train, p.n_val, p.n_test, seed=seed)
    tokenizer = WordTokenizer.from_words(
        [s.words for s in corpus.train + corpus.val + corpus.test], user_words=all_words()
    )
    train_ids = [tokenizer.encode_words(s.words, bos=False) for s in corpus.train]
    torch.manual_seed(seed)
    config = DecoderConfig(
        vocab_size=tokenizer.vocab_size,
        d_model=p.d_model,
        n_layers=p.n_layers,
        n_heads=p.n_heads,
        max_len=p.max_len,
        dropout=p.dropout,
    )
    model = DecoderLM(config)
    if p.pos_init == "fourier":
        with torch.no_grad():
            model.pos_emb.weight.copy_(
                fourier_positions(p.max_len, p.d_model, p.pos_sigma, torch.Generator().manual_seed(seed))
            )
    plan = _plan(p, train_ids, tokenizer, seed)
    return _Setup(
        corpus=corpus,
        tokenizer=tokenizer,
        model=model,
        pos_start=model.pos_emb.weight.detach().clone(),
        opt=_optimizer(model, p),
        plan=plan,
        counts=_position_counts(plan, p.max_len, tokenizer.pad_id),
        total_steps=sum(len(epoch["batches"]) for epoch in plan),
    )


def _optimizer(model: DecoderLM, p: Preset) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices only (not on norms and biases), as nanoGPT."""
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": p.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=p.lr,
        betas=ADAM_BETAS,
    )


def _train_epoch(s: _Setup, p: Preset, part: dict, run: _Run, bar, task, label: str) -> tuple[float, int]:
    """One pass over `part["batches"]`: (summed token loss, tokens). Updates `run` step by step."""
    s.model.train()
    t0 = time.perf_counter()
    epoch_loss, epoch_tokens = 0.0, 0
    for batch, start in part["batches"]:  # (B, L), (B,)
        for group in s.opt.param_groups:
            group["lr"] = _lr_at(run.step, s.total_steps, p)
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


def _validate(s: _Setup) -> tuple[dict, dict, float]:
    """(validation metrics of single sentences, of paragraphs, the loss that chooses the kept epoch)."""
    val = lm_metrics(s.model, s.tokenizer, s.corpus.val)
    val_par = paragraph_loss(s.model, s.tokenizer, s.corpus.val)
    return val, val_par, (val["loss"] + val_par["loss"]) / 2


def _loop(s: _Setup, p: Preset, progress: bool, started: float) -> _Run:
    """Every epoch of the plan, on TRAIN_BACKEND; keeps the weights of the epoch with the lowest selection loss."""
    run = _Run()
    with use_backend(TRAIN_BACKEND), _progress(progress) as bar:
        task = bar.add_task("train", total=s.total_steps, epoch=f"1/{len(s.plan)}", loss=float("nan"), tps=0.0)
        for epoch, part in enumerate(s.plan, 1):
            label = f"{epoch}/{len(s.plan)} (≤{part['max_sentences']} sentences)"
            epoch_loss, epoch_tokens = _train_epoch(s, p, part, run, bar, task, label)
            val, val_par, chosen_by = _validate(s)
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


def _training_record(
    name: str,
    p: Preset,
    seed: int,
    out: Path,
    overrides: dict,
    s: _Setup,
    run: _Run,
    metrics: dict,
    probe: dict,
    late_probe: dict,
    started: float,
) -> dict:
    """The "training" section of config.json: settings, history, metrics, probes, positions, speed."""
    moved = (s.model.pos_emb.weight.detach() - s.pos_start).norm(dim=-1) / s.pos_start.norm(dim=-1)  # (max_len,)
    return {
        "preset": name,
        "settings": asdict(p),
        "seed": seed,
        "corpus": {"n_train": p.n_train, "n_val": p.n_val, "n_test": p.n_test, "seed": seed},
        "command": None if name == "custom" else train_command_line(name, seed, out, overrides),
        "history": run.history,
        "best_epoch": run.best_epoch,
        "metrics": metrics,
        "probe": _probe_record(probe),
        "paragraph_probe": {
            "n": late_probe["n"],
            "from": late_probe["from"],
            **{c["query"]: _late_claim(c) for c in late_probe["claims"]},
        },
        "positions": {
            "max_len": p.max_len,
            "min_tokens": int(s.counts.min()),
            "max_tokens": int(s.counts.max()),
            "untrained": int((s.counts == 0).sum()),
            "min_relative_change": round(float(moved.min()), 4),
            "median_relative_change": round(float(moved.median()), 4),
        },
        "train_seconds": round(run.train_seconds, 2),
        "seconds": round(time.perf_counter() - started, 2),
        "tokens_per_second": round(run.tokens_seen / run.train_seconds),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.machine(),
    }


def _train(
    name: str, p: Preset, out: Path, plot_path: Path, seed: int, overrides: dict, force: bool, progress: bool
) -> dict:
    """The body of `run_training`, after its arguments and outputs are checked: set up, train, evaluate, save."""
    started = time.perf_counter()
    s = _setup(p, seed)
    run = _loop(s, p, progress, started)
    s.model.load_state_dict(run.best_state)
    s.model.eval()
    metrics = _final_metrics(s.model, s.tokenizer, s.corpus, seed)
    probe = attention_probe(s.model, s.tokenizer, s.corpus.test)
    late_probe = paragraph_probe(s.model, s.tokenizer, s.corpus.test)
    training = _training_record(name, p, seed, out, overrides, s, run, metrics, probe, late_probe, started)
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
