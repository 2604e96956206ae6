"""What a decoder predicts after the text, and whether its first token is a special one.

predictions(trace, decode, k=TOP_PREDICTIONS, shown=, complete=) -> [{token, shown, id, prob}]
starts_with_special(trace) -> bool
"""

from __future__ import annotations

import torch

from ..pieces import shown_piece
from ..trace_types import ModelTrace

__all__ = ["TOP_PREDICTIONS", "predictions", "starts_with_special"]

TOP_PREDICTIONS = 5
"""How many next tokens an explanation lists."""


def predictions(trace: ModelTrace, decode, k: int = TOP_PREDICTIONS, *, shown=None, complete=None) -> list[dict]:
    """The k most likely next tokens after the whole text: {token (decode(id): the text it adds), shown (as a
    person reads it: `shown(id)`, default `pieces.shown_piece` of the text), id, prob}.
    complete(context ids, ids) -> [str | None]: each piece that begins a character shown with the character it
    begins, "都 (1/3: ⟨E9⟩)" (`loaders`' greedy completion; None keeps `shown`)."""
    if trace.logits is None:
        return []
    probs = torch.softmax(trace.logits[-1].double(), dim=-1)
    top = torch.topk(probs, min(k, probs.numel()))
    ids = [int(i) for i in top.indices]
    wholes = [None] * len(ids) if complete is None else complete(trace.token_ids.tolist(), ids)
    out = []
    for p, i, whole in zip(top.values, top.indices, wholes, strict=True):
        token = decode(int(i))
        out.append(
            {
                "token": token,
                "shown": whole or (shown_piece(token) if shown is None else shown(int(i))),
                "id": int(i),
                "prob": float(p),
            }
        )
    return out


def starts_with_special(trace: ModelTrace) -> bool:
    """Whether the first token is a special token (<bos>, [CLS]): the only case the first-token note is made for."""
    pieces = trace.pieces
    return bool(trace.tokens) and pieces is not None and bool(pieces.special[0])
