"""The score rule: everything that turns q·kᵀ into a logit and decides who may look — written once.

    rule = request.rule                          # a ScoreRule: scale, softcap, mask, causal, window
    logits = rule.logits(raw, rows, cols, n_q, n_k)

applies, to one tile of raw scores (raw = q·kᵀ of query rows × key cols, in the compute dtype):

    s = raw · scale                         the tutorial's ÷√d_k (or any scale)
    s = c · tanh(s / c)                     with a softcap c
    s = s − slope_h · |p − j|               ALiBi slopes (p = i + Lk − Lq, bottom-right)
    s = score_mod(s, b, h, i, j)            FlexAttention's score_mod (`modify`), on natural-unit scores
    s = s + mask                            an additive mask (its −inf hides, even where s is NaN or +inf)
    s = −inf where hidden                   a bool mask, the causal rule, the window (`masks.visibility`),
                                            another segment (packed sequences: segments[b, i] ≠ segments[b, j]),
                                            a mask_mod's block mask (`blocked_out`: False in its empty blocks)

and a sink logit per head joins each row's softmax denominator (gpt-oss): w_ij = exp(s_ij) / (Σ_j exp(s_ij)
+ exp(sink_h)), the row's lse includes it (`join_sinks`, `sink_grad`).

−inf rather than a large negative number, so the softmax gives exactly 0 and a NaN in a key that a
row may not see never reaches that row. Every Python path that scores — the naive backend and
`attention_weights` (`weights.masked_scores`), the tiled kernel (which keeps its logits in base 2,
`unit=LOG2_E`), the ring's blocks and the explainer's stages — calls this rule; flex's score_mod /
mask_mod and the C++ tile's arguments are derived from its fields in one function each
(`kernels.flex.mods`, `kernels.native.tile_arguments`). `selfattn.reference` stays the independent
NumPy spec, on purpose.

FlexAttention's programmability joins the rule as two more features: a `mask_mod` evaluated once per shape into a
block mask (`masks.BlockMask`: hidden where it says False; the native kernel skips its empty blocks and masks only
its partial ones) and a `score_mod(score, b, h, q_idx, kv_idx)` applied after the softcap and ALiBi, before the
masks (`modify`; a vectorised call on a tile with broadcast index tensors).

A tensor score feature is data: one `Feature` entry in `FEATURES` (its keyword, words, check, whether it is
per head) and the rule's field of that name with the method that applies it (`bias`, `apart`, `join_sinks`);
then `reference.py`, one C++ branch, one flex mod, and their tests. Generic code asks the rule: a backend
declares the features it supports (`Capabilities.features`) and refuses the rest by their words
(`unsupported`); the C++ tile's arguments, the explainer's export and the ring's checks iterate `FEATURES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

import torch

from . import masks
from .compiling import constant_when_compiled, once, values_readable
from .masks import EXTENT_CHUNK, additive_in, finite_extent

__all__ = [
    "ScoreRule",
    "LOG2_E",
    "Feature",
    "FEATURES",
    "PER_HEAD",
    "POSITIONAL",
    "check_dense",
    "check_per_head",
    "check_slopes",
    "check_segments",
    "alibi_mask",
    "additive_in",
    "finite_extent",
    "EXTENT_CHUNK",
    "join_sinks",
    "sink_grad",
    "once",
    "constant_when_compiled",
    "values_readable",
]


LOG2_E = 1.4426950408889634
"""log₂ e: a logit in base 2 is the natural one times this (`unit=LOG2_E`: softmax by exp2)."""

NEG_INF = float("-inf")

# --- the tensor score features: one entry each -----------------------------------------------------------


def check_dense(name: str, t) -> torch.Tensor:
    """`t` if it is an ordinary (dense, strided, not nested) tensor; else a TypeError naming it."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.is_nested:
        raise TypeError(
            f"{name} is a nested tensor; attention needs dense (B, H, L, D) tensors (pad it: .to_padded_tensor)"
        )
    if t.layout != torch.strided:
        raise TypeError(f"{name} has layout {t.layout}; attention needs dense strided tensors (call .to_dense())")
    return t


def check_per_head(name: str, t, Hq: int, device: torch.device) -> torch.Tensor:
    """`t` checked as a (Hq,) floating tensor of finite values on `device` (sinks, ALiBi slopes)."""
    check_dense(name, t)
    if not t.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating tensor of shape (Hq,) = ({Hq},), got dtype {t.dtype}")
    if tuple(t.shape) != (Hq,):
        raise ValueError(f"{name} must have shape (Hq,) = ({Hq},), got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but q is on {device}")
    if values_readable(t) and not bool(torch.isfinite(t.detach()).all()):
        raise ValueError(f"{name} must be finite, got {t.detach().tolist()}")
    return t


