"""Attention probe: do the trained heads look where the tutorial says they should?

The tutorial claims, for 一只 / 蓝色 / 怪兽 / 走进 / 森林:

    怪兽 (noun)   looks at 一只 and 蓝色        (its measure word and colour)
    走进 (verb)   looks at 怪兽                 (who moves)
    森林 (place)  looks at 走进 and 怪兽        (the action and the protagonist)

For each claim and each head of each layer, the probe feeds clause 1 of every sentence
(<bos> QM COLOUR NOUN VERB PLACE 。), takes the query row of the claimed word, and counts
how often that row's largest weight falls on one of the claimed keys (the hit rate). A
head "does what the tutorial says" when its hit rate is at least `threshold`.

The weights are read at the one capture point, the `selfattn.attention` call (`attention_maps`: a
normal forward pass inside `selfattn.intercept`, each call asked for its weights as well), never
by a second copy of the model's forward pass.

`paragraph_probe` asks the same of sentences late in a long paragraph (the test sentences packed
into paragraphs of max_len tokens, as in training): there the query row sees hundreds of earlier
words, and a hit means the strongest weight lands on the claimed word *of the same sentence*.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

import torch

from ..functional import intercept, use_backend
from .corpus import Sentence
from .data import pad_batch, paragraphs
from .decoder import DecoderLM, eval_mode

__all__ = ["CLAIMS", "attention_maps", "attention_probe", "paragraph_probe"]

CLAIMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("noun", ("qm", "colour")),
    ("verb", ("noun",)),
    ("place", ("verb", "noun")),
)
"""(query role, the roles of the keys the tutorial says it looks at)."""

HIT_THRESHOLD = 0.5
"""A head "does what the tutorial says" when at least this share of the query rows hit the claimed keys."""

CLAUSE1_WORDS = 6
"""QM COLOUR NOUN VERB PLACE 。"""


@torch.no_grad()
def attention_maps(model: DecoderLM, input_ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits and every layer's attention weights of one ordinary forward pass, for reading what each head looks at.

    input_ids  (B, L) or (L,)
    returns    logits (B, L, V) and a list of n_layers tensors (B, H, L, L) — row i: the weights
               query i gives keys 0..i (zeros above the diagonal). 1-D input drops B.

    Each attention call of the pass is asked for its weights too (`return_weights`, which the
    dispatcher serves with a backend that builds them), recorded, and answered as asked.
    """
    weights: list[torch.Tensor] = []

    def record(request, compute):
        result = compute(dataclasses.replace(request, return_weights=True))
        weights.append(result.weights)  # (B, H, L, L)
        return result

    # "auto" inside: a surrounding use_backend("sdpa") (training's) would refuse to build weights
    with eval_mode(model), use_backend("auto"), intercept(record):
        logits = model(input_ids)
    if len(weights) != model.config.n_layers:
        raise RuntimeError(f"recorded {len(weights)} attention calls for {model.config.n_layers} layers")
    if input_ids.dim() == 1:
        weights = [w[0] for w in weights]
    return logits, weights


