"""What a training run is asked to do: the presets (model size, corpus, curriculum, optimiser settings).

PRESETS["default"]                  the shipped model; PRESETS["tiny"] for tests and trying it out
resolve("tiny", epochs=3, ...)      (name, the preset with the overrides applied, the overrides)
train_command_line(name, seed, out, overrides)   the `selfattn train` line that repeats a run
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from ... import checks

__all__ = ["POS_INITS", "Stage", "Preset", "PRESETS", "resolve", "train_command_line", "default_command"]

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


def resolve(preset: str | Preset, epochs=None, batch_size=None, lr=None) -> tuple[str, Preset, dict]:
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


def train_command_line(preset: str, seed: int, out: str | os.PathLike, overrides: dict | None = None) -> str:
    """The `selfattn train` command line that repeats a run (written into its config.json)."""
    extra = "".join(f" --{k.replace('_', '-')} {v}" for k, v in sorted((overrides or {}).items()))
    return f"selfattn train --preset {preset} --seed {seed}{extra} --out {Path(out).as_posix()}"


def default_command(preset: str = "default", seed: int = 0) -> str:
    """The command that rebuilt the bundled model, as recorded in its config.json."""
    return train_command_line(preset, seed, "src/selfattn/model/default")
