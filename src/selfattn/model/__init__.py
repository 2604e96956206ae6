"""A decoder-only model of the tutorial's sentences, and loaders for real checkpoints.

    corpus          deterministic sentences 一只 / 蓝色 / 怪兽 / 走进 / 森林 … (pure Python)
    grammar         does a word sequence follow the corpus grammar? (pure Python)
    tokenizer       jieba words + vocabulary + character fallback, saved as JSON
    data            sentences → padded (B, L) id batches, next-token loss
    decoder         DecoderLM: embeddings, pre-norm blocks of MultiHeadSelfAttention, LM head
    encoder         Encoder: BERT-style post-norm blocks of MultiHeadSelfAttention(causal=False)
    generate        greedy / temperature / top-k decoding, with a KV cache
    train/          training, one room per job: presets, setup, schedule, loop, progress, records, run;
                    parallel: context-parallel training (train_step, the torchrun entry point);
                    loss_curve draws the run's PNG
    evaluate        perplexity, next-token accuracy, measure-word agreement, sampled grammaticality
    probe           in how many heads a word's strongest attention goes where the tutorial says (the
                    weights recorded at the attention calls of a forward pass: `attention_maps`)
    checkpoint      safetensors + config.json + tokenizer.json, saved as a unit; `load_default()`
    safetensors_io  writing weight files (safetensors' save, tied tensors once), reading them checking every name
                    and shape
    hf              Hugging Face GPT-2 and BERT directories → DecoderLM / Encoder

What `selfattn train` / `selfattn generate` print is drawn by `selfattn.render`, called by the CLI.

Importing this package imports neither torch nor jieba; `load_default` does, when called.
"""

from __future__ import annotations

from ..extras import require

require("explain", "selfattn.model (the bundled model, training)")  # not in a core install: one line naming the extra

__all__ = ["load_default", "load_checkpoint"]


def load_default(*, device="cpu"):
    """The bundled default model: `model, tokenizer, info = load_default()`."""
    from .checkpoint import load_default as _load_default

    return _load_default(device=device)


def load_checkpoint(path, *, device="cpu"):
    """A checkpoint folder written by `selfattn train`: `model, tokenizer, info = load_checkpoint(path)`."""
    from .checkpoint import load_checkpoint as _load_checkpoint

    return _load_checkpoint(path, device=device)