def check_slopes(t, B: int, Hq: int, device: torch.device) -> torch.Tensor:
    """ALiBi slopes checked as (Hq,) or (B, Hq) (FlashAttention's alibi_slopes) finite constants; (1, Hq) is
    viewed as (Hq,)."""
    check_dense("alibi", t)
    if t.dim() == 2 and tuple(t.shape) in ((1, Hq), (B, Hq)):
        if t.shape[0] == 1:
            t = t[0]
    elif tuple(t.shape) != (Hq,):
        raise ValueError(f"alibi must have shape (Hq,) = ({Hq},) or (B, Hq) = ({B}, {Hq}), got {tuple(t.shape)}")
    check_per_head("alibi", t.reshape(-1), t.numel(), device)  # dtype, device, finite
    if t.requires_grad and torch.is_grad_enabled():
        raise ValueError("alibi slopes are constants and are not differentiated: pass alibi.detach()")
    return t


def alibi_mask(slopes: torch.Tensor, mask: torch.Tensor | None, Lq: int, Lk: int, dtype: torch.dtype):
    """Per-batch ALiBi slopes (B, Hq) as the additive mask they are: −slope_bh · |p − j| (B, Hq, Lq, Lk), p = i +
    Lk − Lq, joined with a checked 4-D `mask` (a bool one hides with −inf, an additive one adds). Exact: ALiBi
    and an additive mask are both added after the softcap. Costs a (B, Hq, Lq, Lk) tensor; (Hq,) slopes do not."""
    if mask is not None and mask.dtype.is_floating_point:
        dtype = torch.promote_types(dtype, mask.dtype)
    p = torch.arange(Lq, device=slopes.device) + (Lk - Lq)
    distance = (p[:, None] - torch.arange(Lk, device=slopes.device)[None, :]).abs().to(dtype)  # (Lq, Lk)
    bias = -slopes.detach().to(dtype)[:, :, None, None] * distance
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return bias.masked_fill(~mask, float("-inf"))
    return mask.to(dtype) + bias


def check_segments(t, B: int, Lq: int, Lk: int, device: torch.device) -> torch.Tensor:
    """`t` checked as (B, L) integer segment ids for Lq = Lk = L, on `device` (packed sequences)."""
    check_dense("segments", t)
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise TypeError(f"segments must be an integer tensor of shape (B, L), got dtype {t.dtype}")
    if Lq != Lk:
        raise ValueError(f"segments need Lq = Lk (one packed sequence), got Lq={Lq}, Lk={Lk}")
    if tuple(t.shape) != (B, Lq):
        raise ValueError(f"segments must have shape (B, L) = ({B}, {Lq}), got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"segments is on {t.device} but q is on {device}")
    return t.to(torch.int64)


Checked = tuple[Any, torch.Tensor | None]
"""(the feature's checked value, or None where it became part of the mask; the 4-D mask, joined or as it was)."""


Shape = tuple[int, int, int, int]
"""(B, Hq, Lq, Lk) of a request."""


def _draw_sinks(Hq: int, g: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(Hq, generator=g).to(dtype)


def _draw_slopes(Hq: int, g: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """ALiBi's geometric slopes, 2^(−8h/H) (float32 constants, whatever the dtype)."""
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / Hq) for h in range(Hq)])


def _sinks(t, mask, shape: Shape, device, acc: torch.dtype) -> Checked:
    return check_per_head("sinks", t, shape[1], device), mask


def _slopes(t, mask, shape: Shape, device, acc: torch.dtype) -> Checked:
    B, Hq, Lq, Lk = shape
    t = check_slopes(t, B, Hq, device)
    if t.dim() == 2:  # (B, Hq): per-batch slopes, exactly an additive mask
        return None, alibi_mask(t, mask, Lq, Lk, acc)
    return t, mask


def _segments(t, mask, shape: Shape, device, acc: torch.dtype) -> Checked:
    B, _, Lq, Lk = shape
    return check_segments(t, B, Lq, Lk, device), mask


