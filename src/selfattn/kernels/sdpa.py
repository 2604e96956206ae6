"""Backend "sdpa": PyTorch's `scaled_dot_product_attention`, wherever the request fits it.

SDPA aligns `is_causal` top-left, so `is_causal=True` is used only when Lq == Lk (where
both alignments agree); every other causal or windowed request gets an explicit
bottom-right visibility mask (`dense_mask`), within the memory budget (`selfattn.kernels.budget`):
a window of 128 over 65536 positions would need a 20 GiB dense mask, and is refused with that
reason. PyTorch's fused causal CPU kernel returns NaN for a scale <= 0 (torch 2.13), so such
requests get the explicit mask too (`fused_causal`). SDPA returns neither weights nor the
log-sum-exp and has no softcap: such requests are refused with the reason.

SDPA adds its mask to the scores, and NaN + (−inf) is NaN: one non-finite key hidden by the mask
would make every row NaN. A masked request whose keys are not all finite is refused with that
reason, and "auto" gives it to a kernel that fills hidden scores with −inf (tiled, or naive for
dropout or a mask that needs a gradient), so that only the rows that see such a key are NaN, as in
the reference — a dispatch rule that `selfattn.kernels.explain` shows. The check is a sum over k
(`all_finite`, no copy of k), made only when a dense mask is sent. An additive mask is added in q's
dtype, so one whose finite entries lie beyond that dtype's range (7e4 in a float32 mask for float16
q) is refused too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..limits import CACHED_KV_BYTES
from ..scores import additive_in, values_readable
from .base import Backend, Capabilities, Cost, Request, Result, Work, all_finite, budget_bytes, size_text
from .cost import visible_pairs

__all__ = ["SdpaBackend", "fused_causal", "dense_mask", "dense_mask_bytes"]

RATE_GFLOPS = 60.0
"""Full and square-causal forward, L = 4096: 571 ms / 301 ms, 1 thread (`kernels.cost`)."""


CACHED_READ_GBPS = 48.0
"""The rate of those repeats from the cache, in the cost model's units (its read_gbps of 14 is DRAM's): one step of
8 query heads on one kv head took SDPA 101 µs more per MiB of K and V at Lk = 2048–4096 (1–2 MiB), 79 GB/s a
repeat, against its 23 GB/s from DRAM at Lk = 16384 without GQA, which the model calls 14 (2 threads, this
AVX512 EPYC, scripts/measure_auto.py). Counting the repeats as free made auto take SDPA for such a step where the
native kernel's stacked few-row loops took 0.67–0.76× its time."""

RATE_MASKED_GFLOPS = 52.0
"""With a dense attn_mask (window w=256, L=4096): 668 ms for all L² pairs."""


def _work(r: Request) -> Work:
    """Causal with Lq = Lk and no mask: the visible half (PyTorch's flash kernel skips blocks);
    a window, Lq ≠ Lk or a mask: all Lq·Lk pairs, through a dense mask."""
    if fused_causal(r):
        return visible_pairs(r.Lq, r.Lk, causal=True), RATE_GFLOPS, 0.0
    masked = r.causal or r.window is not None or r.mask is not None
    return r.Lq * r.Lk, RATE_MASKED_GFLOPS if masked else RATE_GFLOPS, 0.0


