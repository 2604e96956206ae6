"""Backend "naive": the whole (Lq, Lk) weight matrix, materialised — the one you can look at.

It follows the tutorial line by line in PyTorch (in float32 for half inputs) and is
the only backend that returns the attention weights of every query row. Its memory
grows with B·Hq·Lq·Lk, so it refuses requests whose weights would exceed
`WEIGHTS_BUDGET_BYTES` and names a backend that can serve them instead.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import masks
from .base import Request, Result

WEIGHTS_BUDGET_BYTES = 1 << 30
"""Largest weight matrix (B·Hq·Lq·Lk elements × bytes) the naive backend agrees to build: 1 GiB."""


class NaiveBackend:
    name = "naive"

    def refuse(self, request: Request) -> str | None:
        size = request.batch * request.q_heads * request.len_q * request.len_k
        nbytes = size * torch.empty((), dtype=request.accumulate_dtype).element_size()
        if nbytes > WEIGHTS_BUDGET_BYTES:
            return (f"it would materialise {request.batch}×{request.q_heads}×{request.len_q}×{request.len_k} "
                    f"weights = {nbytes / 2**30:.2f} GiB, over its budget of {WEIGHTS_BUDGET_BYTES / 2**30:.0f} GiB "
                    f"(selfattn.kernels.naive.WEIGHTS_BUDGET_BYTES); use backend='sdpa' or 'tiled', which never "
                    f"build the full matrix")
        return None

    def forward(self, r: Request) -> Result:
        acc = r.accumulate_dtype
        B, Hq, Lq, Lk, G = r.batch, r.q_heads, r.len_q, r.len_k, r.groups
        q = r.q.to(acc).reshape(B, r.kv_heads, G * Lq, r.q.shape[-1])  # (B, Hkv, G·Lq, D): a group's queries as rows
        k = r.k.to(acc)                                        # (B, Hkv, Lk, D): shared, not copied
        v = r.v.to(acc)                                        # (B, Hkv, Lk, Dv)
        s = (q @ k.transpose(-1, -2)).view(B, Hq, Lq, Lk) * r.scale  # (B, Hq, Lq, Lk)  Q Kᵀ / √d_k
        if r.softcap is not None:
            s = r.softcap * torch.tanh(s / r.softcap)
        visible = None
        if r.causal or r.window is not None:
            visible = masks.visibility(Lq, Lk, causal=r.causal, window=r.window, device=s.device)
        if r.mask is not None:
            if r.mask.dtype == torch.bool:
                visible = r.mask if visible is None else visible & r.mask
            else:
                s = s + r.mask.to(acc)
        if visible is not None:
            s = s.masked_fill(~visible, float("-inf"))          # −inf, not 0: softmax gives exactly 0
        peak = s.amax(dim=-1, keepdim=True).detach()           # (B, Hq, Lq, 1)
        peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
        e = torch.exp(s - peak)
        total = e.sum(dim=-1, keepdim=True)
        alive = total > 0                                       # False: the row may look at nothing
        weights = e / torch.where(alive, total, torch.ones_like(total))
        if r.dropout_p > 0:
            weights = F.dropout(weights, p=r.dropout_p, training=True)
        out = (weights.reshape(B, r.kv_heads, G * Lq, Lk) @ v).view(B, Hq, Lq, v.shape[-1])  # (B, Hq, Lq, Dv)
        lse = None
        if r.need_lse:
            lse = torch.where(alive, torch.log(torch.where(alive, total, torch.ones_like(total))) + peak,
                              torch.full_like(total, float("-inf")))[..., 0]
        return Result(out.to(r.q.dtype), weights if r.need_weights else None, lse)
