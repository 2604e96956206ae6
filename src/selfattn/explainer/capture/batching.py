"""Several inputs as one padded batch, and each input cut back out of it: what `capture_batch` does around the model.

    one_input(i, item) -> (ids (L,), tokens, model kwargs)     an input of `capture_batch`, checked
    joined_kwargs(each, lengths) -> kwargs                      per-position tensors padded with 0 and stacked
    items(request, lengths, layer) -> [Request]                 one attention call of the batch, one request per input
    joined(request, results, lengths) -> Result                 the inputs' results as the padded batch's
    rows_of(t, L, b, batch) -> (L, width)                       input b's rows of a module's tensor

Inputs are right-padded with PAD_ID, so their positions stay 0 … n−1; a padded row is a row that sees nothing. A model
whose calls or tensors cannot be cut per input raises `Unbatchable` (each input can then be captured alone).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch

from ...kernels.base import Result
from ...request import Request, check_window

__all__ = ["PAD_ID", "Unbatchable", "one_input", "joined_kwargs", "items", "item", "joined", "rows_of"]

PAD_ID = 0
"""The id the shorter inputs of a batch are padded with (on the right): never read by a real position."""


class Unbatchable(ValueError):
    """A model `capture_batch` cannot cut per input: an attention call not over the whole padded batch (another
    batch size or length), or a module's tensor that is not batch-first. Each input can still be captured alone."""


def one_input(i: int, item) -> tuple[torch.Tensor, list[str], dict]:
    """Input `i` of a batch as ((L,) ids, its L token strings, its model kwargs), checked."""
    if not isinstance(item, (tuple, list)) or len(item) != 3:
        raise TypeError(f"input {i} must be (input_ids, tokens, model_kwargs), got {type(item).__name__}")
    ids, tokens, kwargs = item
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"input {i}'s input_ids must be a torch.Tensor, got {type(ids).__name__}")
    if ids.dim() == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.dim() != 1 or ids.shape[0] == 0:
        raise ValueError(f"input {i}'s input_ids must have shape (L,) or (1, L) with L >= 1, got {tuple(ids.shape)}")
    if isinstance(tokens, str) or len(tokens) != ids.shape[0]:
        raise ValueError(f"input {i} has {len(tokens)} token strings for {ids.shape[0]} token ids")
    if not isinstance(kwargs, Mapping):
        raise TypeError(f"input {i}'s model_kwargs must be a mapping, got {type(kwargs).__name__}")
    return ids, list(tokens), dict(kwargs)


def joined_kwargs(each: list[dict], lengths: list[int]) -> dict:
    """The model keywords of a batch: per-position tensors ((L,) or (1, L)) padded with 0 and stacked (B, L_max);
    every other keyword the same for every input (one forward pass takes one value)."""
    longest = max(lengths)
    names = list(each[0])
    out: dict = {}
    for i, kw in enumerate(each):
        if sorted(kw) != sorted(names):
            raise ValueError(f"input {i}'s model keywords {sorted(kw)} are not input 0's {sorted(names)}")
    for name in names:
        values = [kw[name] for kw in each]
        if not any(isinstance(v, torch.Tensor) for v in values):
            if any(v != values[0] for v in values[1:]):
                raise ValueError(f"model keyword {name!r} differs between the inputs: one forward pass takes one value")
            out[name] = values[0]
            continue
        rows = []
        for i, (v, n) in enumerate(zip(values, lengths, strict=True)):
            row = v[0] if isinstance(v, torch.Tensor) and v.dim() == 2 and v.shape[0] == 1 else v
            if not isinstance(row, torch.Tensor) or row.dim() != 1 or row.shape[0] != n:
                shape = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
                raise ValueError(
                    f"model keyword {name!r} of input {i} is {shape}: a batch pads only per-position tensors, "
                    f"(L,) or (1, L) with L = {n} (its ids)"
                )
            rows.append(torch.nn.functional.pad(row, (0, longest - n), value=0))
        out[name] = torch.stack(rows)
    return out


