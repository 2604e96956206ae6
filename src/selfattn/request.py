"""One validated attention call: `build_request` checks every argument once and returns a `Request`.

The bottom of the house: `functional.attention`, every backend, `weights.attention_weights`, the
explainer and the ring build or read a `Request`; this module imports only `checks` and `scores`.
A bad argument gets a `TypeError`/`ValueError` that names the actual value; backends trust the Request.

Names (the glossary): B batch, Hq query heads, Hkv key/value heads, G = Hq / Hkv query heads per
key/value head, Lq queries, Lk keys, D query/key width, Dv value width.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import MISSING, dataclass, fields, replace
from typing import Any

import torch

from . import checks, masks
from .compiling import values_readable
from .scores import FEATURES, ScoreRule, check_dense

__all__ = [
    "ALL_DTYPES",
    "MAX_SCALE",
    "MAX_SOFTCAP",
    "MIN_SOFTCAP",
    "REQUEST_DEFAULTS",
    "REQUEST_KEYWORDS",
    "Request",
    "accumulate_dtype",
    "build_request",
    "check_dense",
    "check_mask",
    "check_mask_mod",
    "check_softcap",
    "check_window",
]

ALL_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
"""The dtypes `selfattn.attention` accepts."""

MAX_SCALE = 1e6
"""Largest |scale| accepted. Scores of ordinary inputs times a larger scale overflow float32 (the
accumulation type of half inputs) to inf, and inf − inf in the softmax is NaN; a 1/√D scale, or
one divided by a temperature down to 1e-4, stays far below."""

MAX_SOFTCAP = 1e6
"""Largest softcap accepted: c·tanh(s/c) ≈ s long before this, and c·log₂e must stay finite in
float32 (`kernels.tiled` keeps its scores in base 2)."""

MIN_SOFTCAP = 1e-4
"""Smallest softcap accepted: c·tanh(s/c) lies in (−c, c), so below this every capped score is 0 to
within half precision, and scale/c (the tiled kernel's matmul multiplier) must stay finite in float32:
MAX_SCALE / MIN_SOFTCAP = 1e10 does, 1 / 1e-300 does not."""


def accumulate_dtype(dtype: torch.dtype) -> torch.dtype:
    """Softmax and its sums run in float32 for half types, else in the input dtype."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


@dataclass(frozen=True)
class Request:
    """One validated attention call.

    q     (B, Hq, Lq, D)
    k     (B, Hkv, Lk, D)
    v     (B, Hkv, Lk, Dv)
    rule  its `scores.ScoreRule`: how q·kᵀ becomes a logit and who may look — scale, softcap, the mask
          (4-D, broadcastable to (B, Hq, Lq, Lk): `build_request`, the only builder, makes it so; backends
          rely on that), the causal rule, the window and the tensor features (`scores.FEATURES`)
    dropout_p, return_weights, return_lse   as `attention` takes them

    The rule's plain fields read through the request too (r.scale, r.causal, r.mask, …); `with_rule` changes
    them (`dataclasses.replace` changes the rest).
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    rule: ScoreRule
    dropout_p: float = 0.0
    return_weights: bool = False
    return_lse: bool = False

    def with_rule(self, **changes) -> Request:
        """This request with some of its rule's fields changed (`ScoreRule.replace`)."""
        return replace(self, rule=self.rule.replace(**changes))

    @property
    def scale(self) -> float:
        return self.rule.scale

    @property
    def softcap(self) -> float | None:
        return self.rule.softcap

    @property
    def mask(self) -> torch.Tensor | None:
        return self.rule.mask

    @property
    def causal(self) -> bool:
        return self.rule.causal

    @property
    def window(self) -> int | tuple[int | None, int | None] | None:
        return self.rule.window

    @property
    def B(self) -> int:
        return self.q.shape[0]

    @property
    def Hq(self) -> int:
        return self.q.shape[1]

    @property
    def Hkv(self) -> int:
        return self.k.shape[1]

    @property
    def G(self) -> int:
        """Query heads per key/value head (1 = MHA, Hq = MQA, else GQA)."""
        return self.q.shape[1] // self.k.shape[1]

    @property
    def Lq(self) -> int:
        return self.q.shape[2]

    @property
    def Lk(self) -> int:
        return self.k.shape[2]

    @property
    def D(self) -> int:
        return self.q.shape[3]

    @property
    def Dv(self) -> int:
        return self.v.shape[3]

    @property
    def mask_kind(self) -> str | None:
        """None, "bool" or "additive" (`ScoreRule.mask_kind`, the one place it is decided)."""
        return self.rule.mask_kind

    @property
    def accumulate_dtype(self) -> torch.dtype:
        """Softmax and its sums run in float32 for half types, else in the input dtype."""
        return accumulate_dtype(self.q.dtype)

    @property
    def weights_bytes(self) -> int:
        """Bytes of the whole (B, Hq, Lq, Lk) weight matrix in the accumulation dtype."""
        return self.B * self.Hq * self.Lq * self.Lk * self.accumulate_dtype.itemsize

    @property
    def needs_grad(self) -> bool:
        return torch.is_grad_enabled() and any(t.requires_grad for t in (self.q, self.k, self.v))

    @property
    def mask_needs_grad(self) -> bool:
        return self.mask is not None and self.mask.requires_grad and torch.is_grad_enabled()

    def one_head(self, head: int) -> Request:
        """This request for query head `head` alone (Hq = Hkv = 1): its q, the k/v of its group, and its rule cut
        to that head (`ScoreRule.one_head`: a mask with a head axis, each per-head feature)."""
        if not 0 <= head < self.Hq:
            raise ValueError(f"head must be in [0, {self.Hq - 1}], got {head}")
        kv = head // self.G
        return replace(
            self,
            q=self.q[:, head : head + 1],
            k=self.k[:, kv : kv + 1],
            v=self.v[:, kv : kv + 1],
            rule=self.rule.one_head(head, self.Hq),
        )


REQUEST_DEFAULTS: dict[str, Any] = {
    **{f.name: None if f.default is MISSING else f.default for f in fields(ScoreRule)},  # scale None: 1/√D
    **{f.name: f.default for f in fields(Request) if f.default is not MISSING},  # dropout_p, return_*
}
"""What `build_request` takes for a keyword left out: the score rule's field defaults and the call's own."""

REQUEST_KEYWORDS = tuple(REQUEST_DEFAULTS)
"""The keywords `build_request` takes: the score rule's fields and the call's own three (`attention`'s
signature, less `backend`, is written from nothing else: a test holds them equal, defaults included)."""


def build_request(
    q,
    k,
    v,
    **options,
) -> Request:
    """Check every argument of `attention` and normalise it into a `Request`.

    options   `attention`'s keywords but `backend` (`REQUEST_KEYWORDS`), each defaulting to `REQUEST_DEFAULTS`;
              the tensor score features are checked by their own entries (`scores.FEATURES`)

    Normalised: scale resolved (default 1/√D); a window wider than Lk clamped to Lk (the same
    rule: every key is within reach), a two-sided window (left, 0) written as the int left + 1 and
    (None, None) as None; the mask viewed as 4-D (leading dims of size 1); a feature that folds into the
    mask (`Feature.folds`) joined to it.
    """
    unknown = [name for name in options if name not in REQUEST_DEFAULTS]
    if unknown:
        known = ", ".join(REQUEST_KEYWORDS)
        raise TypeError(f"unexpected keyword argument {unknown[0]!r}: a request takes {known}")
    given = REQUEST_DEFAULTS | options
    causal, mask, window, scale, softcap = (given[name] for name in ("causal", "mask", "window", "scale", "softcap"))
    dropout_p, return_weights, return_lse = (given[name] for name in ("dropout_p", "return_weights", "return_lse"))
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_dense(name, t)
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, L, D), got shape {tuple(t.shape)}")
        if t.dtype not in ALL_DTYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; supported: float16, bfloat16, float32, float64")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    (B, Hq, Lq, D), (Bk, Hkv, Lk, Dk), (Bv, Hv, Lv, Dv) = q.shape, k.shape, v.shape
    if not (B == Bk == Bv):
        raise ValueError(f"batch sizes differ: q has B={B}, k has B={Bk}, v has B={Bv}")
    if Dk != D:
        raise ValueError(f"k has D={Dk} but q has D={D}")
    if Hv != Hkv:
        raise ValueError(f"v has {Hv} heads but k has {Hkv}")
    if Lv != Lk:
        raise ValueError(f"v has Lk={Lv} positions but k has Lk={Lk}")
    if Hq == 0 or Hkv == 0:
        raise ValueError(f"q and k need at least one head each, got Hq={Hq}, Hkv={Hkv}")
    if Hq % Hkv != 0:
        raise ValueError(f"q has Hq={Hq} heads, not a multiple of k's Hkv={Hkv}")
    if D == 0:
        raise ValueError("head dim D must be >= 1, got 0")
    if Dv == 0:
        raise ValueError("value head dim Dv must be >= 1, got 0")
    causal = checks.boolean("causal", causal)
    return_weights = checks.boolean("return_weights", return_weights)
    return_lse = checks.boolean("return_lse", return_lse)
    window = check_window(window, Lq, Lk)
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    else:
        scale = checks.real("scale", scale, low=-MAX_SCALE, high=MAX_SCALE)
    softcap = check_softcap(softcap)
    dropout_p = checks.real("dropout_p", dropout_p, low=0, high=1, high_open=True)
    if mask is not None:
        mask = check_mask(mask, (B, Hq, Lq, Lk), q.device)
    given["mask_mod"], given["block_mask"] = check_mask_mod(
        given["mask_mod"], given["block_mask"], (B, Hq, Lq, Lk), q.device
    )
    checked: dict[str, Any] = {"mask_mod": given["mask_mod"]}
    for name, feature in FEATURES.items():
        value = given[name]
        if value is not None:
            value, mask = feature.check(value, mask, (B, Hq, Lq, Lk), q.device, accumulate_dtype(q.dtype))
            if value is not None:
                checked[name] = value
    rule = ScoreRule(scale=scale, softcap=softcap, mask=mask, causal=causal, window=window, **checked)
    return Request(q, k, v, rule, dropout_p, return_weights, return_lse)