def check_block_mask(bm, shape: Shape, device: torch.device) -> masks.BlockMask:
    """`bm` checked as a `masks.BlockMask` for a request of (B, Hq, Lq, Lk) = shape on `device`: its Lq and Lk are
    the request's, its map holds one batch item or B, one head or Hq."""
    B, Hq, Lq, Lk = shape
    if not isinstance(bm, masks.BlockMask):
        raise TypeError(
            f"block_mask must be a selfattn.masks.BlockMask (selfattn.masks.block_mask(mask_mod, B, H, Lq, Lk)), "
            f"got {type(bm).__name__}"
        )
    Bm, Hm = bm.kinds.shape[:2]
    if bm.shape[2:] != (Lq, Lk) or Bm not in (1, B) or Hm not in (1, Hq) or bm.shape[0] not in (1, B):
        raise ValueError(
            f"block_mask was made for (B, H, Lq, Lk) = {bm.shape} (a map of {Bm} batch item(s), {Hm} head(s)), "
            f"which does not fit the request's (B, Hq, Lq, Lk) = {shape}"
        )
    if bm.device != device:
        raise ValueError(f"block_mask is on {bm.device} but q is on {device}")
    return bm


def _block_mask(bm, mask, shape: Shape, device, acc: torch.dtype) -> Checked:
    return check_block_mask(bm, shape, device), mask


def _score_mod(fn, mask, shape: Shape, device, acc: torch.dtype) -> Checked:
    if not callable(fn):
        raise TypeError(f"score_mod must be callable as score_mod(score, b, h, q_idx, kv_idx), got {type(fn).__name__}")
    return fn, mask


@dataclass(frozen=True)
class Feature:
    """One tensor score feature: `attention`'s keyword and the rule's field of that name, the words a backend
    without it is refused with ("it has no <words>"), its check (value, 4-D mask or None, (B, Hq, Lq, Lk),
    q's device, the accumulation dtype) → `Checked`, whether it holds one value per query head (cut by `one_head`,
    sent to the C++ tile, exported per head), whether a batched form of it folds into the mask, for a per-head
    one a typical value drawn for a benchmark (Hq, a generator, the dtype of q), and `mod`: a user's function (or
    what was made of one), not a tensor — in the rule's data only where set."""

    name: str
    words: str
    check: Callable[..., Checked]
    per_head: bool = False
    folds: bool = False
    draw: Callable[[int, torch.Generator, torch.dtype], torch.Tensor] | None = None
    mod: bool = False


FEATURES: dict[str, Feature] = {
    f.name: f
    for f in (
        Feature("sinks", "attention sinks", _sinks, per_head=True, draw=_draw_sinks),
        Feature("alibi", "ALiBi slopes", _slopes, per_head=True, folds=True, draw=_draw_slopes),
        Feature("segments", "segments (packed sequences)", _segments),
        Feature("block_mask", "mask_mod (block mask)", _block_mask, mod=True),
        Feature("score_mod", "score_mod", _score_mod, mod=True),
    )
}
"""The tensor score features in their one order (the rule's fields, the C++ tile's arguments, the export's
keys). A backend's Capabilities name those it supports; it refuses the others by their words."""

PER_HEAD = tuple(name for name, f in FEATURES.items() if f.per_head)
"""The features holding one value per query head, in `FEATURES` order."""


