"""Attention probe: do the trained heads look where the tutorial says they should?

The tutorial claims, for 一只 / 蓝色 / 怪兽 / 走进 / 森林:

    怪兽 (noun)   looks at 一只 and 蓝色        (its measure word and colour)
    走进 (verb)   looks at 怪兽                 (who moves)
    森林 (place)  looks at 走进 and 怪兽        (the action and the protagonist)

For each claim and each head of each layer, the probe feeds clause 1 of every sentence
(<bos> QM COLOUR NOUN VERB PLACE 。), takes the query row of the claimed word, and counts
how often that row's largest weight falls on one of the claimed keys (the hit rate). A
head "does what the tutorial says" when its hit rate is at least `threshold`.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import torch

from .corpus import Sentence
from .data import pad_batch
from .decoder import DecoderLM

__all__ = ["CLAIMS", "attention_probe"]

CLAIMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("noun", ("qm", "colour")),
    ("verb", ("noun",)),
    ("place", ("verb", "noun")),
)
"""(query role, the roles of the keys the tutorial says it looks at)."""

CLAUSE1_WORDS = 6
"""QM COLOUR NOUN VERB PLACE 。"""


@torch.no_grad()
def attention_probe(model: DecoderLM, tokenizer, sentences: Sequence[Sentence], threshold: float = 0.5) -> dict:
    """Per claim, per head: how often the claimed word's strongest attention goes to the claimed keys.

    sentences  corpus sentences (only clause 1 is used)
    returns    {"n", "threshold", "claims": [{"query", "targets", "example", "heads_hit", "n_heads",
               "heads": [{"layer", "head", "hit_rate", "mean_weight", "top_key"}]}]}
               top_key: the role (or "<bos>") that most often gets the largest weight
    """
    if not sentences:
        raise ValueError("attention_probe needs at least one sentence")
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    was_training = model.training
    model.eval()
    batch = pad_batch([tokenizer.encode_words(s.words[:CLAUSE1_WORDS]) for s in sentences], tokenizer.pad_id)
    _, weights = model.attention_weights(batch)                 # n_layers × (N, H, L, L)
    model.train(was_training)
    key_roles = ("<bos>",) + sentences[0].roles[:CLAUSE1_WORDS]  # clause 1 has the same roles in every sentence
    example = sentences[0].words
    claims = []
    for query, targets in CLAIMS:
        q = sentences[0].index(query) + 1                        # +1: <bos> is position 0
        cols = [sentences[0].index(t) + 1 for t in targets]
        heads = []
        for layer, w in enumerate(weights):
            row = w[:, :, q, : q + 1]                            # (N, H, q+1): what the query sees
            top = row.argmax(-1)                                 # (N, H)
            hit = torch.zeros_like(top, dtype=torch.bool)
            for c in cols:
                hit |= top == c
            for h in range(row.shape[1]):
                top_key = Counter(top[:, h].tolist()).most_common(1)[0][0]
                heads.append({"layer": layer, "head": h, "hit_rate": float(hit[:, h].float().mean()),
                              "mean_weight": float(row[:, h, cols].sum(-1).mean()),
                              "top_key": key_roles[top_key]})
        claims.append({
            "query": query, "targets": list(targets),
            "example": f"{example[q - 1]} → " + ", ".join(example[c - 1] for c in cols),
            "heads_hit": sum(h["hit_rate"] >= threshold for h in heads), "n_heads": len(heads), "heads": heads,
        })
    return {"n": len(sentences), "threshold": threshold, "claims": claims}
