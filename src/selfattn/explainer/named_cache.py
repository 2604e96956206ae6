"""Every activation a capture keeps, under a TransformerLens-like name: `Explanation.cache` (docs/cache.md).

    cache = e.cache
    cache["blocks.3.attn.hook_pattern"]      (H, L, L) the weights of every head of layer 3
    cache["pattern", 3]                      the same (TransformerLens' `utils.get_act_name` short names)
    list(cache.keys())                       every name, layer by layer

Names and shapes, per layer l (counted from 0 in the order of the attention calls; no batch axis; H query heads,
Hkv key/value heads, L tokens, D head width, d the model width):

    blocks.{l}.attn.hook_input     (L, d)       what W_Q, W_K, W_V multiply: the attention module's input. For a
                                                pre-norm model (Llama, GPT-2) that is the *normed* residual with
                                                the norm's weight (and bias) applied — neither TransformerLens'
                                                `hook_resid_pre` nor its `ln1.hook_normalized` (taken before the
                                                weight), so it is named apart
    blocks.{l}.attn.hook_q         (L, H, D)    queries, after RoPE where the model rotates them
    blocks.{l}.attn.hook_k         (L, Hkv, D)  keys per key/value head (TransformerLens' grouped-query layout;
    blocks.{l}.attn.hook_v         (L, Hkv, D)  query head h reads key/value head h // (H / Hkv))
    blocks.{l}.attn.hook_attn_scores (H, L, L)  the scores before the softmax: Q Kᵀ · scale (softcap, position
                                                terms), −inf where a key is hidden
    blocks.{l}.attn.hook_pattern   (H, L, L)    the weights (rows = queries)
    blocks.{l}.attn.hook_z         (L, H, D)    each head's output before W_O: weights · V
    blocks.{l}.attn.hook_result    (L, H, d)    each head's output after W_O: z_h · W_O[:, h·D:(h+1)·D]ᵀ, without
                                                W_O's bias (summed over heads, plus the bias: hook_attn_out), where
                                                the capture holds W_O (`LayerTrace.out_proj`); absent elsewhere
    blocks.{l}.hook_attn_out       (L, d)       the attention module's output (heads joined, W_O applied)
    blocks.{l}.hook_resid_post     (L, d)       the output of the block holding the attention module

q, k, v, hook_input, hook_attn_out and hook_resid_post are the captured tensors, in the model's dtype (views, not
copies). attn_scores, pattern and z are not stored by a capture (O(L²) per head): they are recomputed from Q, K,
V and the lse (`LayerTrace.stages`) in float64 when read, each time, so reading one costs one layer's
computation; result is z (float64) times the model's W_O. `hook_resid_pre` of block l > 0 is `hook_resid_post` of
block l − 1; block 0's (the embeddings) is not captured.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping

import torch

from .trace_types import LayerTrace, ModelTrace

__all__ = ["NamedCache", "ATTENTION_HOOKS", "BLOCK_HOOKS", "act_name"]

ATTENTION_HOOKS = ("input", "q", "k", "v", "attn_scores", "pattern", "z", "result")
"""The names under `blocks.{l}.attn.hook_…`, in the order `keys()` gives them."""
BLOCK_HOOKS = ("attn_out", "resid_post")
"""The names under `blocks.{l}.hook_…`."""
_NAME = re.compile(r"blocks\.(\d+)\.(?:attn\.hook_(\w+)|hook_(\w+))")


def act_name(short: str, layer: int) -> str:
    """The full name of a short one at one layer: act_name("pattern", 3) = "blocks.3.attn.hook_pattern"."""
    if isinstance(short, str) and short in ATTENTION_HOOKS:
        return f"blocks.{layer}.attn.hook_{short}"
    if isinstance(short, str) and short in BLOCK_HOOKS:
        return f"blocks.{layer}.hook_{short}"
    raise KeyError(f"no activation named {short!r}: the short names are {', '.join(ATTENTION_HOOKS + BLOCK_HOOKS)}")


def _all_heads(layer: LayerTrace, stage: str) -> torch.Tensor:
    """(H, L, …) one stage of every head, float64, each head by its own rule (`LayerTrace.stages`)."""
    if stage == "weights" and not layer.changed:
        return layer.weights(range(layer.n_heads))
    return torch.stack([layer.stages(h, weighted=stage == "weighted")[stage] for h in range(layer.n_heads)])


def _result(layer: LayerTrace) -> torch.Tensor:
    """(L, H, d) each head's z times its slice of W_O, float64."""
    if layer.out_proj is None:
        raise KeyError("the capture holds no output projection W_O for this layer")
    z = _all_heads(layer, "weighted")  # (H, L, D)
    H, _, D = z.shape
    w = layer.out_proj.to(torch.float64).reshape(-1, H, D)  # (d, H, D): head h's columns h·D … (h+1)·D − 1
    return torch.einsum("hld,ehd->lhe", z, w)