POSITIONAL = ("causal", "window", "alibi", "segments")
"""The rule's fields that depend on where a query and a key stand (`without_positions` drops them)."""


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
    mask_mod   FlexAttention's mask_mod(b, h, q_idx, kv_idx) -> bool (True = may look), or None; always with
               its block_mask (`build_request` evaluates one from the other)
    block_mask a `masks.BlockMask`: mask_mod evaluated once for this shape (empty, partial, full blocks)
    score_mod  FlexAttention's score_mod(score, b, h, q_idx, kv_idx) -> score, on the scaled score after the
               softcap and ALiBi, before the masks; or None
    """

    scale: float
    softcap: float | None = None
    mask: torch.Tensor | None = None
    causal: bool = False
    window: int | tuple[int | None, int | None] | None = None
    sinks: torch.Tensor | None = None
    alibi: torch.Tensor | None = None
    segments: torch.Tensor | None = None
    mask_mod: Callable | None = None
    block_mask: masks.BlockMask | None = None
    score_mod: Callable | None = None

    def __post_init__(self):
        if self.mask is not None and self.mask.dim() != 4:
            raise ValueError(f"a ScoreRule's mask is 4-D (Bm, Hq|1, Lq|1, Lk|1), got shape {tuple(self.mask.shape)}")

    @classmethod
    def of(cls, request) -> ScoreRule:
        """The rule of a `selfattn.request.Request` (its `rule`)."""
        return request.rule

    def replace(self, **changes) -> ScoreRule:
        """This rule with some fields changed (`dataclasses.replace`; what `once` kept is computed anew)."""
        return replace(self, **changes)

    def features(self) -> dict[str, torch.Tensor]:
        """The tensor score features this rule sets, by name, in `FEATURES` order."""
        return {name: value for name in FEATURES if (value := getattr(self, name)) is not None}

    def unsupported(self, supported: frozenset[str]) -> list[Feature]:
        """The features this rule sets that are not in `supported` (a backend's `Capabilities.features`)."""
        return [FEATURES[name] for name in self.features() if name not in supported]

    def per_head(self) -> tuple[torch.Tensor | None, ...]:
        """Each per-head feature's (Hq,) tensor or None, in `FEATURES` order (the C++ tile's arguments)."""
        return tuple(getattr(self, f.name) for f in FEATURES.values() if f.per_head)

    def keywords(self) -> dict[str, Any]:
        """The rule as `selfattn.attention`'s keyword arguments (the fields it sets)."""
        return {name: value for name in _FIELDS if (value := getattr(self, name)) is not _DEFAULTS.get(name)}

    def without_positions(self) -> ScoreRule:
        """This rule without its terms of where a query and key stand (`POSITIONAL`): scale, softcap, mask and
        the per-row features are left (the ring draws the rest as a mask of global positions)."""
        return self.replace(**{name: _DEFAULTS[name] for name in POSITIONAL})

    def one_head(self, head: int, Hq: int) -> ScoreRule:
        """This rule for query head `head` of Hq alone: a mask with a head axis and each per-head feature
        cut to that head."""
        cut: dict[str, Any] = {}
        if self.mask is not None and self.mask.shape[1] > 1:
            cut["mask"] = self.mask[:, head : head + 1]
        for name, value in self.features().items():
            if FEATURES[name].per_head and value.dim() == 1 and value.numel() == Hq:
                cut[name] = value[head : head + 1]
        if Hq > 1 and self.block_mask is not None:  # the mods asked for head 0 answer for head `head`
            cut["block_mask"] = self.block_mask.one_head(head)
            cut["mask_mod"] = cut["block_mask"].mask_mod
        if Hq > 1 and self.score_mod is not None:
            cut["score_mod"] = masks.HeadShifted(self.score_mod, head)
        return self.replace(**cut)

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

    @property
    def biased(self) -> bool:
        """Whether a per-head term of positions joins the scores (`bias`)."""
        return self.alibi is not None

    def bias(self, rows, cols, n_q: int, n_k: int, *, dtype, device, unit: float = 1.0) -> torch.Tensor | None:
        """The per-head position terms added after the softcap, (Hq, R, C) in `dtype` for query indices `rows`
        × key indices `cols` (None: all), p = i + n_k − n_q; None for a rule without them (`biased`)."""
        if self.alibi is None:
            return None
        return self.alibi_bias(rows, cols, n_q, n_k, dtype=dtype, device=device, unit=unit)

    @property
    def parted(self) -> bool:
        """Whether ids hide keys from queries in other parts (`apart`)."""
        return self.segments is not None

    def apart(self, rows=None, cols=None) -> torch.Tensor | None:
        """(B, 1, R, C) True where ids hide key j from query i (another segment); None for a rule without ids."""
        return None if self.segments is None else self.segment_hidden(rows, cols)

    @property
    def blocked(self) -> bool:
        """Whether a block mask (a mask_mod evaluated per block) hides keys (`blocked_out`)."""
        return self.block_mask is not None

    def blocked_out(self, rows=None, cols=None) -> torch.Tensor | None:
        """(Bm, Hm, R, C) True where the block mask hides key j from query i (Bm, Hm: 1 where it is the same for
        every batch item / head); None for a rule without one."""
        return None if self.block_mask is None else ~self.block_mask.dense(rows, cols)

    def tile_hidden(self, q0: int, q1: int, k0: int, k1: int) -> bool:
        """Whether the block mask hides the whole tile of queries [q0, q1) × keys [k0, k1) (every item and head):
        a kernel skips it. False for a rule without a block mask."""
        return self.block_mask is not None and self.block_mask.hidden_blocks(q0, q1, k0, k1)

    @property
    def modded(self) -> bool:
        """Whether a user's function of the score joins the rule (`modify`)."""
        return self.score_mod is not None

    def modify(self, s: torch.Tensor, b, h, q, kv, *, unit: float = 1.0) -> torch.Tensor:
        """score_mod(s, b, h, q_idx, kv_idx) on a tile of scaled scores s in `unit`s (called on natural ones), the
        index tensors broadcasting to s; its answer checked (a floating tensor of s's shape, or broadcasting to it)."""
        fn = self.score_mod
        if fn is None:
            return s
        x = s if unit == 1.0 else s / unit
        y = fn(x, b, h, q, kv)
        name = getattr(fn, "__qualname__", type(fn).__name__)
        if not isinstance(y, torch.Tensor) or not y.dtype.is_floating_point:
            what = f"dtype {y.dtype}" if isinstance(y, torch.Tensor) else f"{type(y).__name__} {y!r}"
            raise TypeError(f"score_mod {name} must return a floating tensor of the score's shape, got {what}")
        try:
            y = torch.broadcast_to(y, s.shape)
        except RuntimeError:
            raise ValueError(
                f"score_mod {name} returned shape {tuple(y.shape)}, which does not broadcast to the scores' "
                f"{tuple(s.shape)}"
            ) from None
        y = y.to(s.dtype)
        return y if unit == 1.0 else y * unit

    def mods_holding_grad(self) -> list[str]:
        """The words of each user function of the rule whose answer requires grad on scores that do not (it holds
        a tensor that requires grad): a kernel whose backward is its own cannot take that gradient. One call on a
        one-element tile."""
        if self.score_mod is None or not torch.is_grad_enabled():
            return []
        zero = torch.zeros((), dtype=torch.int64)
        y = self.modify(torch.zeros(1, 1, 1, 1), zero, zero, zero, zero)
        return [FEATURES["score_mod"].words] if y.requires_grad else []

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
        segment is one contiguous run — then the span alone is the segment rule): `masks.segment_spans` of the
        rule's segments. Only with `segments`."""
        if self.segments is None:
            raise ValueError("segment_spans needs a rule with segments")
        return masks.segment_spans(self.segments)

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
        apart = self.apart(rows, cols) if self.parted else None  # (B, 1, R, C): raw's leading dim is the batch
        if apart is not None:
            hidden = apart if hidden is None else apart | hidden
        blocked = self.blocked_out(rows, cols) if self.blocked else None  # (Bm, Hm, R, C)
        if blocked is not None:
            hidden = blocked if hidden is None else blocked | hidden
        bias = self.bias(rows, cols, n_q, n_k, dtype=scaled.dtype, device=raw.device, unit=unit)
        biased = scaled if bias is None else scaled + bias
        if self.modded:  # raw is (B, Hq, R, C) (or one head's (B, 1, R, C): `one_head` shifts the mod's heads)
            index = _indices(raw, rows, cols)
            biased = self.modify(biased, *index, unit=unit)
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
        } | {
            name: _feature_data(f, getattr(self, name))
            for name, f in FEATURES.items()
            if not f.mod or getattr(self, name) is not None
        }