def items(request: Request, lengths: list[int], layer: int) -> list[Request]:
    """The call `request` of a padded batch as one request per batch item, each cut to the item's own length."""
    B, longest = len(lengths), max(lengths)
    if (request.B, request.Lq, request.Lk) != (B, longest, longest):
        raise Unbatchable(
            f"a batched capture needs every attention call over the whole padded batch (B={B}, Lq = Lk = "
            f"{longest}); call {layer} has B={request.B}, Lq={request.Lq}, Lk={request.Lk}"
        )
    return [item(request, b, n) for b, n in enumerate(lengths)]


def item(r: Request, b: int, n: int) -> Request:
    """Batch item `b` of `r`, its first `n` positions: what the call is for that input alone. The mask keeps its
    rows and keys (dropped when it then hides nothing: the padding was all it hid), a per-position feature
    (segments) its positions, a per-head one stays; the window is clamped to n as a lone call's is."""
    rule = r.rule
    changes: dict = {"window": check_window(rule.window, n, n)}
    mask = rule.mask
    if mask is not None:
        mask = mask[b : b + 1] if mask.shape[0] > 1 else mask
        mask = mask[:, :, :n] if mask.shape[2] > 1 else mask
        mask = mask[..., :n] if mask.shape[3] > 1 else mask
        changes["mask"] = None if mask.dtype == torch.bool and bool(mask.all()) else mask
    for name, value in rule.features().items():
        if value.dim() >= 2 and value.shape[0] == r.B:  # one row per batch item (segments: (B, L))
            value = value[b : b + 1]
            changes[name] = value[..., :n] if value.shape[-1] == r.Lk else value
    return dataclasses.replace(
        r,
        q=r.q[b : b + 1, :, :n].contiguous(),
        k=r.k[b : b + 1, :, :n].contiguous(),
        v=r.v[b : b + 1, :, :n].contiguous(),
        rule=rule.replace(**changes),
    )


def joined(request: Request, results: list[Result], lengths: list[int]) -> Result:
    """The items' results as the padded batch's: (B, Hq, L_max, Dv) outputs, (B, Hq, L_max) lse and, where the
    model asked for them, (B, Hq, L_max, L_max) weights; a padded row is a row that sees nothing (output 0,
    weights 0, lse −inf)."""
    first = results[0]
    B, Hq, longest = request.B, request.Hq, request.Lq
    output = first.output.new_zeros((B, Hq, longest, first.output.shape[-1]))
    assert first.lse is not None  # every item is computed with return_lse=True
    lse = first.lse.new_full((B, Hq, longest), float("-inf"))
    weights = None
    if request.return_weights and first.weights is not None:
        weights = first.weights.new_zeros((B, Hq, longest, longest))
    for b, (res, n) in enumerate(zip(results, lengths, strict=True)):
        assert res.lse is not None
        output[b, :, :n] = res.output[0]
        lse[b, :, :n] = res.lse[0]
        if weights is not None and res.weights is not None:
            weights[b, :, :n, :n] = res.weights[0]
    return Result(output, weights, lse)


def rows_of(t: torch.Tensor, L: int, b: int = 0, batch: tuple[int, int] | None = None) -> torch.Tensor:
    """(L, width): the last L positions of batch item 0 (one input), or item b's first L of the padded batch
    (B, L_max) — after any positions the module holds before the batch's (its rows less L_max), a copy, so the
    item's trace holds its own rows only."""
    if batch is None:
        return t.reshape(-1, t.shape[-1])[-L:]
    B, longest = batch
    if t.dim() >= 3 and t.shape[0] != B or t.dim() == 2 and t.shape[0] % B or t.dim() < 2:
        raise Unbatchable(
            f"a module's tensor of shape {tuple(t.shape)} is not batch-first for a batch of {B}: cannot cut its rows"
        )
    rows = t.reshape(B, -1, t.shape[-1])[b]
    start = rows.shape[0] - longest
    if start < 0:
        raise Unbatchable(f"a module's tensor of shape {tuple(t.shape)} has fewer than {longest} positions per item")
    return rows[start : start + L].clone()