_READ: dict[str, Callable[[LayerTrace], torch.Tensor]] = {
    "input": lambda t: t.x,
    "q": lambda t: t.q.transpose(0, 1),
    "k": lambda t: t.k.transpose(0, 1),
    "v": lambda t: t.v.transpose(0, 1),
    "attn_scores": lambda t: _all_heads(t, "masked"),
    "pattern": lambda t: _all_heads(t, "weights"),
    "z": lambda t: _all_heads(t, "weighted").transpose(0, 1),
    "result": _result,
    "attn_out": lambda t: t.attn_out,
    "resid_post": lambda t: t.output,
}


class NamedCache(Mapping):
    """A read-only mapping name → tensor over one `ModelTrace` (the module's doc): `cache[name]`,
    `cache[short, layer]`, `keys()`, `len`, `in`. An unknown name is a KeyError naming the known forms."""

    def __init__(self, trace: ModelTrace):
        if not isinstance(trace, ModelTrace):
            raise TypeError(f"NamedCache reads a ModelTrace, got {type(trace).__name__}")
        self.trace = trace

    def _names(self, layer: int) -> list[str]:
        held = self.trace.layers[layer].out_proj is not None if 0 <= layer < self.trace.n_layers else False
        return [act_name(s, layer) for s in ATTENTION_HOOKS + BLOCK_HOOKS if s != "result" or held]

    def __iter__(self) -> Iterator[str]:
        for layer in range(self.trace.n_layers):
            yield from self._names(layer)

    def __len__(self) -> int:
        return sum(len(self._names(layer)) for layer in range(self.trace.n_layers))

    def __contains__(self, name) -> bool:
        try:
            self._parse(name)
        except KeyError:
            return False
        return True

    def _parse(self, name) -> tuple[int, str]:
        if isinstance(name, tuple) and len(name) == 2 and isinstance(name[1], int) and not isinstance(name[1], bool):
            short, layer = name
            name = act_name(short, layer)
        if not isinstance(name, str):
            raise KeyError(f"an activation is named by a str or (short name, layer), got {name!r}")
        found = _NAME.fullmatch(name)
        short = None if found is None else found.group(2) or found.group(3)
        if found is not None and short == "result" and name == act_name("result", int(found.group(1))):
            layer = int(found.group(1))
            if 0 <= layer < self.trace.n_layers and self.trace.layers[layer].out_proj is None:
                raise KeyError(f"{name!r}: the capture holds no output projection W_O for layer {layer}")
        if found is None or name not in self._names(int(found.group(1))) or short is None:
            raise KeyError(
                f"no activation named {name!r}: names are blocks.{{l}}.attn.hook_{{{'|'.join(ATTENTION_HOOKS)}}} and "
                f"blocks.{{l}}.hook_{{{'|'.join(BLOCK_HOOKS)}}}, or (short name, layer)"
            )
        layer = int(found.group(1))
        if not 0 <= layer < self.trace.n_layers:
            raise KeyError(f"{name!r}: layer must be in [0, {self.trace.n_layers - 1}], got {layer}")
        return layer, short

    def __getitem__(self, name) -> torch.Tensor:
        layer, short = self._parse(name)
        return _READ[short](self.trace.layers[layer])

    def __repr__(self) -> str:
        return f"<NamedCache: {self.trace.n_layers} layers, {len(self)} names>"
