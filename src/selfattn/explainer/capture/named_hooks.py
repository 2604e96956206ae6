"""`run_with_hooks`: run a model once with functions on activations named as `Explanation.cache` names them
(`named_cache`, docs/cache.md), each free to read its tensor or return a replacement.

    logits = run_with_hooks(model, ids, fwd_hooks=[("blocks.1.attn.hook_z", fn), (("pattern", 0), fn)])

`fn(tensor, name)` gets the activation without the batch axis, in the cache's layout, and returns None (the tensor
is kept) or a tensor of the same shape that replaces it for the rest of the run:

    blocks.{l}.attn.hook_q  (L, H, D)     the request's queries, before the scores are computed
    blocks.{l}.attn.hook_k  (L, Hkv, D)   its keys;  blocks.{l}.attn.hook_v (L, Hkv, D) its values
    blocks.{l}.attn.hook_pattern (H, L, L)  the weights: a replacement is multiplied by V for the output
    blocks.{l}.attn.hook_z  (L, H, D)     each head's output before W_O
    blocks.{l}.hook_resid_post (L, d)     the block's output

The attention names act at the one capture point (`selfattn.intercept`, a context: nothing is set on the model);
hook_resid_post through forward hooks on the blocks installed for this call and removed after it, raised or not,
acting only in the context that installed them (`patching._on_blocks`). The other cache names (hook_input,
hook_attn_scores, hook_attn_out) are read in `Explanation.cache` only: asking to hook them is a ValueError.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch

from ...functional import intercept
from ...kernels.base import Result
from ..named_cache import _NAME, act_name
from .patching import _first, _logits, _on_blocks, blocks_of, head_outputs

__all__ = ["run_with_hooks", "HOOKABLE"]

HOOKABLE = ("q", "k", "v", "pattern", "z", "resid_post")
"""The short names `run_with_hooks` can act on."""

Hook = Callable[[torch.Tensor, str], torch.Tensor | None]


def _parsed(name) -> tuple[int, str, str]:
    """(layer, short name, full name) of a name or a (short, layer) pair, or a ValueError naming what is hookable."""
    if isinstance(name, tuple) and len(name) == 2:
        try:
            name = act_name(*name)
        except KeyError as e:
            raise ValueError(str(e.args[0])) from None
    found = _NAME.fullmatch(name) if isinstance(name, str) else None
    short = None if found is None else found.group(2) or found.group(3)
    if found is None or short not in HOOKABLE or name != act_name(short, int(found.group(1))):
        raise ValueError(
            f"cannot hook {name!r}: run_with_hooks acts on blocks.{{l}}.attn.hook_{{q|k|v|pattern|z}} and "
            f"blocks.{{l}}.hook_resid_post (or (short name, layer))"
        )
    return int(found.group(1)), short, name


def _replaced(fn: Hook, name: str, tensor: torch.Tensor) -> torch.Tensor:
    """fn's replacement of `tensor` (one input's, no batch axis), or `tensor` when it returns None."""
    got = fn(tensor, name)
    if got is None:
        return tensor
    if not isinstance(got, torch.Tensor) or got.shape != tensor.shape:
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        raise ValueError(f"the hook on {name} returned {shape}, not a tensor of shape {tuple(tensor.shape)}")
    return got.to(tensor.dtype)


def run_with_hooks(
    model: torch.nn.Module, ids: torch.Tensor, fwd_hooks: Sequence[tuple[object, Hook]], **model_kwargs
) -> torch.Tensor:
    """The logits (1, L, V) of `model(ids, **model_kwargs)` with `fwd_hooks` [(name, fn)] applied (the module's doc).

    ids  (L,) or (1, L) token ids"""
    ids = ids if ids.dim() == 2 else ids[None]
    if ids.shape[0] != 1:
        raise ValueError(f"run_with_hooks runs one input, got a batch of {ids.shape[0]}")
    hooks: dict[tuple[int, str], list[tuple[str, Hook]]] = {}
    for entry in fwd_hooks:
        if not (isinstance(entry, tuple) and len(entry) == 2 and callable(entry[1])):
            raise TypeError(f"fwd_hooks holds (name, fn) pairs, got {entry!r}")
        layer, short, name = _parsed(entry[0])
        hooks.setdefault((layer, short), []).append((name, entry[1]))
    n_layers = len(head_outputs(model, ids[:, :1])[1])  # how many layers: a one-token run
    far = max((layer for layer, _ in hooks), default=-1)
    if far >= n_layers:
        raise ValueError(f"layer must be in [0, {n_layers - 1}], got {far}")

    def apply(layer: int, short: str, tensor: torch.Tensor) -> torch.Tensor:
        for name, fn in hooks.get((layer, short), ()):
            tensor = _replaced(fn, name, tensor)
        return tensor

    seen = 0

    def attention(request, compute):
        nonlocal seen
        layer, seen = seen, seen + 1
        changes = {
            part: apply(layer, part, getattr(request, part)[0].transpose(0, 1)).transpose(0, 1)[None]
            for part in ("q", "k", "v")
            if (layer, part) in hooks
        }
        if changes:
            request = dataclasses.replace(request, **changes)
        if (layer, "pattern") not in hooks:
            result = compute(request)
        else:
            result = compute(dataclasses.replace(request, return_weights=True))
            weights = apply(layer, "pattern", result.weights[0])[None]  # (1, H, L, L)
            v = request.v.repeat_interleave(request.q.shape[1] // request.v.shape[1], dim=1)
            output = (weights.to(v.dtype) @ v).to(result.output.dtype)
            result = Result(output, weights if request.return_weights else None, result.lse)
        if (layer, "z") in hooks:
            z = apply(layer, "z", result.output[0].transpose(0, 1)).transpose(0, 1)[None]
            result = Result(z, result.weights, result.lse)
        return result

    def block(layer: int, output):
        if (layer, "resid_post") not in hooks:
            return None
        hidden = _first(output)
        new = apply(layer, "resid_post", hidden[0])[None]
        return (new, *output[1:]) if isinstance(output, tuple) else new

    residual = any(short == "resid_post" for _, short in hooks)
    with torch.no_grad(), intercept(attention):
        if residual:
            with _on_blocks(blocks_of(model, n_layers), block):
                return _logits(model(ids, **model_kwargs))
        return _logits(model(ids, **model_kwargs))
