"""The score rule: everything that turns q·kᵀ into a logit and decides who may look — written once.

    rule = request.rule                          # a ScoreRule: scale, softcap, mask, causal, window
    logits = rule.logits(raw, rows, cols, n_q, n_k)

applies, to one tile of raw scores (raw = q·kᵀ of query rows × key cols, in the compute dtype):

    s = raw · scale                         the tutorial's ÷√d_k (or any scale)
    s = c · tanh(s / c)                     with a softcap c
    s = s − slope_h · |p − j|               ALiBi slopes (p = i + Lk − Lq, bottom-right)
    s = s + mask                            an additive mask (its −inf hides, even where s is NaN or +inf)
    s = −inf where hidden                   a bool mask, the causal rule, the window (`masks.visibility`),
                                            another segment (packed sequences: segments[b, i] ≠ segments[b, j])

and a sink logit per head joins each row's softmax denominator (gpt-oss): w_ij = exp(s_ij) / (Σ_j exp(s_ij)
+ exp(sink_h)), the row's lse includes it (`join_sinks`, `sink_grad`).

−inf rather than a large negative number, so the softmax gives exactly 0 and a NaN in a key that a
row may not see never reaches that row. Every Python path that scores — the naive backend and
`attention_weights` (`weights.masked_scores`), the tiled kernel (which keeps its logits in base 2,
`unit=LOG2_E`), the ring's blocks and the explainer's stages — calls this rule; flex's score_mod /
mask_mod and the C++ tile's arguments are derived from its fields in one function each
(`kernels.flex.mods`, `kernels.native.tile_arguments`). `selfattn.reference` stays the independent
NumPy spec, on purpose.

A score feature is one field here (sinks, ALiBi slopes, segments, the window's two sides), one
`Capabilities` flag (a backend without it refuses the request by name), one C++ branch, and their tests.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from . import masks

__all__ = [
    "ScoreRule",
    "LOG2_E",
    "FEATURES",
    "additive_in",
    "finite_extent",
    "EXTENT_CHUNK",
    "join_sinks",
    "sink_grad",
    "once",
    "constant_when_compiled",
    "values_readable",
]


def values_readable(*tensors: torch.Tensor | None) -> bool:
    """Whether a check may read these tensors' values (a Python bool of a tensor): not while `torch.compile`
    or `torch.export` traces (it would break the graph), nor for a `torch.func` (vmap, grad) wrapped tensor
    (vmap refuses data-dependent control flow). Checks skipped then say so in their callers' docstrings."""
    if torch.compiler.is_compiling():
        return False
    return not any(t is not None and torch._C._functorch.is_functorch_wrapped_tensor(t) for t in tensors)


class once:  # noqa: N801 - used as a decorator, like functools.cached_property
    """`functools.cached_property` without its lock (Python 3.11 takes an RLock, which `torch.compile` cannot
    trace): computed on first access and kept in the instance's __dict__; while compiling, computed each time
    (the graph holds the result)."""

    def __init__(self, fn):
        self.fn, self.name, self.__doc__ = fn, fn.__name__, fn.__doc__

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        if torch.compiler.is_compiling():
            return self.fn(obj)
        value = self.fn(obj)
        obj.__dict__[self.name] = value
        return value


def constant_when_compiled(fn):
    """`fn` marked as `torch.compiler.assume_constant_result` marks it (called once when compiled, its result a
    constant of the graph), without importing torch._dynamo: that import pulls in the compiler stack (Inductor,
    sympy, ~1 s) on a plain call. `tests/kernels/test_imports.py` checks the mark is still torch's."""
    fn._dynamo_marked_constant = True
    return fn


LOG2_E = 1.4426950408889634
"""log₂ e: a logit in base 2 is the natural one times this (`unit=LOG2_E`: softmax by exp2)."""

NEG_INF = float("-inf")

FEATURES = {"sinks": "attention sinks", "alibi": "ALiBi slopes", "segments": "segments (packed sequences)"}
"""The per-head / per-position score features (tensors, fields of the rule and the request) and what a backend
lacks without them: one without the Capabilities flag of that name refuses them ("it has no <words>")."""

