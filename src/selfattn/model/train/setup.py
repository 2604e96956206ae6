"""Everything decided before the first step: corpus, tokenizer, the model's first weights, every epoch's batches.

    s = setup(preset, seed)      a `Setup`: the same for the same preset and seed, bit for bit

The order of the random draws is part of the result (the bundled model is rebuilt bit for bit):
the corpus (its own seeded generator), then `torch.manual_seed(seed)` and the model's
initialisation, then the Fourier position embeddings and the batch order (each its own generator).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..corpus import Corpus, all_words, make_corpus
from ..data import epoch_batches
from ..decoder import INIT_STD, DecoderConfig, DecoderLM
from ..tokenizer import WordTokenizer
from .presets import Preset
from .schedule import make_optimizer

__all__ = ["Setup", "setup", "plan_epochs", "position_counts", "fourier_positions"]


@dataclass
class Setup:
    """Everything decided before the first step: data, model, optimiser, every epoch's batches."""

    corpus: Corpus
    tokenizer: WordTokenizer
    model: DecoderLM
    pos_start: torch.Tensor  # (max_len, d_model) position embeddings before training
    opt: torch.optim.Optimizer
    plan: list[dict]
    counts: torch.Tensor  # (max_len,) training tokens read at each position
    total_steps: int


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


def plan_epochs(p: Preset, train_ids: list[list[int]], tokenizer: WordTokenizer, seed: int) -> list[dict]:
    """Every epoch's batches, decided before training starts (so the schedule knows its length):
    [{"stage", "max_sentences", "batches": [(ids (B, L), start (B,))]}]."""
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


def position_counts(plan: list[dict], max_len: int, pad_id: int) -> torch.Tensor:
    """(max_len,) how many training tokens are read at each position over the whole run."""
    counts = torch.zeros(max_len, dtype=torch.long)
    for epoch in plan:
        for batch, start in epoch["batches"]:
            pos = start[:, None] + torch.arange(batch.shape[1] - 1)  # (B, L-1)
            counts += torch.bincount(pos[batch[:, 1:] != pad_id], minlength=max_len)
    return counts


def setup(p: Preset, seed: int) -> Setup:
    """Corpus, tokenizer, model (initialised from `seed`), optimiser and every epoch's batches of a run."""
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
    plan = plan_epochs(p, train_ids, tokenizer, seed)
    return Setup(
        corpus=corpus,
        tokenizer=tokenizer,
        model=model,
        pos_start=model.pos_emb.weight.detach().clone(),
        opt=make_optimizer(model, p),
        plan=plan,
        counts=position_counts(plan, p.max_len, tokenizer.pad_id),
        total_steps=sum(len(epoch["batches"]) for epoch in plan),
    )
