"""How the weights move: AdamW with its settings, the learning rate at each step, gradient clipping.

lr_at(step, total, preset)     linear warmup to preset.lr, then one cosine decay over the whole run
make_optimizer(model, preset)  AdamW, weight decay on matrices only
"""

from __future__ import annotations

import math

import torch

from ..decoder import DecoderLM
from .presets import Preset

__all__ = ["MIN_LR_FRACTION", "ADAM_BETAS", "CLIP_NORM", "lr_at", "make_optimizer"]

MIN_LR_FRACTION = 0.1
"""The cosine schedule decays the learning rate to this fraction of its peak."""

ADAM_BETAS = (0.9, 0.95)
"""AdamW's (β1, β2): the values of GPT-3 and nanoGPT; a β2 below 0.999 steadies training on short runs."""

CLIP_NORM = 1.0
"""The gradients of every step are clipped to this global L2 norm."""


def lr_at(step: int, total: int, preset: Preset) -> float:
    """Linear warmup to preset.lr, then cosine decay to MIN_LR_FRACTION · lr.

    Not `torch.optim.lr_scheduler` (SequentialLR of LinearLR and CosineAnnealingLR): its cosine is recursive, each
    step's rate computed from the last, so its floats drift from this closed form, and the bundled model is rebuilt
    bit for bit from these rates; the loop sets each step's rate from the step alone (`loop.train_epoch`)."""
    if step < preset.warmup_steps:
        return preset.lr * (step + 1) / preset.warmup_steps
    progress = (step - preset.warmup_steps) / max(1, total - preset.warmup_steps)
    return preset.lr * (MIN_LR_FRACTION + (1 - MIN_LR_FRACTION) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def make_optimizer(model: DecoderLM, preset: Preset) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices only (not on norms and biases), as nanoGPT."""
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": preset.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=preset.lr,
        betas=ADAM_BETAS,
    )
