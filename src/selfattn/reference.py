"""The tutorial's self-attention, step by step, in NumPy float64: the spec.

Every other path in this package (the PyTorch backends, the tiled kernel, the
modules, the explainer) is tested against the functions here. They are written
to be read next to the tutorial "Self-Attention 是什么":

    X  ->  Q = X W_Q,  K = X W_K,  V = X W_V          (project)
       ->  scores = Q Kᵀ                               (match every query with every key)
       ->  scaled = scores / √d_k                       (keep the range stable)
       ->  masked = scaled where visible, else −inf     (causal mask: no peeking at the future)
       ->  weights = softmax(masked)                    (rows become probabilities)
       ->  output = weights · V                         (read the values)

Shapes use fixed letters: L = sequence length, D = model width (d_model),
d_k = query/key width, d_v = value width.

This module imports nothing but NumPy (and the pure-Python `selfattn.checks`), so `selfattn
walkthrough` starts fast. It is independent of the PyTorch paths on purpose: its `visibility`
is its own NumPy copy of the rule in `selfattn.masks`, so that the fast paths are tested against
an implementation that shares no code with them.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from . import checks

__all__ = [
    "Trace",
    "softmax",
    "causal_mask",
    "project",
    "scores",
    "scale_scores",
    "apply_mask",
    "weighted_sum",
    "self_attention",
    "visibility",
    "attention",
]


@dataclass(frozen=True)
class Trace:
    """Every intermediate of one self-attention pass (float64).

    x        (Lq, D)      the input rows
    q        (Lq, d_k)    queries  X W_Q
    k        (Lk, d_k)    keys     X W_K
    v        (Lk, d_v)    values   X W_V
    scores   (Lq, Lk)     Q Kᵀ
    scaled   (Lq, Lk)     scores / √d_k
    mask     (Lq, Lk)     bool, True = may look (the tutorial's 1)
    masked   (Lq, Lk)     scaled, with −inf where mask is False
    weights  (Lq, Lk)     softmax(masked) by row; rows that may look at nothing are 0
    output   (Lq, d_v)    weights · V
    """

    x: np.ndarray
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scores: np.ndarray
    scaled: np.ndarray
    mask: np.ndarray
    masked: np.ndarray
    weights: np.ndarray
    output: np.ndarray

    @property
    def d_k(self) -> int:
        return int(self.q.shape[-1])


def softmax(x, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax in float64.

    The row maximum is subtracted before exp, so scores of magnitude 1e4 give finite
    results. −inf entries get weight exactly 0. A row that is −inf everywhere (a query
    that may look at nothing) gets all-zero weights, never NaN; a row holding a NaN score is NaN.

        softmax([2.0, 0.0, 0.0])     ≈ [0.787, 0.107, 0.107]
        softmax([2.0, -inf, -inf])   =  [1.0,   0.0,   0.0]
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 0:
        raise ValueError("softmax needs at least one axis, got a scalar")
    peak = np.max(x, axis=axis, keepdims=True, initial=-np.inf)  # initial: an empty row (Lk = 0) too
    peak = np.where(np.isfinite(peak), peak, 0.0)  # all −inf row: subtract nothing
    e = np.exp(x - peak)
    total = np.sum(e, axis=axis, keepdims=True)
    weights = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return np.where(np.isnan(total), np.nan, weights)  # a NaN score stays NaN: never hidden as weight 0


def causal_mask(n_q: int, n_k: int | None = None) -> np.ndarray:
    """Causal visibility, bool (n_q, n_k), True = may look (the tutorial's 1).

    Alignment is bottom-right: query i may look at keys j <= i + n_k - n_q, so the
    last query sees every key. With n_q == n_k this is the tutorial's table:

        1 0 0 0 0
        1 1 0 0 0
        1 1 1 0 0
        1 1 1 1 0
        1 1 1 1 1

    and with n_q = 1 (one decoding step with a cache of n_k keys) it is all ones.
    """
    n_q = checks.integer("n_q", n_q, low=0)
    n_k = n_q if n_k is None else checks.integer("n_k", n_k, low=0)
    i = np.arange(n_q)[:, None]
    j = np.arange(n_k)[None, :]
    return j <= i + (n_k - n_q)


def project(x, w_q, w_k, w_v) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q = X W_Q, K = X W_K, V = X W_V.

    x    (L, D)
    w_q  (D, d_k)
    w_k  (D, d_k)
    w_v  (D, d_v)
    """
    x, w_q, w_k, w_v = (_matrix(name, a) for name, a in (("x", x), ("w_q", w_q), ("w_k", w_k), ("w_v", w_v)))
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v)):
        if w.shape[0] != x.shape[1]:
            raise ValueError(f"{name} has {w.shape[0]} rows but x has D={x.shape[1]} columns")
    if w_q.shape[1] != w_k.shape[1]:
        raise ValueError(f"w_q gives d_k={w_q.shape[1]} but w_k gives d_k={w_k.shape[1]}")
    return x @ w_q, x @ w_k, x @ w_v