def _feature_data(feature: Feature, t) -> list | str | None:
    """A feature as JSON-ready data: None where unset, a per-head one's values, another's shape (a function's
    name: a score_mod)."""
    if t is None:
        return None
    if feature.per_head:
        return [float(x) for x in t.detach().double().tolist()]
    return list(t.shape) if hasattr(t, "shape") else getattr(t, "__qualname__", type(t).__name__)


def _indices(raw: torch.Tensor, rows, cols) -> tuple[torch.Tensor, ...]:
    """(b, h, q_idx, kv_idx) broadcasting to a tile `raw` of (B, H, R, C) (fewer leading dims: batch item and
    head 0) for query indices `rows` and key indices `cols` (None: all)."""
    device = raw.device
    R, C = raw.shape[-2], raw.shape[-1]
    B = raw.shape[-4] if raw.dim() >= 4 else 1
    H = raw.shape[-3] if raw.dim() >= 3 else 1
    q = torch.arange(R, device=device) if rows is None else rows
    kv = torch.arange(C, device=device) if cols is None else cols
    b = torch.arange(B, device=device)[:, None, None, None]
    h = torch.arange(H, device=device)[None, :, None, None]
    return b, h, q[None, None, :, None], kv[None, None, None, :]


_FIELDS = tuple(f.name for f in fields(ScoreRule))
"""The rule's field names, read once (`torch.compile` cannot trace `dataclasses.fields`)."""

_DEFAULTS = {f.name: f.default for f in fields(ScoreRule)}
"""Each field's default (scale has none)."""


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
