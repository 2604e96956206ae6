"""The induction probe: random ordinary tokens repeated twice, framed as the tokenizer frames a text, and every
head's measures on it (`analysis.heads.measures`), the one probe `selfattn heads`, `Explanation.heads()`, the
explain sentences and the model view read, so every view gives a head the same verdict (`analysis.verdicts`).

    frame(explainer)                     (prefix, suffix): the ids the tokenizer puts around every text
    probe_bos(explainer)                 the probe's first token when it is a BOS, and whether it was added
    probe_ids(explainer, length, seed=)  the probe's ids
    probe_input(explainer, length, seed=)  what its forward pass reads (labels, ids, keywords), for
                                         `tracing.probe_trace` (its trace) and `tracing.probe` (every head's measures)

A token the tokenizer adds by itself (a <bos>, BERT's [CLS] … [SEP]) is found once per explainer by tokenizing
the empty text (`frame`): the probe is framed by them. With a `capture.cache.TraceCache` (the app's, an
Explanation's) the probe's trace is kept there under `probe_key(length, seed)`, so it runs once per cache and
model, whatever the text. It never reads an intervention: it measures the model as it is.
"""

from __future__ import annotations

import inspect

import numpy as np
import torch

from .analysis import head_types

__all__ = [
    "PROBE_LENGTH",
    "PROBE_TRIES",
    "PROBE_KEY",
    "NoProbe",
    "frame",
    "own_ids",
    "vocab_size",
    "bos_id",
    "probe_bos",
    "probe_ids",
    "probe_key",
    "probe_input",
]

PROBE_LENGTH = 30
"""Random tokens in each copy of the induction probe (fewer when the model reads fewer or knows fewer)."""
PROBE_TRIES = 50
"""Candidate ids drawn per probe token before giving up (an id is kept only if it is an ordinary token)."""
PROBE_KEY = "induction probe"
"""The first item of the probe's cache key (a text's key is (text, intervention): two items, never this)."""


class NoProbe(ValueError):
    """The model has no induction probe: it reads too few tokens, or its vocabulary holds too few ordinary ones."""


def frame(explainer) -> tuple[list[int], list[int]]:
    """(prefix, suffix): the ids the tokenizer puts around every text by itself, from the empty text and one
    ordinary text (the prefix is what both start with)."""
    empty = [int(i) for i in explainer.tokenize("")[1]]
    some = [int(i) for i in explainer.tokenize("a")[1]]
    k = 0
    while k < len(empty) and k < len(some) and empty[k] == some[k]:
        k += 1
    return empty[:k], empty[k:]


def own_ids(explainer, text: str, framed: tuple[list[int], list[int]] | None = None) -> list[int]:
    """The ids of `text` without the ones the tokenizer adds (`framed`: `frame(explainer)`, computed here if
    not given)."""
    prefix, suffix = frame(explainer) if framed is None else framed
    ids = [int(i) for i in explainer.tokenize(text)[1]]
    if ids[: len(prefix)] == prefix:
        ids = ids[len(prefix) :]
    if suffix and ids[-len(suffix) :] == suffix:
        ids = ids[: -len(suffix)]
    return ids


def vocab_size(model) -> int:
    get = getattr(model, "get_input_embeddings", None)
    emb = get() if callable(get) else getattr(model, "tok_emb", None)
    if not isinstance(emb, torch.nn.Embedding):
        raise NoProbe(f"{type(model).__name__} has no token embedding to draw probe tokens from")
    return emb.num_embeddings


def _ordinary(explainer, i: int, framed: tuple[list[int], list[int]]) -> str | None:
    """The text of id `i` if it is an ordinary token: not unknown, not a bracketed special (<bos>, [CLS],
    <|im_start|>), and tokenized back into itself alone (`framed`: the tokenizer's `frame`). None otherwise."""
    word = explainer.decode(i)
    bare = word.strip()
    if not bare or (bare[0], bare[-1]) in (("<", ">"), ("[", "]")) or not word.isprintable():
        return None
    if any(explainer.tokenizer.segment(word)[3].unknown):  # a true <unk>
        return None
    return word if own_ids(explainer, word, framed) == [i] else None


