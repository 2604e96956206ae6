"""Corpus sentences → padded id tensors, paragraphs packed for long contexts, the next-token loss.

    [<bos>, 一只, 蓝色, 怪兽, …, 。, <eos>, <pad>, <pad>]     one row of a (B, L) batch
     input  = row[:-1]      target = row[1:]      <pad> targets are ignored

A paragraph is what a user pastes: sentence after sentence, <bos> once, <eos> at the end:

    [<bos>, 一只, 蓝色, 怪兽, …, 。, 两条, 红色, 鱼, …, 。, …, 。, <eos>]

`epoch_batches` makes one training epoch: some sentences alone at position 0, the others in
paragraphs of 1..k sentences, most of them placed at a random start position so that every
position embedding is trained (the model's `forward(ids, start=...)`). `paragraphs` packs
sentences in order into rows of exactly max_len + 1 tokens, the longest input the model reads:
that is how the long-input metrics read the validation and test splits.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F

from .. import checks
from .corpus import Sentence

__all__ = [
    "encode_sentences",
    "pad_batch",
    "iterate_batches",
    "plan_paragraphs",
    "paragraphs",
    "epoch_batches",
    "next_token_loss",
]

LOOKAHEAD = 64
"""How far down the queue `plan_paragraphs` looks for a sentence that lets a row end exactly full."""


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


def iterate_batches(
    seqs: Sequence[Sequence[int]], batch_size: int, pad_id: int, *, generator: torch.Generator | None = None
) -> Iterator[torch.Tensor]:
    """(B, L) batches in order, or shuffled by `generator` when one is given."""
    order = (
        torch.randperm(len(seqs), generator=generator) if generator is not None else torch.arange(len(seqs))
    ).tolist()
    for start in range(0, len(order), batch_size):
        yield pad_batch([seqs[i] for i in order[start : start + batch_size]], pad_id)


def _fillable(lengths: set[int], room: int) -> list[bool]:
    """fillable[r]: some multiset of these sentence lengths sums to exactly r (0 <= r <= room)."""
    fillable = [True] + [False] * room
    for r in range(1, room + 1):
        fillable[r] = any(n <= r and fillable[r - n] for n in lengths)
    return fillable


def plan_paragraphs(lengths: Sequence[int], row_len: int) -> list[list[int]]:
    """Which sentences go into which paragraph row: lists of sentence indices, one list per row.

    lengths  tokens of each sentence (without <bos>/<eos>), in the order they are to be used
    row_len  tokens per row, <bos> and <eos> included
    returns  every index exactly once; every row but the last holds exactly row_len - 2 sentence
             tokens when the lengths allow it (the corpus's 10–13 always do)

    Each row takes sentences from the front of the queue; near the end of the row it takes the
    first of the next LOOKAHEAD sentences that still lets the rest of the row be filled exactly
    (skipped sentences stay at the front for the next row).
    """
    checks.integer("row_len (<bos>, a token, <eos>)", row_len, low=3)
    room = row_len - 2
    bad = [n for n in lengths if not 1 <= n <= room]
    if bad:
        raise ValueError(
            f"a sentence of {bad[0]} tokens cannot go into a row of {row_len} tokens "
            f"(room for 1..{room} between <bos> and <eos>)"
        )
    fillable = _fillable(set(lengths), room)
    queue = deque(range(len(lengths)))
    rows: list[list[int]] = []
    while queue:
        row, left = [], room
        while queue and left:
            window = [queue[j] for j in range(min(LOOKAHEAD, len(queue)))]
            fits = [j for j, i in enumerate(window) if lengths[i] <= left]
            if not fits:
                break
            exact = [j for j in fits if fillable[left - lengths[window[j]]]]
            j = (exact or fits)[0]
            row.append(window[j])
            left -= lengths[window[j]]
            del queue[j]
        rows.append(row)
    return rows


def paragraphs(
    tokenizer, sentences: Sequence[Sentence], max_len: int
) -> list[tuple[list[int], list[tuple[Sentence, int]]]]:
    """Corpus sentences packed in order into paragraphs of max_len + 1 tokens: the longest input the model reads.

    returns  [(row ids [<bos>, …, <eos>], [(sentence, position of its first token in the row)])]
             (every corpus word is one token, so word i of a sentence sits at that position + i)
    """
    ids = [tokenizer.encode_words(s.words, bos=False) for s in sentences]
    out = []
    for row in plan_paragraphs([len(x) for x in ids], max_len + 1):
        tokens, placed = [tokenizer.bos_id], []
        for i in row:
            placed.append((sentences[i], len(tokens)))
            tokens += ids[i]
        out.append((tokens + [tokenizer.eos_id], placed))
    return out


def _paragraph_rows(
    sentences: Sequence[Sequence[int]],
    order: list[int],
    max_sentences: int,
    max_len: int,
    bos_id: int,
    eos_id: int,
    generator: torch.Generator,
) -> list[list[int]]:
    """Rows [<bos>, s…, …, <eos>] of 1..max_sentences sentences taken in `order` (uniform count), none
    longer than max_len + 1 tokens."""
    rows, i = [], 0
    while i < len(order):
        want = int(torch.randint(1, max_sentences + 1, (1,), generator=generator))
        row = [bos_id, *sentences[order[i]]]
        i += 1
        while want > 1 and i < len(order) and len(row) + len(sentences[order[i]]) + 1 <= max_len + 1:
            row += sentences[order[i]]
            i += 1
            want -= 1
        rows.append(row + [eos_id])
    return rows


def epoch_batches(
    sentences: Sequence[Sequence[int]],
    *,
    max_sentences: int,
    single_share: float,
    anchored_share: float,
    max_len: int,
    batch_size: int,
    batch_tokens: int,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One epoch of training batches: every sentence once, alone or inside a paragraph, in a shuffled order.

    sentences      id lists without <bos>/<eos>, one per training sentence (shuffled here)
    single_share   this share of them become rows [<bos>, sentence…, <eos>] at position 0, batch_size
                   rows per batch: a text of one sentence, as `selfattn generate` and the metrics read it
    max_sentences  the others become paragraphs of k sentences, k uniform in 1..max_sentences (fewer
                   when max_len + 1 tokens are full); batched by length, about batch_tokens per batch
    anchored_share this share of the paragraphs starts at position 0, where a user's text starts; the
                   others at a random start in [0, max_len + 1 - L], so that every position is trained
                   and the same paragraph is seen at many positions
    returns        [(batch (B, L), start (B,))]: feed batch[:, :-1] at positions start + 0, 1, …
    """
    for name, share in (("single_share", single_share), ("anchored_share", anchored_share)):
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {share!r}")
    for name, v in (("max_sentences", max_sentences), ("batch_size", batch_size), ("batch_tokens", batch_tokens)):
        checks.integer(name, v, low=1)
    longest = max((len(s) for s in sentences), default=0)
    if longest + 2 > max_len + 1:
        raise ValueError(f"a sentence of {longest} tokens does not fit max_len={max_len} with <bos> and <eos>")
    order = torch.randperm(len(sentences), generator=generator).tolist()
    n_single = round(single_share * len(sentences))
    singles = [[bos_id, *sentences[i], eos_id] for i in order[:n_single]]
    batches = [
        (
            pad_batch(singles[i : i + batch_size], pad_id),
            torch.zeros(len(singles[i : i + batch_size]), dtype=torch.long),
        )
        for i in range(0, len(singles), batch_size)
    ]
    rows = sorted(
        _paragraph_rows(sentences, order[n_single:], max_sentences, max_len, bos_id, eos_id, generator), key=len
    )  # similar lengths together: little padding
    i = 0
    while i < len(rows):
        j = i + 1
        while j < len(rows) and (j + 1 - i) * len(rows[j]) <= batch_tokens:
            j += 1
        batch = pad_batch(rows[i:j], pad_id)  # (B, L)
        start = torch.randint(0, max_len + 2 - batch.shape[1], (j - i,), generator=generator)  # (B,)
        start *= torch.rand(j - i, generator=generator) >= anchored_share  # some at 0
        batches.append((batch, start))
        i = j
    return [batches[k] for k in torch.randperm(len(batches), generator=generator).tolist()]


def next_token_loss(logits: torch.Tensor, batch: torch.Tensor, pad_id: int, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of predicting batch[:, 1:] from logits of batch[:, :-1].

    logits  (B, L-1, V)   the model's output on batch[:, :-1]
    batch   (B, L)        ids; <pad> targets do not count
    """
    return F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(), ignore_index=pad_id, reduction=reduction)
