"""Corpus sentences → padded id tensors, and the next-token loss on them.

    [<bos>, 一只, 蓝色, 怪兽, …, 。, <eos>, <pad>, <pad>]     one row of a (B, L) batch
     input  = row[:-1]      target = row[1:]      <pad> targets are ignored
"""

from __future__ import annotations

from typing import Iterator, Sequence

import torch
import torch.nn.functional as F

from .corpus import Sentence

__all__ = ["encode_sentences", "pad_batch", "iterate_batches", "next_token_loss"]


def encode_sentences(tokenizer, sentences: Sequence[Sentence]) -> list[list[int]]:
    """[<bos>] + word ids + [<eos>] for each sentence (its words are jieba's cut of its text)."""
    return [tokenizer.encode_words(s.words, bos=True, eos=True) for s in sentences]


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """List of id lists → (B, L) int64, right-padded with pad_id to the longest."""
    if not seqs:
        raise ValueError("cannot make a batch of 0 sequences")
    L = max(len(s) for s in seqs)
    out = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def iterate_batches(seqs: Sequence[Sequence[int]], batch_size: int, pad_id: int, *,
                    generator: torch.Generator | None = None) -> Iterator[torch.Tensor]:
    """(B, L) batches in order, or shuffled by `generator` when one is given."""
    order = (torch.randperm(len(seqs), generator=generator) if generator is not None
             else torch.arange(len(seqs))).tolist()
    for start in range(0, len(order), batch_size):
        yield pad_batch([seqs[i] for i in order[start: start + batch_size]], pad_id)


def next_token_loss(logits: torch.Tensor, batch: torch.Tensor, pad_id: int, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of predicting batch[:, 1:] from logits of batch[:, :-1].

    logits  (B, L-1, V)   the model's output on batch[:, :-1]
    batch   (B, L)        ids; <pad> targets do not count
    """
    return F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(), ignore_index=pad_id, reduction=reduction)