class SdpaBackend(Backend):
    name = "sdpa"
    capabilities = Capabilities(
        returns_weights=False,
        returns_lse=False,
        softcap=False,
        dropout=True,
        features=frozenset({"segments", "block_mask"}),
        notes={
            "weights": "use backend='naive', or selfattn.attention_weights for chosen rows",
            "lse": "use backend='naive' or 'tiled'",
            "softcap": "use backend='naive' or 'tiled'",
            "sinks": "SDPA's softmax has no extra term in its denominator; use backend='native', 'tiled' or 'naive'",
            "alibi": "SDPA would add the slopes as a dense mask in q's dtype, not exactly; use backend='native', "
            "'tiled' or 'naive'",
            "score_mod": "SDPA takes no function of the score; use backend='tiled' or 'naive' (or 'flex')",
        },
    )
    cost = Cost(
        work=_work,
        read_gbps=14.0,
        call_seconds=40e-6,
        backward_factor=3.7,
        busy_factor=1.1,
        reads_per_query_head=True,
        cached_kv_bytes=CACHED_KV_BYTES,
        cached_read_gbps=CACHED_READ_GBPS,
        dtype_speed={torch.bfloat16: 0.97, torch.float64: 0.34},
        backward_dtype_speed={torch.bfloat16: 0.18, torch.float64: 0.31},
        hardware_dtype_speed={torch.bfloat16: 3.9, (torch.bfloat16, "AVX512-BF16"): 1.45},
        hardware_backward_dtype_speed={torch.bfloat16: 2.1, (torch.bfloat16, "AVX512-BF16"): 1.58},
    )
    """One parallel region per call, its work split evenly between the threads: with one busy process beside it,
it waits for the preempted one, and its time over native's grows by about a tenth (median over the bench's
cases, idle against `--load 1`: 1.07; decoding 1.05–1.8), so busy_factor 1.1 against native's 1.0.
    Its CPU kernel reads K and V once per query head (a GQA group of G heads reads them G times)."""

    def not_supported_reasons(self, r: Request) -> list[str]:
        """Capabilities' reasons, and those of its dense mask: over the budget, non-finite keys it would
        spread, additive entries beyond q's dtype."""
        reasons = super().not_supported_reasons(r)
        if fused_causal(r) or (r.mask is None and not _position_mask(r)):
            return reasons
        nbytes, limit = dense_mask_bytes(r), budget_bytes()
        if nbytes > limit:
            reasons.append(
                f"its dense {r.Lq}×{r.Lk} mask for this request would take {size_text(nbytes)}, over the budget of "
                f"{size_text(limit)} (selfattn.kernels.budget); use backend='tiled', 'native' or 'flex', which "
                f"skip hidden blocks"
            )
        if r.k.device.type == "meta":  # a shape without data (explain): nothing more to look at
            return reasons
        if not values_readable(r.k, r.mask):  # compiling, exporting or under torch.func: values not looked at
            return reasons
        mask = r.mask
        if mask is not None and r.mask_kind == "additive" and torch.finfo(mask.dtype).max > torch.finfo(r.q.dtype).max:
            extent, top = r.rule.mask_extent, torch.finfo(r.q.dtype).max
            if extent > top:
                reasons.append(
                    f"its additive mask holds {extent:.3g}, beyond {r.q.dtype}'s range (±{top:.3g}), and SDPA adds "
                    f"the mask in q's dtype; use backend='naive' or 'tiled' (they add it in {r.accumulate_dtype})"
                )
        if not all_finite(r.k):
            reasons.append(
                "k holds NaN or ±inf and SDPA adds its mask to the scores (NaN + −inf = NaN would reach every "
                "row); use backend='tiled' or 'naive', which hide masked keys with −inf"
            )
        return reasons

    def form_decides(self, r: Request) -> bool:
        """Whether its reasons read no tensor values for `r` (`Backend.form_decides`): they do (the mask's range,
        NaN keys) only where it would add a mask, user-given or of positions."""
        return fused_causal(r) or (r.mask is None and not _position_mask(r))

    def forward(self, r: Request) -> Result:
        is_causal = fused_causal(r)
        out = F.scaled_dot_product_attention(
            r.q,
            r.k,
            r.v,
            attn_mask=None if is_causal else dense_mask(r),
            dropout_p=r.dropout_p,
            is_causal=is_causal,
            scale=r.scale,
            enable_gqa=r.G > 1,
        )
        return Result(out, None, None)


def fused_causal(r: Request) -> bool:
    """Whether SDPA's own causal kernel serves `r` (no dense mask): causal only, Lq == Lk (where
    its top-left alignment agrees with ours), and a positive scale (its CPU kernel returns NaN
    for scale <= 0)."""
    return (
        r.causal
        and r.window is None
        and r.rule.segments is None
        and r.rule.block_mask is None
        and r.mask is None
        and r.Lq == r.Lk
        and r.scale > 0
    )


def _position_mask(r: Request) -> bool:
    """Whether the causal/window rule, the segments or a mask_mod's block mask need a drawn (Lq, Lk) mask (one
    decoding step sees the whole cache)."""
    rule = r.rule
    return r.window is not None or rule.segments is not None or rule.block_mask is not None or (r.causal and r.Lq > 1)


def dense_mask_bytes(r: Request) -> int:
    """Bytes `dense_mask` and SDPA's own copy of it take for `r` (0 when no mask is built): the drawn
    visibility (bool) and the mask SDPA adds (q's dtype), each of the broadcast shape of the user's mask
    and (Lq, Lk); a user's mask passed as it is costs SDPA's float copy of a bool mask only."""
    drawn = _position_mask(r)
    if r.mask is None and not drawn:
        return 0
    shape = r.mask.shape if r.mask is not None else (1, 1, 1, 1)
    numel = 1
    bm = r.rule.block_mask
    Bm, Hm = (1, 1) if bm is None else bm.kinds.shape[:2]
    drawn_shape = (r.B if r.rule.segments is not None else Bm, Hm, r.Lq, r.Lk)
    for size in torch.broadcast_shapes(shape, drawn_shape if drawn else shape):
        numel *= size
    item = r.q.element_size()
    if drawn:
        return numel * (1 + item)
    assert r.mask is not None  # neither drawn nor absent: the early return above keeps a mask
    return numel * item if r.mask_kind == "bool" or r.mask.dtype != r.q.dtype else 0


def dense_mask(r: Request) -> torch.Tensor | None:
    """The request's visibility as one SDPA `attn_mask`: bool (True = may look), or additive float
    in the input dtype when the user's mask is additive. Broadcasts to (B, Hq, Lq, Lk)."""
    visible = None
    if _position_mask(r):
        visible = r.rule.visible(None, None, r.Lq, r.Lk, device=r.q.device)
        if r.rule.segments is not None:  # (B, 1, Lq, Lk): the dense document mask
            visible = visible & ~r.rule.segment_hidden()
        if r.rule.block_mask is not None:  # (Bm, Hm, Lq, Lk): the mask_mod, read from its block mask
            visible = visible & r.rule.block_mask.dense()
    if r.mask is None:
        return visible
    if r.mask.dtype == torch.bool:
        return r.mask if visible is None else visible & r.mask
    additive = additive_in(r.mask, r.q.dtype)
    if visible is None:
        return additive
    return additive.masked_fill(~visible, float("-inf"))
