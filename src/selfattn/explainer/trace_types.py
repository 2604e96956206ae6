"""What a capture keeps: a whole model on one input (`ModelTrace`), one attention call of it (`LayerTrace`), a head an
intervention computed apart (`HeadChange`). The types every room reads (the pipeline, analysis, views); the
capture that fills them is `capture.trace`.

A LayerTrace holds Q, K, V, the lse and the rule of its call, not the N×N stages: `LayerTrace.stages(head, rows)`
recomputes them for the rows asked (`stages.head_stages`), exactly, so a 1,000-token input costs O(L·D) memory per
head, not O(L²).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from .. import checks
from ..weights import row_index
from .stages import head_stages, heads_weights, sink_share

if TYPE_CHECKING:
    from .capture.digest import Digest
    from .interventions import Intervention
    from .pieces import Pieces

__all__ = ["HeadChange", "LayerTrace", "ModelTrace", "Measure"]


@dataclass(frozen=True)
class HeadChange:
    """One head computed differently from its layer (an intervention limited to that head)."""

    scale: float
    softcap: float | None
    causal: bool
    visible: torch.Tensor  # (L, L) bool


@dataclass
class LayerTrace:
    """One attention call on one input (batch item 0, or one input of a batched capture cut to its length).

    x        (L, d_model)   the input of the module that made the call (what W_Q multiplies)
    q        (H, L, D)      queries per head (after RoPE, where the model rotates them)
    k, v     (Hkv, L, D)    keys and values per key/value head (query head h reads h // (H/Hkv))
    visible  (L, L) bool    True = may look (causal rule, window and padding together)
    causal   bool           whether the causal rule was on
    scale    float          what Q Kᵀ is multiplied by (1/√D, or as the intervention set it)
    lse      (H, L)         log Σ_j exp(masked score) per query row
    attn_out (L, d_model)   the calling module's output (heads merged, output projection)
    output   (L, d_model)   the output of the module holding it (a block)
    softcap  float | None   scaled scores s become softcap·tanh(s / softcap) before masking
    window   int | (left, right) | None   the sliding window, if any
    features {name: (H,)}   the layer's per-head score features (`scores.FEATURES`), e.g. its sink logits
                            (gpt-oss: each row's weights sum to 1 − exp(sink_h − lse)); visible holds the rest
    changed  {head: HeadChange}  heads an intervention computed differently from the layer
    digest   the per-head summaries and thumbnails read from the call's own weights (`capture.digest`),
             or None when they were too large to ask for (`summary.scan` then recomputes them)
    out_proj (d_model, H·Dv) the output projection W_O that merges the heads (the model's own weight, not a copy:
             head h's slice is out_proj[:, h·Dv:(h+1)·Dv]), or None where the capture found none of that width
             (`analysis.contributions` then has nothing to weigh the values by)
    measured each head's result of `capture`'s `measure` on the call's own weights, or None where it was not
             measured there (no `measure`, weights not asked for or in half precision, a head changed apart):
             `analysis.heads.measures` then measures recomputed weights
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
    softcap: float | None = None
    window: int | tuple[int | None, int | None] | None = None
    changed: dict[int, HeadChange] = field(default_factory=dict)
    digest: Digest | None = None
    features: dict[str, torch.Tensor] = field(default_factory=dict)
    measured: list | None = None
    out_proj: torch.Tensor | None = None

    @property
    def sinks(self) -> torch.Tensor | None:
        """(H,) the layer's sink logits, or None."""
        return self.features.get("sinks")

    @property
    def n_heads(self) -> int:
        return self.q.shape[0]

    @property
    def length(self) -> int:
        return self.q.shape[1]

    def kv_head(self, head: int) -> int:
        return head // (self.q.shape[0] // self.k.shape[0])

    def head_rule(self, head: int) -> tuple[float, float | None, torch.Tensor]:
        """(scale, softcap, visible (L, L)) that head `head` was computed with."""
        c = self.changed.get(head)
        return (self.scale, self.softcap, self.visible) if c is None else (c.scale, c.softcap, c.visible)

    def head_extras(self, head: int) -> dict[str, float]:
        """Head `head`'s value of each per-head score feature the layer has, for `head_stages`."""
        return {name: float(t[head]) for name, t in self.features.items()}

    def sink(self, head: int, dtype: torch.dtype = torch.float64) -> torch.Tensor | None:
        """(L,) the weight each query row of head `head` gives its sink (`stages.sink_share`), None without sinks."""
        if self.sinks is None:
            return None
        return sink_share(float(self.sinks[head]), self.lse[head].to(dtype))

    def weights(self, heads: Sequence[int], *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """(len(heads), L, L) the weights of these heads, none of them changed apart by an intervention, computed
        together (`stages.heads_weights`): each equals `stages(head)["weights"]`."""
        heads = [checks.integer("head", h, low=0, high=self.n_heads - 1) for h in heads]
        if any(h in self.changed for h in heads):
            raise ValueError(f"heads {sorted(set(heads) & set(self.changed))} were changed apart: use stages(head)")
        index = torch.tensor(heads, dtype=torch.long, device=self.q.device)
        kv = torch.tensor([self.kv_head(h) for h in heads], dtype=torch.long, device=self.q.device)
        return heads_weights(
            self.q[index].to(dtype),
            self.k[kv].to(dtype),
            self.lse[index].to(dtype),
            scale=self.scale,
            softcap=self.softcap,
            visible=self.visible,
            **{name: t[index].to(dtype) for name, t in self.features.items()},
        )

    def stages(self, head: int, rows=None, *, dtype: torch.dtype = torch.float64, weighted: bool = True) -> dict:
        """The tutorial's stages for query `rows` (default all) of one head, in `dtype` (`head_stages`);
        with sinks also "sink" (R,): the weight each row gives the sink.

        rows      None, an int, a sequence of ints, a slice or a 1-D integer tensor (`selfattn.weights`' rule)
        weighted  False: leave out "weighted" (weights · V), for callers that need the weights only
        """
        head = checks.integer("head", head, low=0, high=self.n_heads - 1)
        index = row_index(rows, self.length, self.q.device)  # (R,)
        scale, softcap, visible = self.head_rule(head)
        kv = self.kv_head(head)
        return head_stages(
            self.q[head, index].to(dtype),
            self.k[kv].to(dtype),
            scale=scale,
            softcap=softcap,
            visible=visible[index],
            v=self.v[kv].to(dtype) if weighted else None,
            rows=index,
            **self.head_extras(head),
        )


@dataclass
class ModelTrace:
    """A whole model on one input.

    tokens     the token strings, in order (as a person reads them: `explain.pieces` labels)
    token_ids  (L,)
    layers     one LayerTrace per attention call, bottom to top
    logits     (L, vocab) for a decoder, None for an encoder
    pieces     the tokens grouped into characters and words (`explain.pieces.Pieces`), when known
    """

    tokens: list[str]
    token_ids: torch.Tensor
    layers: list[LayerTrace]
    intervention: Intervention
    logits: torch.Tensor | None
    pieces: Pieces | None = None

    @property
    def kind(self) -> str:
        """ "decoder" (some attention call was causal: a next-token prediction exists) or "encoder"."""
        return "encoder" if self.logits is None else "decoder"

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def n_heads(self) -> int:
        return self.layers[0].n_heads if self.layers else 0


Measure = Callable[[torch.Tensor, torch.Tensor, bool, torch.Tensor], list]
"""measure(weights (H, L, L), visible (L, L) bool, causal, nats (H, L) each row's `digest.row_nats`) -> one result
per head: what a caller reads of every head's weights while they exist (`analysis.heads.measurer`), kept as
`LayerTrace.measured`."""
