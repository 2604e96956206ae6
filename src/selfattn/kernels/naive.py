"""Backend "naive": the whole (Lq, Lk) weight matrix, materialised — the one you can look at.

It follows the tutorial line by line in PyTorch (in float32 for half inputs) and is
the only backend that returns the attention weights of every query row. Its memory
grows with B·Hq·Lq·Lk, so it refuses requests whose weights would exceed
`WEIGHTS_BUDGET_BYTES` and names a backend that can serve them instead. Its scores are
`selfattn.weights.masked_scores`, the one copy `attention_weights` recomputes rows with.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..weights import masked_scores
from .base import Backend, Capabilities, Request, Result, over_budget

WEIGHTS_BUDGET_BYTES = 1 << 30
"""Largest weight matrix (B·Hq·Lq·Lk elements × bytes) the naive backend agrees to build: 1 GiB."""


CAPABILITIES = Capabilities(
    returns_weights=True,
    returns_lse=True,
    softcap=True,
    dropout=True,
    notes={
        "weights_bytes": "use backend='sdpa' or 'tiled', which never build the full matrix "
        "(the budget is selfattn.kernels.naive.WEIGHTS_BUDGET_BYTES)"
    },
)
"""No max_weights_bytes: the budget is WEIGHTS_BUDGET_BYTES as it is at each request (a setting one may lower)."""


class NaiveBackend(Backend):
    name = "naive"
    capabilities = CAPABILITIES

    def not_supported_reasons(self, request: Request) -> list[str]:
        """CAPABILITIES' reasons, and the weight budget as WEIGHTS_BUDGET_BYTES is now."""
        reasons = self.capabilities.not_supported_reasons(request)
        if request.weights_bytes > WEIGHTS_BUDGET_BYTES:
            reasons.append(f"{over_budget(request, WEIGHTS_BUDGET_BYTES)}; {self.capabilities.notes['weights_bytes']}")
        return reasons

    def forward(self, r: Request) -> Result:
        acc = r.accumulate_dtype
        B, Hq, Lq, Lk, G = r.B, r.Hq, r.Lq, r.Lk, r.G
        v = r.v.to(acc)  # (B, Hkv, Lk, Dv)
        s = masked_scores(r)  # (B, Hq, Lq, Lk)  Q Kᵀ / √d_k, softcapped, −inf where hidden
        if Lk == 0:  # no keys: every row sees nothing
            peak = s.new_full((B, Hq, Lq, 1), float("-inf"))
        else:
            peak = s.amax(dim=-1, keepdim=True).detach()  # (B, Hq, Lq, 1)
        peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
        e = torch.exp(s - peak)
        total = e.sum(dim=-1, keepdim=True)
        alive = total > 0  # False: the row may look at nothing
        weights = e / torch.where(alive, total, torch.ones_like(total))
        if r.dropout_p > 0:
            weights = F.dropout(weights, p=r.dropout_p, training=True)
        out = (weights.reshape(B, r.Hkv, G * Lq, Lk) @ v).view(B, Hq, Lq, r.Dv)  # (B, Hq, Lq, Dv)
        lse = None
        if r.return_lse:
            lse = torch.where(
                alive,
                torch.log(torch.where(alive, total, torch.ones_like(total))) + peak,
                torch.full_like(total, float("-inf")),
            )[..., 0]
        return Result(out.to(r.q.dtype), weights if r.return_weights else None, lse)
