"""Backend "sdpa": PyTorch's `scaled_dot_product_attention`, wherever the request fits it.

SDPA aligns `is_causal` top-left, so `is_causal=True` is used only when Lq == Lk (where
both alignments agree); every other causal or windowed request gets an explicit
bottom-right visibility mask. SDPA returns neither weights nor the log-sum-exp and has
no softcap: such requests are refused with the reason.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import masks
from .base import Request, Result


class SdpaBackend:
    name = "sdpa"

    def refuse(self, request: Request) -> str | None:
        if request.need_weights:
            return ("PyTorch SDPA never returns attention weights; use backend='naive', or "
                    "selfattn.attention_weights for chosen rows")
        if request.need_lse:
            return "PyTorch SDPA does not return the log-sum-exp; use backend='naive' or 'tiled'"
        if request.softcap is not None:
            return "PyTorch SDPA has no softcap; use backend='naive' or 'tiled'"
        return None

    def forward(self, r: Request) -> Result:
        is_causal = r.causal and r.window is None and r.mask is None and r.len_q == r.len_k
        attn_mask = None if is_causal else dense_mask(r)
        out = F.scaled_dot_product_attention(
            r.q, r.k, r.v, attn_mask=attn_mask, dropout_p=r.dropout_p, is_causal=is_causal,
            scale=r.scale, enable_gqa=r.groups > 1,
        )
        return Result(out, None, None)


def dense_mask(r: Request) -> torch.Tensor | None:
    """The request's visibility as one SDPA `attn_mask`: bool (True = may look), or additive
    float in the input dtype when the user's mask is additive. Broadcasts to (B, Hq, Lq, Lk)."""
    visible = None
    if r.causal or r.window is not None:
        visible = masks.visibility(r.len_q, r.len_k, causal=r.causal, window=r.window, device=r.q.device)
    if r.mask is None:
        return visible
    if r.mask.dtype == torch.bool:
        return r.mask if visible is None else visible & r.mask
    additive = r.mask.to(r.q.dtype)
    if visible is None:
        return additive
    return additive.masked_fill(~visible, float("-inf"))
