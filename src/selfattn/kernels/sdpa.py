"""Backend "sdpa": PyTorch's `scaled_dot_product_attention`, wherever the request fits it.

SDPA aligns `is_causal` top-left, so `is_causal=True` is used only when Lq == Lk (where
both alignments agree); every other causal or windowed request gets an explicit
bottom-right visibility mask. PyTorch's fused causal CPU kernel returns NaN for a scale <= 0
(torch 2.13), so such requests get the explicit mask too (`fused_causal`). SDPA returns
neither weights nor the log-sum-exp and has no softcap: such requests are refused with the reason.

SDPA adds its mask to the scores, and NaN + (−inf) is NaN: one non-finite key hidden by the mask
would make every row NaN. A masked request whose keys are not all finite is therefore computed by
a kernel that fills hidden scores with −inf (`_exact_kernel`: tiled, or naive for dropout or a mask
that needs a gradient), so that only the rows that see such a key are NaN, as in the reference.
The check is a sum over k (`all_finite`, no copy of k), made only when a mask is sent.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import masks
from .base import Backend, Capabilities, Request, Result, all_finite

EXACT_KERNELS = ("tiled", "naive")
"""The kernels that hide masked scores with −inf, in order of preference (see `_exact_kernel`)."""


class SdpaBackend(Backend):
    name = "sdpa"
    capabilities = Capabilities(
        returns_weights=False,
        returns_lse=False,
        softcap=False,
        dropout=True,
        notes={
            "weights": "use backend='naive', or selfattn.attention_weights for chosen rows",
            "lse": "use backend='naive' or 'tiled'",
            "softcap": "use backend='naive' or 'tiled'",
        },
    )

    def forward(self, r: Request) -> Result:
        is_causal = fused_causal(r)
        attn_mask = None if is_causal else dense_mask(r)
        if attn_mask is not None and not all_finite(r.k):
            return _exact_kernel(r).forward(r)
        out = F.scaled_dot_product_attention(
            r.q,
            r.k,
            r.v,
            attn_mask=attn_mask,
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
    return r.causal and r.window is None and r.mask is None and r.Lq == r.Lk and r.scale > 0


def dense_mask(r: Request) -> torch.Tensor | None:
    """The request's visibility as one SDPA `attn_mask`: bool (True = may look), or additive
    float in the input dtype when the user's mask is additive. Broadcasts to (B, Hq, Lq, Lk)."""
    visible = None
    if r.window is not None or (r.causal and r.Lq > 1):  # one decoding step sees the whole cache: no mask
        visible = masks.visibility(r.Lq, r.Lk, causal=r.causal, window=r.window, device=r.q.device)
    if r.mask is None:
        return visible
    if r.mask.dtype == torch.bool:
        return r.mask if visible is None else visible & r.mask
    additive = r.mask.to(r.q.dtype)
    if visible is None:
        return additive
    return additive.masked_fill(~visible, float("-inf"))


def _exact_kernel(r: Request) -> Backend:
    """The kernel that serves a masked request with non-finite keys: the first of tiled (O(N) memory)
    and naive (dropout, a mask gradient; within its weight budget) that can serve it."""
    from .dispatch import BACKENDS  # dispatch imports this module

    reasons = {name: BACKENDS[name].not_supported_reasons(r) for name in EXACT_KERNELS}
    for name, why in reasons.items():
        if not why:
            return BACKENDS[name]
    raise ValueError(
        "backend 'sdpa' cannot serve a masked request whose keys hold NaN or ±inf (its mask would spread "
        "the NaN to every row), and neither kernel that hides masked keys can serve it: "
        + "; ".join(f"{name}: {', '.join(why)}" for name, why in reasons.items())
    )