def scores(q, k) -> np.ndarray:
    """score_ij = Q_i · K_j, the whole (Lq, Lk) matrix Q Kᵀ.

    q (Lq, d_k), k (Lk, d_k)
    """
    q, k = _matrix("q", q), _matrix("k", k)
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"k has d_k={k.shape[1]} but q has d_k={q.shape[1]}")
    return q @ k.T


def scale_scores(s, d_k: int) -> np.ndarray:
    """scores / √d_k."""
    d_k = checks.integer("d_k", d_k, low=1)
    return np.asarray(s, dtype=np.float64) / np.sqrt(d_k)


def apply_mask(s, mask) -> np.ndarray:
    """Set the positions that may not be looked at to −inf (not 0: see `softmax`).

    s     (Lq, Lk) float
    mask  (Lq, Lk) bool, True = may look
    """
    s = np.asarray(s, dtype=np.float64)
    mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise TypeError(f"mask must be bool (True = may look), got dtype {mask.dtype}")
    if mask.shape != s.shape:
        raise ValueError(f"mask has shape {mask.shape} but scores have shape {s.shape}")
    return np.where(mask, s, -np.inf)


def weighted_sum(weights, v) -> np.ndarray:
    """output = weights · V.

    weights (Lq, Lk), v (Lk, d_v) -> (Lq, d_v)
    """
    weights, v = _matrix("weights", weights), _matrix("v", v)
    if weights.shape[1] != v.shape[0]:
        raise ValueError(f"weights have Lk={weights.shape[1]} columns but v has {v.shape[0]} rows")
    return weights @ v


def self_attention(x, w_q, w_k, w_v, *, causal: bool = True, mask=None) -> Trace:
    """One head of self-attention, every step kept.

    x     (L, D)       input rows (10×128 in the tutorial)
    w_q   (D, d_k)
    w_k   (D, d_k)
    w_v   (D, d_v)
    causal             decoder-only: row i sees rows 0..i
    mask  (L, L) bool  extra visibility, True = may look; combined with causal by AND

    Returns a `Trace`; `trace.output` is (L, d_v), the same shape as x when d_v = D.
    """
    causal = checks.boolean("causal", causal)
    q, k, v = project(x, w_q, w_k, w_v)
    s = scores(q, k)
    scaled = scale_scores(s, q.shape[1])
    visible = causal_mask(*s.shape) if causal else np.ones(s.shape, dtype=bool)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(f"mask must be bool (True = may look), got dtype {mask.dtype}")
        if mask.shape != s.shape:
            raise ValueError(f"mask has shape {mask.shape} but scores have shape {s.shape}")
        visible = visible & mask
    masked = apply_mask(scaled, visible)
    weights = softmax(masked, axis=-1)
    output = weighted_sum(weights, v)
    return Trace(
        x=np.asarray(x, dtype=np.float64),
        q=q,
        k=k,
        v=v,
        scores=s,
        scaled=scaled,
        mask=visible,
        masked=masked,
        weights=weights,
        output=output,
    )


def visibility(n_q: int, n_k: int, *, causal: bool = False, window=None) -> np.ndarray:
    """The visibility rule of `selfattn.attention`, bool (n_q, n_k), True = may look.

    Query i stands at position p = i + n_k - n_q (bottom-right alignment).
    causal:   key j visible only if j <= p.
    window w: key j visible only if p - w < j <= p (the last w positions, itself included).
    window (left, right): key j visible only if p - left <= j <= p + right (None or −1: that side unbounded),
              causal or not (FlashAttention's window_size).
    """
    visible = np.ones((n_q, n_k), dtype=bool)
    if causal:
        visible &= causal_mask(n_q, n_k)
    if window is None:
        return visible
    p = np.arange(n_q)[:, None] + (n_k - n_q)
    j = np.arange(n_k)[None, :]
    if isinstance(window, (tuple, list)):
        left, right = (None if _unbounded(x) else checks.optional_integer("window side", x, low=0) for x in window)
        if left is not None:
            visible &= j >= p - left
        if right is not None:
            visible &= j <= p + right
        return visible
    window = checks.integer("window", window, low=1)
    return visible & (j <= p) & (j > p - window)