def bos_id(explainer) -> int | None:
    """The model's BOS token id (its config's `bos_token_id`), or None where it has none."""
    i = getattr(getattr(explainer.model, "config", None), "bos_token_id", None)
    return i if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab_size(explainer.model) else None


def probe_bos(explainer) -> dict | None:
    """{id, token, added}: the probe's first token when it is a BOS: the tokenizer's own first token (added False),
    or, where the tokenizer adds nothing, the model's BOS (`bos_id`) prepended as TransformerLens' detector
    prompts do (added True); None when there is neither."""
    prefix, _ = frame(explainer)
    if prefix:
        return {"id": prefix[0], "token": explainer.decode(prefix[0]), "added": False}
    bos = bos_id(explainer)
    return None if bos is None else {"id": bos, "token": explainer.decode(bos), "added": True}


def probe_ids(explainer, length: int = PROBE_LENGTH, *, seed: int = 0) -> list[int]:
    """The induction probe (`head_types.induction_probe`): the tokenizer's own frame around r + r, r =
    `length` distinct ordinary tokens (`_ordinary`) drawn with `seed`, the model's BOS first where the tokenizer
    adds none (`probe_bos`); shortened to what the model reads."""
    framed = prefix, suffix = frame(explainer)
    bos = probe_bos(explainer)
    if bos is not None and bos["added"]:
        prefix = [bos["id"]]
    room = (explainer.card.max_len - len(prefix) - len(suffix)) // 2
    n = vocab_size(explainer.model)
    length = min(length, room, n)
    if length < 2:
        raise NoProbe(f"{explainer.name} reads too few tokens for an induction probe ({explainer.card.max_len})")
    rng = np.random.default_rng(seed)
    chosen: dict[int, str] = {}
    for _ in range(PROBE_TRIES * length):
        if len(chosen) == length:
            break
        i = int(rng.integers(n))
        word = None if i in chosen else _ordinary(explainer, i, framed)
        if word is not None and word not in chosen.values():
            chosen[i] = word
    if len(chosen) < 2:
        raise NoProbe(f"found no ordinary tokens in {explainer.name}'s vocabulary for an induction probe")
    ordinary = list(chosen)
    ids = head_types.induction_probe(ordinary, len(ordinary), seed=seed, prefix=prefix)
    return [*ids, *suffix]


def _extra_for(explainer, n: int) -> dict:
    """The model keywords the explainer's tokenize gives, sized for `n` ids (an encoder's attention mask), and
    `logits_to_keep=1` where the model's forward takes it (transformers' language models): the probe reads the
    attention only, and the logits of every position cost a vocabulary-wide matrix product (a third of the 0.5B
    configuration's forward at the probe's length); its trace's logits are then the last row's (1, vocab)."""
    extra = dict(explainer.tokenize("a")[2])
    if "attention_mask" in extra:
        extra["attention_mask"] = torch.ones(1, n, dtype=torch.long)
    forward = getattr(explainer.model, "forward", None)
    try:
        takes = forward is not None and "logits_to_keep" in inspect.signature(forward).parameters
    except (TypeError, ValueError):  # a forward without a signature Python can read
        takes = False
    if takes:
        extra["logits_to_keep"] = 1
    return extra


def probe_key(length: int = PROBE_LENGTH, seed: int = 0) -> tuple:
    """The probe's key in a `TraceCache`: three items, so no (text, intervention) key is ever equal to it."""
    return (PROBE_KEY, length, seed)


def probe_input(explainer, length: int = PROBE_LENGTH, *, seed: int = 0) -> tuple:
    """(labels, ids (L,), model keywords, None) of the probe (`probe_ids`), as `tracing.traced` reads a cut text (no
    pieces: random ids)."""
    ids = probe_ids(explainer, length, seed=seed)
    return [explainer.decode(i) for i in ids], torch.tensor(ids), _extra_for(explainer, len(ids)), None
