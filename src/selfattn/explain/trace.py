"""Trace capture: run a model once and keep, for every attention layer, what the tutorial names.

    capture(model, input_ids, intervention) -> ModelTrace

Every `MultiHeadSelfAttention` inside the model is tapped with a forward hook: its input x
(what W_Q multiplies), Q, K, V split into heads, the visibility mask, the scale, the
log-sum-exp of every query row, the attention module's output, and the output of the
block that holds it. The N×N stages (scores, scaled, masked, weights) are *not* stored:
`LayerTrace.stages(head, rows)` recomputes them for the rows asked for, exactly, from
Q, K and the lse — so a 1,000-token input costs O(L·D) memory per head, not O(L²).

An `Intervention` changes the computation itself, not only the picture: switching off
the ÷√d_k scaling or the causal mask, or setting a softmax temperature, is applied to
every attention layer during the forward pass, so the next-token prediction changes too.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..functional import attention
from ..masks import visibility
from ..modules import MultiHeadSelfAttention

__all__ = ["Intervention", "LayerTrace", "ModelTrace", "capture"]


@dataclass(frozen=True)
class Intervention:
    """What to switch off or change in every attention layer.

    scaling      False: scores are not divided by √d_k
    causal       False: a decoder's queries may also look at future tokens
    temperature  softmax(scores / T); T > 0, 1 = unchanged
    """

    scaling: bool = True
    causal: bool = True
    temperature: float = 1.0

    def __post_init__(self):
        for name in ("scaling", "causal"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise ValueError(f"temperature must be a finite number > 0, got {t!r}")

    @property
    def is_identity(self) -> bool:
        return self.scaling and self.causal and self.temperature == 1.0


@dataclass
class LayerTrace:
    """One attention layer on one input (batch item 0).

    x        (L, d_model)   the attention's input
    q        (H, L, D)      queries per head
    k, v     (Hkv, L, D)    keys and values per key/value head (query head h reads h // (H/Hkv))
    visible  (L, L) bool    True = may look (causal rule and padding together)
    causal   bool           whether the causal rule was on
    scale    float          what Q Kᵀ is multiplied by (1/√D, or as the intervention set it)
    lse      (H, L)         log Σ_j exp(masked score) per query row
    attn_out (L, d_model)   the attention module's output (heads merged, output projection)
    output   (L, d_model)   the output of the block holding the attention
    """

    x: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    visible: torch.Tensor
    causal: bool
    scale: float
    lse: torch.Tensor
    attn_out: torch.Tensor
    output: torch.Tensor

    @property
    def n_heads(self) -> int:
        return self.q.shape[0]

    @property
    def length(self) -> int:
        return self.q.shape[1]

    def kv_head(self, head: int) -> int:
        return head // (self.q.shape[0] // self.k.shape[0])

    def stages(self, head: int, rows=None) -> dict[str, torch.Tensor]:
        """The tutorial's stages for query `rows` (default all) of one head, in float64.

        scores (R, L) = Q Kᵀ;  scaled (R, L) = scores · scale;  mask (R, L) bool, True = may look;
        masked (R, L), −inf where hidden;  weights (R, L) = exp(masked − lse);  weighted (R, Dv) = weights · V.
        """
        if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < self.n_heads:
            raise ValueError(f"head must be an int in [0, {self.n_heads}), got {head!r}")
        rows = _rows(rows, self.length)
        q = self.q[head, rows].double()                  # (R, D)
        k = self.k[self.kv_head(head)].double()          # (L, D)
        v = self.v[self.kv_head(head)].double()          # (L, Dv)
        scores = q @ k.T
        scaled = scores * self.scale
        mask = self.visible[rows]
        masked = scaled.masked_fill(~mask, float("-inf"))
        lse = self.lse[head, rows].double()[:, None]
        weights = torch.where(mask & torch.isfinite(lse), torch.exp(masked - lse), torch.zeros_like(masked))
        return {"scores": scores, "scaled": scaled, "mask": mask, "masked": masked,
                "weights": weights, "weighted": weights @ v}

    def weights(self, head: int, rows=None) -> torch.Tensor:
        """Attention weights (R, L) of one head, recomputed from Q, K and the lse."""
        return self.stages(head, rows)["weights"]


@dataclass
class ModelTrace:
    """A whole model on one input.

    tokens     the token strings, in order
    token_ids  (L,)
    layers     one LayerTrace per attention layer, bottom to top
    logits     (L, vocab) for a decoder, None for an encoder
    """

    tokens: list[str]
    token_ids: torch.Tensor
    layers: list[LayerTrace]
    intervention: Intervention
    causal: bool
    logits: torch.Tensor | None

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def n_heads(self) -> int:
        return self.layers[0].n_heads if self.layers else 0


def capture(model: torch.nn.Module, input_ids: torch.Tensor, tokens: list[str],
            intervention: Intervention = Intervention(), **model_kwargs) -> ModelTrace:
    """Run `model(input_ids, **model_kwargs)` once and record every attention layer.

    input_ids  (L,) or (1, L) token ids; `tokens` their strings (same length)
    model_kwargs  passed through (for example `attention_mask` of an encoder)
    """
    if not isinstance(intervention, Intervention):
        raise TypeError(f"intervention must be an Intervention, got {type(intervention).__name__}")
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.Tensor, got {type(input_ids).__name__}")
    ids = input_ids if input_ids.dim() == 2 else input_ids[None]
    if ids.shape[0] != 1:
        raise ValueError(f"capture explains one input at a time, got a batch of {ids.shape[0]}")
    if len(tokens) != ids.shape[1]:
        raise ValueError(f"{len(tokens)} token strings for {ids.shape[1]} token ids")
    attns = [m for m in model.modules() if isinstance(m, MultiHeadSelfAttention)]
    if not attns:
        raise ValueError(f"{type(model).__name__} has no MultiHeadSelfAttention layer to explain")
    records: list[dict] = []
    with torch.no_grad():
        with _tapped(model, attns, intervention, records):
            out = model(ids, **model_kwargs)
        layers = [_layer(r) for r in records]
    logits = out[0] if getattr(model, "is_decoder", _is_decoder(attns)) else None
    return ModelTrace(tokens=list(tokens), token_ids=ids[0], layers=layers, intervention=intervention,
                      causal=any(m.causal for m in attns) and intervention.causal, logits=logits)


def _is_decoder(attns) -> bool:
    return any(m.causal for m in attns)


@contextmanager
def _tapped(model, attns, intervention: Intervention, records: list[dict]):
    parent_of = {}
    for module in model.modules():
        for child in module.children():
            if isinstance(child, MultiHeadSelfAttention):
                parent_of[id(child)] = module
    saved = [(m, m.causal, m.scale) for m in attns]
    handles = []
    try:
        for m in attns:
            m.causal = m.causal and intervention.causal
            m.scale = (m.scale if intervention.scaling else 1.0) / intervention.temperature

            def on_attention(module, args, kwargs, output):
                x = args[0] if args else kwargs["x"]
                mask = args[1] if len(args) > 1 else kwargs.get("mask")
                records.append({"module": module, "x": x, "mask": mask, "attn_out": output,
                                "causal": module.causal, "scale": module.scale})

            handles.append(m.register_forward_hook(on_attention, with_kwargs=True))
            parent = parent_of.get(id(m))
            if parent is not None and parent is not model:
                def on_block(module, args, output, _m=m):
                    for r in reversed(records):
                        if r["module"] is _m and "output" not in r:
                            r["output"] = output[0] if isinstance(output, tuple) else output
                            break

                handles.append(parent.register_forward_hook(on_block))
        yield
    finally:
        for h in handles:
            h.remove()
        for m, causal, scale in saved:
            m.causal, m.scale = causal, scale


def _layer(r: dict) -> LayerTrace:
    m: MultiHeadSelfAttention = r["module"]
    x = r["x"] if r["x"].dim() == 3 else r["x"][None]     # (1, L, d_model)
    q, k, v = m.project(x)                                 # (1, H, L, D)
    L = q.shape[2]
    causal, scale = r["causal"], r["scale"]
    visible = visibility(L, L, causal=causal, device=q.device)
    mask = r["mask"]
    if mask is not None:
        if mask.dtype != torch.bool:
            raise ValueError("the explainer reads bool visibility masks only, got an additive mask")
        visible = visible & mask.expand(1, 1, L, L)[0, 0]
    res = attention(q, k, v, causal=causal, mask=mask, scale=scale, return_lse=True)
    attn_out = r["attn_out"]
    output = r.get("output", attn_out)
    return LayerTrace(x=x[0], q=q[0], k=k[0], v=v[0], visible=visible, causal=causal, scale=scale, lse=res.lse[0],
                      attn_out=attn_out.reshape(-1, attn_out.shape[-1])[-L:],
                      output=output.reshape(-1, output.shape[-1])[-L:])


def _rows(rows, length: int):
    if rows is None:
        return slice(None)
    if isinstance(rows, bool):
        raise TypeError(f"rows must be an int, a sequence of ints or a slice, got {rows!r}")
    if isinstance(rows, int):
        rows = [rows]
    if isinstance(rows, slice):
        return rows
    rows = list(rows)
    for r in rows:
        if isinstance(r, bool) or not isinstance(r, int) or not -length <= r < length:
            raise ValueError(f"row {r!r} is out of range for {length} query positions")
    return torch.tensor(rows, dtype=torch.long)