def attention(
    q, k, v, *, causal=False, mask=None, window=None, scale=None, softcap=None, sinks=None, alibi=None, segments=None
):
    """The float64 spec of `selfattn.attention` (no dropout), batched and multi-head.

    q     (B, Hq, Lq, D)
    k     (B, Hkv, Lk, D)     Hq % Hkv == 0: query head h reads key/value head h // (Hq // Hkv)
    v     (B, Hkv, Lk, Dv)
    mask  bool (True = may look) or additive float, broadcastable to (B, Hq, Lq, Lk); an additive
          −inf hides the key exactly as a bool False does (whatever its score, NaN included)
    scale default 1/√D; softcap c turns a scaled score s into c·tanh(s/c) before masking (0: no cap)
    alibi     (Hq,) slopes: s_ij −= slope_h · |p − j| after the softcap
    segments  (B, L) ids, Lq = Lk: query i sees key j only if segments[b, i] == segments[b, j]
    sinks     (Hq,) logits that join every row's denominator: w_ij = exp(s_ij) / (Σ_j exp(s_ij) + exp(sink_h))

    Returns (output (B, Hq, Lq, Dv), weights (B, Hq, Lq, Lk), lse (B, Hq, Lq)); with sinks the weights of a
    row sum to less than 1 and lse = log(Σ_j exp(s_ij) + exp(sink_h)).
    A query row that may look at nothing gets output 0, weights 0 and lse −inf (log exp(sink) with a sink).
    """
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    groups = q.shape[1] // k.shape[1]
    k = np.repeat(k, groups, axis=1)
    v = np.repeat(v, groups, axis=1)
    n_q, n_k = q.shape[2], k.shape[2]
    multiplier = 1.0 / np.sqrt(q.shape[-1]) if scale is None else checks.real("scale", scale)
    s = np.einsum("bhid,bhjd->bhij", q, k) * multiplier
    if softcap is not None and checks.real("softcap", softcap, low=0.0) > 0:  # 0: no cap, as FlashAttention's
        softcap = float(softcap)
        s = softcap * np.tanh(s / softcap)
    if alibi is not None:
        distance = np.abs(np.arange(n_q)[:, None] + (n_k - n_q) - np.arange(n_k)[None, :])
        s = s - np.asarray(alibi, dtype=np.float64)[:, None, None] * distance
    visible = np.broadcast_to(visibility(n_q, n_k, causal=causal, window=window), s.shape)
    if segments is not None:
        ids = np.asarray(segments)
        visible = visible & (ids[:, None, :, None] == ids[:, None, None, :])
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype == np.bool_:
            visible = visible & mask
        else:
            mask = mask.astype(np.float64)
            visible = visible & (mask != -np.inf)  # −inf hides the key, as a bool False does
            s = s + mask
    s = np.where(visible, s, -np.inf)
    if sinks is not None:  # the sink as one more key whose value is 0
        sink = np.broadcast_to(np.asarray(sinks, dtype=np.float64)[None, :, None, None], s.shape[:3] + (1,))
        s = np.concatenate([s, sink], axis=-1)
        v = np.concatenate([v, np.zeros(v.shape[:2] + (1,) + v.shape[3:])], axis=2)
    weights = softmax(s, axis=-1)
    peak = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
    finite_peak = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(divide="ignore"):
        lse = (np.log(np.sum(np.exp(s - finite_peak), axis=-1, keepdims=True)) + finite_peak)[..., 0]
    output = np.einsum("bhij,bhjd->bhid", weights, v)
    return output, weights[..., :n_k], lse


def _unbounded(x) -> bool:
    """−1 as a window side: unbounded (FlashAttention's window_size=(-1, -1))."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool) and x == -1


def _matrix(name: str, a) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype == np.bool_ or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{name} must be a real numeric array, got dtype {a.dtype}")
    if a.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {a.shape}")
    return a.astype(np.float64, copy=False)