def check_mask_mod(mask_mod, block_mask, shape: tuple[int, int, int, int], device: torch.device):
    """(mask_mod, block_mask), each given or made from the other: a mask_mod alone is evaluated once per shape
    (`masks.cached_block_mask`), a block_mask alone brings its mask_mod; both must be one (the block mask made
    from that mask_mod). The block mask's shape is checked with the features (`scores.check_block_mask`)."""
    if mask_mod is not None and not callable(mask_mod):
        raise TypeError(f"mask_mod must be callable as mask_mod(b, h, q_idx, kv_idx), got {type(mask_mod).__name__}")
    if block_mask is not None and not isinstance(block_mask, masks.BlockMask):
        raise TypeError(
            f"block_mask must be a selfattn.masks.BlockMask (selfattn.masks.block_mask(mask_mod, B, H, Lq, Lk)), "
            f"got {type(block_mask).__name__}"
        )
    if mask_mod is None:
        return (None, None) if block_mask is None else (block_mask.mask_mod, block_mask)
    if block_mask is None:
        B, Hq, Lq, Lk = shape
        return mask_mod, masks.cached_block_mask(mask_mod, B, Hq, Lq, Lk, device)
    if block_mask.mask_mod is not mask_mod:
        raise ValueError(
            f"block_mask was made from mask_mod {block_mask.mask_mod!r}, not the mask_mod given ({mask_mod!r}): "
            f"pass one of them"
        )
    return mask_mod, block_mask