@torch.no_grad()
def attention_probe(
    model: DecoderLM, tokenizer, sentences: Sequence[Sentence], threshold: float = HIT_THRESHOLD
) -> dict:
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
    batch = pad_batch([tokenizer.encode_words(s.words[:CLAUSE1_WORDS]) for s in sentences], tokenizer.pad_id)
    _, weights = attention_maps(model, batch)  # n_layers × (N, H, L, L)
    key_roles = ("<bos>",) + sentences[0].roles[:CLAUSE1_WORDS]  # clause 1 has the same roles in every sentence
    example = sentences[0].words
    claims = []
    for query, targets in CLAIMS:
        q = sentences[0].index(query) + 1  # +1: <bos> is position 0
        cols = [sentences[0].index(t) + 1 for t in targets]
        heads = []
        for layer, w in enumerate(weights):
            row = w[:, :, q, : q + 1]  # (N, H, q+1): what the query sees
            top = row.argmax(-1)  # (N, H)
            hit = torch.zeros_like(top, dtype=torch.bool)
            for c in cols:
                hit |= top == c
            for h in range(row.shape[1]):
                top_key = Counter(top[:, h].tolist()).most_common(1)[0][0]
                heads.append(
                    {
                        "layer": layer,
                        "head": h,
                        "hit_rate": float(hit[:, h].float().mean()),
                        "mean_weight": float(row[:, h, cols].sum(-1).mean()),
                        "top_key": key_roles[top_key],
                    }
                )
        claims.append(
            {
                "query": query,
                "targets": list(targets),
                "example": f"{example[q - 1]} → " + ", ".join(example[c - 1] for c in cols),
                "heads_hit": sum(h["hit_rate"] >= threshold for h in heads),
                "n_heads": len(heads),
                "heads": heads,
            }
        )
    return {"n": len(sentences), "threshold": threshold, "claims": claims}


@torch.no_grad()
def paragraph_probe(
    model: DecoderLM,
    tokenizer,
    sentences: Sequence[Sentence],
    late_from: int | None = None,
    threshold: float = HIT_THRESHOLD,
) -> dict:
    """`attention_probe` for the sentences whose first word sits at position >= late_from of a paragraph.

    sentences  corpus sentences, packed in order into paragraphs of model.max_len + 1 tokens
    late_from  default model.max_len // 2
    returns    {"n", "from", "threshold", "claims": [{"query", "targets", "heads_hit", "n_heads",
               "heads": [{"layer", "head", "hit_rate", "mean_weight", "lift"}]}]}; n counts the late
               sentences, mean_weight is the weight the claimed keys get together, and lift is
               mean_weight over what attention spread evenly over the row would give them
    """
    if not sentences:
        raise ValueError("paragraph_probe needs at least one sentence")
    late_from = model.max_len // 2 if late_from is None else late_from
    n_layers, n_heads = model.config.n_layers, model.config.n_heads
    hits = {query: torch.zeros(n_layers, n_heads) for query, _ in CLAIMS}
    mass = {query: torch.zeros(n_layers, n_heads) for query, _ in CLAIMS}
    even = {query: 0.0 for query, _ in CLAIMS}
    n = 0
    with eval_mode(model):
        for row, placed in paragraphs(tokenizer, sentences, model.max_len):
            late = [(s, start) for s, start in placed if start >= late_from]
            if not late:
                continue
            _, weights = attention_maps(model, torch.tensor(row[:-1]))  # n_layers × (H, L, L)
            n += len(late)
            for query, targets in CLAIMS:
                for s, start in late:
                    q = start + s.index(query)
                    cols = torch.tensor([start + s.index(t) for t in targets])
                    even[query] += len(targets) / (q + 1)
                    for layer, w in enumerate(weights):
                        top = w[:, q, : q + 1].argmax(-1)  # (H,)
                        hits[query][layer] += (top[:, None] == cols).any(-1).float()
                        mass[query][layer] += w[:, q, cols].sum(-1)
    claims = []
    for query, targets in CLAIMS:
        rate, weight = hits[query] / max(n, 1), mass[query] / max(n, 1)  # (n_layers, H)
        heads = [
            {
                "layer": layer,
                "head": h,
                "hit_rate": float(rate[layer, h]),
                "mean_weight": float(weight[layer, h]),
                "lift": float(weight[layer, h]) / (even[query] / n) if n else 0.0,
            }
            for layer in range(n_layers)
            for h in range(n_heads)
        ]
        claims.append(
            {
                "query": query,
                "targets": list(targets),
                "n_heads": len(heads),
                "heads": heads,
                "heads_hit": sum(h["hit_rate"] >= threshold for h in heads) if n else 0,
            }
        )
    return {"n": n, "from": late_from, "threshold": threshold, "claims": claims}
