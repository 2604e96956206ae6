"""A controlled experiment: the same text with and without an intervention, compared on one head.

    compare(base, changed, layer, head, prediction_before, prediction_after) -> dict
    opened(intervention, layer, head, ablate) -> (layer, head, rule): the head shown first, and why

Both traces are of the same tokens. The numbers compared, for head (layer, head):

    entropy       mean entropy over rows that can see >= 2 tokens (bits), before → after
    future        mean weight on keys after the query (j > i), before → after; and the row that gives
                  the future the most (its token, its share, the future tokens it reaches)
    top           the most likely next token before → after (decoders)
    loss          mean next-token cross-entropy over the text (nats), before → after (decoders)
    kl_bits       KL(before ‖ after) of the next-token distribution after the text, in bits (decoders)

(`views.experiment_words.sentences` says them in each language). An intervention limited to one head of one
layer leaves the layers below unchanged, so that head's X is the same in both traces and only the
changed step differs; an intervention in every layer changes X of the layers above the first as well.
"""

from __future__ import annotations

import math

import torch

from ..interventions import Intervention
from ..trace_types import LayerTrace, ModelTrace
from .summary import head_summary

__all__ = ["compare", "opened", "loss", "kl_bits"]


def loss(trace: ModelTrace) -> float | None:
    """Mean next-token cross-entropy over the text (nats, float64); None for an encoder or a single token."""
    if trace.logits is None or len(trace.token_ids) < 2:
        return None
    logits = trace.logits[:-1].double()
    return float(torch.nn.functional.cross_entropy(logits, trace.token_ids[1:].to(logits.device)))


def kl_bits(before: torch.Tensor, after: torch.Tensor) -> float:
    """KL(p ‖ q) in bits of the softmaxes of two logit vectors (V,), in float64."""
    p, q = before.double().log_softmax(-1), after.double().log_softmax(-1)
    return float((p.exp() * (p - q)).sum()) / math.log(2)


def opened(
    intervention: Intervention, layer: int | None, head: int | None, ablate=None
) -> tuple[int | None, int | None, str | None]:
    """(layer, head, rule) of the head shown first: as asked (rule None: `heads.shown_head` says why); else
    the layer / head a limited intervention changes ("intervened"; "ablated" for the ablate entry), so a
    limited intervention shows and describes the head it changed; else the first head of an ablation
    `ablate` [(layer, head), …] ("ablated"); else (None, None, None): picked by `heads.pick`."""
    if layer is not None or head is not None:
        return layer, head, None
    if intervention:
        return intervention.layer, intervention.head, "ablated" if "ablate" in intervention.applied else "intervened"
    if ablate:
        first = tuple(ablate[0])
        return first[0], first[1], "ablated"
    return None, None, None


def compare(
    base: ModelTrace,
    changed: ModelTrace,
    layer: int,
    head: int,
    prediction_before: list[dict],
    prediction_after: list[dict],
) -> dict:
    if base.tokens != changed.tokens:
        raise ValueError("an experiment compares one text with and without an intervention; the tokens differ")
    before = head_summary(base.layers[layer], head)
    after = head_summary(changed.layers[layer], head)
    w0 = base.layers[layer].stages(head, weighted=False)["weights"]  # (L, L)
    w1 = changed.layers[layer].stages(head, weighted=False)["weights"]  # (L, L)
    L = w0.shape[0]
    future = torch.ones(L, L, dtype=torch.bool).triu(1)  # (L, L) True where j > i
    f0, f1 = (w0 * future).sum(-1), (w1 * future).sum(-1)  # (L,) weight on the future, per row
    row = int(torch.argmax(f1))
    reached = [j for j in range(row + 1, L) if float(w1[row, j]) > 0]
    top0 = prediction_before[0] if prediction_before else None
    top1 = prediction_after[0] if prediction_after else None
    out = {
        "layer": layer,
        "head": head,
        "scope": "model" if changed.intervention.layer is None else "layer",
        "same_x": bool(torch.equal(base.layers[layer].x, changed.layers[layer].x)),
        "entropy": [before["entropy"], after["entropy"]],
        "future": [float(f0.mean()), float(f1.mean())],
        "future_row": {"query": row, "weight": float(f1[row]), "keys": reached},
        "top": [top0, top1],
        "loss": [loss(base), loss(changed)],
        "kl_bits": None
        if base.logits is None or changed.logits is None
        else kl_bits(base.logits[-1], changed.logits[-1]),
        "ablated": "ablate" in changed.intervention.applied,
    }
    return out


def opened_row(
    layer: LayerTrace, head: int, link: tuple[int, int] | None = None
) -> tuple[int, int, str, tuple[int | None, int | None]]:
    """The query row the views open on: (row, how many keys it may not see, why (a catalogue key "opened.…"),
    (query, key) of `link` or (None, None)). With `link` (query, key: the link the head's sentence describes), its
    query row when the mask hides keys from it (the sentence and the −inf of the mask step are then in one view);
    when that row sees every key, the middle row instead if the mask hides keys from it, saying why. Without a link:
    the middle row when the mask hides keys from it, else the last one (every key seen)."""
    change = layer.changed.get(head)
    visible = (layer.visible if change is None else change.visible).bool()
    L = visible.shape[-1]

    def hidden_in(row: int) -> int:
        return int((~visible[row]).sum())

    middle = (L - 1) // 2
    fallback = middle if hidden_in(middle) else L - 1
    q, k = link if link is not None and all(0 <= x < L for x in link) else (None, None)
    if q is not None and hidden_in(q):
        row, why = q, "opened.link"
    elif q is not None and hidden_in(fallback):
        row, why = fallback, "opened.link_sees_all"
    else:
        row = fallback
        why = "opened.masked" if hidden_in(row) else "opened.all"
    return row, hidden_in(row), why, (q, k)