EXTENT_CHUNK = 1 << 20
"""Entries of a mask `finite_extent` looks at per step when the mask holds −inf (a few MiB of scratch)."""


def additive_in(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An additive mask (tile) in `dtype`, its finite entries saturated to dtype's range: −1e300 in a float64
    mask becomes float32's most negative number, not −inf (−inf hides a key; a finite value only weighs it
    down, and a row of equal finite values is a uniform row). −inf stays −inf."""
    if mask.dtype == dtype:
        return mask
    out = mask.to(dtype)
    if torch.finfo(mask.dtype).max > torch.finfo(dtype).max:
        info = torch.finfo(dtype)
        over = torch.isinf(out) & torch.isfinite(mask)
        if not values_readable(over) or bool(over.any()):
            out = torch.where(over, torch.where(mask > 0, info.max, info.min).to(dtype), out)
    return out


def finite_extent(mask: torch.Tensor) -> float:
    """The largest |x| over the finite entries x of a 4-D `mask` (0.0 if none). Two reductions when the mask
    holds no ±inf; otherwise a pass over its distinct entries (broadcast dimensions once), at most
    EXTENT_CHUNK elements at a time, so the scratch stays small whatever the mask's size."""
    m = mask.detach()
    if m.numel() == 0:
        return 0.0
    lo, hi = float(m.amin()), float(m.amax())
    if abs(lo) != float("inf") and abs(hi) != float("inf"):
        return max(abs(lo), abs(hi))
    m = m[tuple(slice(0, 1) if stride == 0 else slice(None) for stride in m.stride())]  # each entry once
    step = max(1, EXTENT_CHUNK // max(1, m.shape[3]))
    extent = 0.0
    for b in range(m.shape[0]):
        for h in range(m.shape[1]):
            for i in range(0, m.shape[2], step):
                part = m[b, h, i : i + step]
                extent = max(extent, float(part.abs().masked_fill_(torch.isinf(part), 0).amax()))
    return extent


@dataclass(frozen=True, eq=False)
class ScoreRule:
    """Everything that turns q·kᵀ into a logit and decides visibility.

    scale    multiplies q·kᵀ (1/√D by default in `attention`)
    softcap  c: a scaled score s becomes c·tanh(s/c); None: no cap
    mask     None, or bool (True = may look) / additive float, 4-D (Bm, Hq|1, Lq|1, Lk|1)
    causal   query i (at position p = i + Lk − Lq, bottom-right) sees keys j <= p
    window   w: keys p − w < j <= p only; (left, right): p − left <= j <= p + right (None: unbounded side)
    sinks    (Hq,) sink logits joining each row's denominator (not part of `logits`: `join_sinks`)
    alibi    (Hq,) slopes: score −= slope_h · |p − j|, after the softcap
    segments (B, L) integer ids: key j hidden from query i unless segments[b, i] == segments[b, j]
    """

    scale: float
    softcap: float | None = None
    mask: torch.Tensor | None = None
    causal: bool = False
    window: int | tuple[int | None, int | None] | None = None
    sinks: torch.Tensor | None = None
    alibi: torch.Tensor | None = None
    segments: torch.Tensor | None = None

    def __post_init__(self):
        if self.mask is not None and self.mask.dim() != 4:
            raise ValueError(f"a ScoreRule's mask is 4-D (Bm, Hq|1, Lq|1, Lk|1), got shape {tuple(self.mask.shape)}")

    @classmethod
    def of(cls, request) -> ScoreRule:
        """The rule of a `selfattn.request.Request` (the same as `request.rule`)."""
        return cls(**{name: getattr(request, name) for name in _FIELDS})

    @once
    def bounds(self) -> tuple[int | None, int | None] | None:
        """(left, right): key j visible to query position p when p − left <= j <= p + right (None: that side
        unbounded), the causal rule and the window together (`masks.bounds`); None when positions hide nothing."""
        return masks.bounds(self.causal, self.window)

    @property
    def limited(self) -> bool:
        """Whether positions alone hide keys (causal or windowed)."""
        return self.bounds is not None

    @property
    def mask_kind(self) -> str | None:
        """None, "bool" or "additive"."""
        if self.mask is None:
            return None
        return "bool" if self.mask.dtype == torch.bool else "additive"

    @once
    def mask_extent(self) -> float:
        """The largest |x| over an additive mask's finite entries (0.0 for none or a bool mask)."""
        mask = self.mask
        return finite_extent(mask) if mask is not None and mask.dtype != torch.bool else 0.0

    def base2_fits(self, dtype: torch.dtype) -> bool:
        """Whether this rule's logits may be kept in base 2 (× LOG2_E) in `dtype`: an additive mask's
        finite entries (saturated to dtype) times log₂e must stay finite. torch.finfo(float32).min — the
        transformers idiom for "hidden" — does not: times log₂e it is −inf, and a row of it (whose weights
        are uniform) would become a row that sees nothing."""
        return min(self.mask_extent, torch.finfo(dtype).max) * LOG2_E <= torch.finfo(dtype).max

    def alpha(self, unit: float = 1.0) -> float:
        """What a matmul may fold into q·kᵀ (its alpha) for `scaled(..., folded=True)`: scale·unit, or
        scale/c under a softcap c (the cap's tanh comes after it)."""
        return self.scale * unit if self.softcap is None else self.scale / self.softcap

    def cap(self, s: torch.Tensor) -> torch.Tensor:
        """The softcap of scaled scores s: c·tanh(s / c), or s itself without a cap (FlexAttention's
        score_mod, whose scores arrive scaled, calls this)."""
        return s if self.softcap is None else self.softcap * torch.tanh(s / self.softcap)

    def scaled(self, raw: torch.Tensor, *, unit: float = 1.0, folded: bool = False, keep_tanh: bool = False):
        """raw = q·kᵀ → raw · scale, then c·tanh(· / c) under a softcap c, in `unit`s (LOG2_E: base 2).

        folded     raw already carries `alpha(unit)` (a matmul's alpha): only the cap is left, done in place
        keep_tanh  return (scaled, tanh) — the softcap's derivative 1 − tanh² needs it (None without a cap)
        """
        tanh = None
        if folded:  # raw = q·kᵀ · scale·unit, or q·kᵀ · scale/c
            s = raw
            if self.softcap is not None:
                tanh = raw.tanh_()
                s = tanh * (self.softcap * unit) if keep_tanh else tanh.mul_(self.softcap * unit)
        else:
            s = raw * self.scale
            if self.softcap is not None and keep_tanh:
                tanh = torch.tanh(s / self.softcap)
                s = self.softcap * tanh
            else:
                s = self.cap(s)
            if unit != 1.0:
                s = s * unit
        return (s, tanh) if keep_tanh else s

    def visible_at(self, p: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        """Elementwise, for query positions p and key positions j (broadcasting; p = i + Lk − Lq): whether
        the causal / window rule lets p see j (`masks.visible_at`). Only for a `limited` rule."""
        return masks.visible_at(p, j, self.bounds)

    def visible(
        self,
        rows: torch.Tensor | None,
        cols: torch.Tensor | None,
        n_q: int,
        n_k: int,
        *,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """bool (R, C), True = may look by position: the causal / window rule (`masks.visibility`) for query
        indices `rows` and key indices `cols` of a request with n_q queries and n_k keys (None: all)."""
        return masks.visibility(n_q, n_k, causal=self.causal, window=self.window, device=device, rows=rows, cols=cols)

    def alibi_bias(self, rows, cols, n_q: int, n_k: int, *, dtype, device, unit: float = 1.0) -> torch.Tensor:
        """−slope_h · |p − j| · unit for query indices `rows` × key indices `cols` (None: all): (Hq, R, C) in
        `dtype`, p = i + n_k − n_q. Only for a rule with `alibi`."""
        rows = torch.arange(n_q, device=device) if rows is None else rows
        cols = torch.arange(n_k, device=device) if cols is None else cols
        distance = (rows[:, None] + (n_k - n_q) - cols[None, :]).abs().to(dtype)  # (R, C)
        if self.alibi is None:
            raise ValueError("alibi_bias needs a rule with alibi")
        return (self.alibi.detach().to(dtype) * -unit)[:, None, None] * distance

    def segment_hidden(self, rows=None, cols=None) -> torch.Tensor:
        """True where query i and key j lie in different segments: (B, 1, R, C). Only with `segments`."""
        seg = self.segments
        if seg is None:
            raise ValueError("segment_hidden needs a rule with segments")
        a = seg if rows is None else seg[:, rows]
        b = seg if cols is None else seg[:, cols]
        return a[:, None, :, None] != b[:, None, None, :]

    @once
    def segment_spans(self) -> tuple[torch.Tensor, bool]:
        """((2, B, L) int64: for each position the first key of its segment and one past its last, whether every
        segment is one contiguous run — then the span alone is the segment rule). Only with `segments`.

        By a stable sort of each row's ids (no data-dependent shapes, so `torch.compile` traces it): a group
        of equal ids keeps its positions in order, so its first and last sorted entries are the span. While
        compiling or under vmap, `contiguous` is False (`values_readable`): the kernel then also reads the ids."""
        seg = self.segments
        if seg is None:
            raise ValueError("segment_spans needs a rule with segments")
        B, L = seg.shape
        if L == 0:
            return torch.empty(2, B, 0, dtype=torch.int64, device=seg.device), True
        ids, pos = torch.sort(seg, dim=1, stable=True)
        index = torch.arange(L, device=seg.device).expand(B, L)
        edge = torch.ones(B, 1, dtype=torch.bool, device=seg.device)
        starts = torch.cat([edge, ids[:, 1:] != ids[:, :-1]], dim=1)  # a new id begins here (sorted order)
        ends = torch.cat([starts[:, 1:], edge], dim=1)  # the last of its id
        start = torch.where(starts, index, 0).cummax(dim=1).values
        end = torch.where(ends, index, L - 1).flip(1).cummin(dim=1).values.flip(1)
        first, last = (torch.zeros_like(pos).scatter(1, pos, pos.gather(1, at)) for at in (start, end))
        span = torch.stack([first, last + 1])  # out of place: vmap and compile trace it
        if not values_readable(seg):
            return span, False
        runs = 1 + (seg[:, 1:] != seg[:, :-1]).sum(dim=1)
        return span, bool((runs == starts.sum(dim=1)).all())

    def hide(
        self,
        s: torch.Tensor,
        mask: torch.Tensor | None = None,
        hidden: torch.Tensor | None = None,
        *,
        unit: float = 1.0,
        inplace: bool = False,
    ) -> torch.Tensor:
        """Scaled scores s → logits: + an additive `mask` tile (times `unit`; its −inf hides even where s is
        +inf or NaN), −inf where a bool `mask` tile is False or `hidden` is True. Both broadcast to s."""
        if mask is not None:
            if mask.dtype == torch.bool:
                s = s.masked_fill_(~mask, NEG_INF) if inplace else s.masked_fill(~mask, NEG_INF)
            else:
                add = additive_in(mask, s.dtype)
                term = add if unit == 1.0 else add * unit
                s = s.add_(term) if inplace else s + term
                s = s.masked_fill_(add == NEG_INF, NEG_INF) if inplace else s.masked_fill(add == NEG_INF, NEG_INF)
        if hidden is not None:
            s = s.masked_fill_(hidden, NEG_INF) if inplace else s.masked_fill(hidden, NEG_INF)
        return s

    def mask_tile(self, rows: torch.Tensor | None = None, cols: torch.Tensor | None = None) -> torch.Tensor | None:
        """The rule's mask on query indices `rows` × key indices `cols` (None: all): (Bm, Hm, R|1, C|1)."""
        m = self.mask
        if m is None:
            return None
        if rows is not None and m.shape[2] > 1:
            m = m[:, :, rows]
        if cols is not None and m.shape[3] > 1:
            m = m[:, :, :, cols]
        return m

    def stages(self, raw, rows=None, cols=None, n_q=None, n_k=None, *, unit=1.0, folded=False, keep_tanh=False):
        """{"scaled", "masked"} (and "tanh" with keep_tanh) of a tile in the standard layout.

        raw   (..., Hq|1, R, C) q·kᵀ of query indices `rows` (R,) × key indices `cols` (C,) (None: all)
        n_q, n_k   Lq and Lk of the whole request (they fix the bottom-right alignment); default R and C
        """
        n_q = raw.shape[-2] if n_q is None else n_q
        n_k = raw.shape[-1] if n_k is None else n_k
        scaled, tanh = self.scaled(raw, unit=unit, folded=folded, keep_tanh=True)
        hidden = ~self.visible(rows, cols, n_q, n_k, device=raw.device) if self.limited else None
        if self.segments is not None:  # (B, 1, R, C): raw's leading dim is the batch
            apart = self.segment_hidden(rows, cols)
            hidden = apart if hidden is None else apart | hidden
        biased = scaled
        if self.alibi is not None:
            biased = scaled + self.alibi_bias(rows, cols, n_q, n_k, dtype=scaled.dtype, device=raw.device, unit=unit)
        masked = self.hide(biased, self.mask_tile(rows, cols), hidden, unit=unit)
        out = {"scaled": scaled, "masked": masked}
        return out | {"tanh": tanh} if keep_tanh else out

    def logits(self, raw, rows=None, cols=None, n_q=None, n_k=None, *, unit=1.0, folded=False, keep_tanh=False):
        """Masked logits of one tile (see `stages`): scale → softcap → additive mask → −inf where hidden.
        With keep_tanh: (logits, tanh of the softcap or None)."""
        st = self.stages(raw, rows, cols, n_q, n_k, unit=unit, folded=folded, keep_tanh=keep_tanh)
        return (st["masked"], st["tanh"]) if keep_tanh else st["masked"]

    def as_dict(self) -> dict:
        """The rule as JSON-ready data (for the page): numbers, flags, and the mask's kind and shape."""
        mask = None if self.mask is None else {"kind": self.mask_kind, "shape": list(self.mask.shape)}
        return {
            "scale": float(self.scale),
            "softcap": None if self.softcap is None else float(self.softcap),
            "causal": bool(self.causal),
            "window": self.window if not isinstance(self.window, tuple) else list(self.window),
            "mask": mask,
            "sinks": None if self.sinks is None else [float(x) for x in self.sinks.detach().double().tolist()],
            "alibi": None if self.alibi is None else [float(x) for x in self.alibi.detach().double().tolist()],
            "segments": None if self.segments is None else list(self.segments.shape),
        }


_FIELDS = tuple(f.name for f in fields(ScoreRule))
"""The rule's field names, read once (`torch.compile` cannot trace `dataclasses.fields`)."""


def join_sinks(sinks: torch.Tensor, lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(lse with the sink, the factor exp(lse − lse') that scales a sink-free row's weights and output):
    lse' = log(exp(lse) + exp(sink_h)). sinks (Hq,), lse (B, Hq, Lq) natural units; differentiable."""
    sink = sinks.to(lse.dtype)[:, None].expand_as(lse)
    joined = torch.logaddexp(lse, sink)
    return joined, torch.exp(lse - joined)


def sink_grad(sinks: torch.Tensor, lse: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """∂loss/∂sink_h = −Σ_{b,i} w_sink · Δ_bhi, with w_sink = exp(sink_h − lse_bhi) (lse includes the sink) and
    Δ = rowsum(dO ∘ O) − dlse (`kernels.base.softmax_delta`): the sink is a key whose value is 0.
    sinks (Hq,), lse and delta (B, Hq, Lq) natural units; returns (Hq,) in sinks' dtype; differentiable (sinks
    not detached), so a second derivative through it is right where the rest of the graph has one."""
    w_sink = torch.exp(sinks.to(lse.dtype)[:, None] - lse)  # (B, Hq, Lq)
    return -(w_sink * delta.to(lse.dtype)).sum(dim=(0, 2)).to(sinks.dtype)