def check_softcap(softcap) -> float | None:
    """None or 0 (FlashAttention's "off"): no cap; else a real in [MIN_SOFTCAP, MAX_SOFTCAP]."""
    if softcap is None:
        return None
    softcap = checks.real("softcap", softcap, high=MAX_SOFTCAP)
    if softcap == 0:
        return None
    if softcap < MIN_SOFTCAP:
        raise ValueError(f"softcap must be >= {MIN_SOFTCAP:g} (or 0: no cap), got {softcap:g}")
    return softcap


def _window_side(side: str, x) -> int | None:
    """One side of a two-sided window: None or −1 (FlashAttention's "unbounded") → None, else an int >= 0."""
    if isinstance(x, numbers.Integral) and not isinstance(x, bool) and x == -1:
        return None
    if isinstance(x, numbers.Integral) and not isinstance(x, bool) and x < -1:
        raise ValueError(f"window {side} must be >= 0, or -1 or None (unbounded), got {x}")
    return checks.optional_integer(f"window {side}", x, low=0)


def check_window(window, Lq: int, Lk: int):
    """None, an int w >= 1 (clamped to Lk), or (left, right) with each None / −1 (unbounded, FlashAttention's
    window_size) or an int >= 0 (clamped to Lq + Lk: every key within reach); (left, 0) becomes the int
    left + 1, (None, None) None."""
    if window is None:
        return None
    if isinstance(window, (tuple, list)):
        if len(window) != 2:
            raise ValueError(f"window as a pair must be (left, right), got {tuple(window)!r}")
        left, right = (_window_side(side, x) for side, x in zip(("left", "right"), window, strict=True))
        reach = Lq + Lk
        left = None if left is None else min(left, reach)
        right = None if right is None else min(right, reach)
        if left is None and right is None:
            return None
        if right == 0 and left is not None:
            return min(left + 1, max(Lk, 1))
        return (left, right)
    return min(checks.integer("window", window, low=1), max(Lk, 1))


def check_mask(mask, full_shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """`mask` checked against (B, Hq, Lq, Lk) = full_shape, as a 4-D view (leading dims of size 1).

    bool (True = may look) or additive float; broadcastable to full_shape; on `device`; an
    additive mask may hold −inf but neither NaN nor +inf.
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor (bool, or additive float), got {type(mask).__name__}")
    check_dense("mask", mask)
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise TypeError(f"mask must be bool (True = may look) or an additive float, got dtype {mask.dtype}")
    if mask.device != device:
        raise ValueError(f"mask is on {mask.device} but q is on {device}")
    if mask.dim() > 4:
        raise ValueError(
            f"mask has shape {tuple(mask.shape)}, more than 4 dims: cannot broadcast to (B, Hq, Lq, Lk) = {full_shape}"
        )
    try:
        broadcast = torch.broadcast_shapes(mask.shape, full_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != torch.Size(full_shape):
        raise ValueError(
            f"mask has shape {tuple(mask.shape)}, which does not broadcast to (B, Hq, Lq, Lk) = {full_shape}"
        )
    if mask.dtype.is_floating_point and values_readable(mask):  # not read when compiled or vmapped
        if bool(torch.isnan(mask).any()):
            raise ValueError("additive mask contains NaN; use -inf (or a bool mask) for hidden positions")
        if bool(torch.isposinf(mask).any()):
            raise ValueError(
                "additive mask contains +inf, which would make a softmax row NaN; use finite "
                "values, and -inf (or a bool mask) for hidden positions"
            )
    return mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
