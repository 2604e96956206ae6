"""Backend "naive": the whole (Lq, Lk) weight matrix, materialised — the one you can look at.

It follows the tutorial line by line in PyTorch (in float32 for half inputs) and is
the only backend that returns the attention weights of every query row. Its memory
grows with B·Hq·Lq·Lk, so it refuses requests whose weights would exceed the budget in force
(`selfattn.kernels.budget`, 1 GiB by default) and names a backend that can serve them instead.
Its scores are `selfattn.weights.masked_scores` (the request's `ScoreRule` applied to the whole
matrix), the ones `attention_weights` recomputes rows with.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..weights import masked_scores
from .base import EVERY_FEATURE, Backend, Capabilities, Cost, Request, Result, Work

RATE_GFLOPS = 15.0
"""Full forward, L = 4096: 2.3 s (three passes over a materialised L×L matrix), 1 thread."""

RATE_MASKED_GFLOPS = 9.5
"""Causal forward, L = 4096: 3.7 s (the mask is one more pass)."""


def _work(r: Request) -> Work:
    """All Lq·Lk pairs, and the whole weight matrix in memory."""
    masked = r.causal or r.window is not None or r.mask is not None
    return r.Lq * r.Lk, RATE_MASKED_GFLOPS if masked else RATE_GFLOPS, 0.0


class NaiveBackend(Backend):
    name = "naive"
    capabilities = Capabilities(
        returns_weights=True,
        returns_lse=True,
        softcap=True,
        dropout=True,
        features=EVERY_FEATURE,
        materialises_weights=True,
        notes={
            "weights_bytes": "use backend='sdpa' or 'tiled', which never build the full matrix "
            "(or raise the budget: with selfattn.kernels.budget(nbytes))"
        },
    )
    cost = Cost(
        work=_work,
        read_gbps=14.9,
        call_seconds=150e-6,
        backward_factor=2.4,
        busy_factor=1.65,
        dtype_speed={torch.float64: 0.52},
        backward_dtype_speed={torch.float64: 0.45},
    )
    """Naive's forward is slow (it masks and normalises the whole matrix), its backward is three matmuls;
    under load its few big ops lose 1.5× (see `kernels.cost`)."""

    def form_decides(self, r: Request) -> bool:
        """True: its reasons and estimate read no tensor values (`Backend.form_decides`)."""
        return True

    def forward(self, r: Request) -> Result:
        acc = r.accumulate_dtype
        B, Hq, Lq, Lk, G = r.B, r.Hq, r.Lq, r.Lk, r.G
        v = r.v.to(acc)  # (B, Hkv, Lk, Dv)
        s = masked_scores(r)  # (B, Hq, Lq, Lk)  Q Kᵀ / √d_k, softcapped, −inf where hidden
        if r.rule.sinks is not None:  # the sink: one more logit per row, whose value is 0 (a column dropped below)
            sink = r.rule.sinks.to(acc)[None, :, None, None].expand(B, Hq, Lq, 1)
            s = torch.cat([s, sink], dim=-1)
        if s.shape[-1] == 0:  # no keys: every row sees nothing
            peak = s.new_full((B, Hq, Lq, 1), float("-inf"))
        else:
            peak = s.amax(dim=-1, keepdim=True)  # (B, Hq, Lq, 1)
        alive = peak != float("-inf")  # False: the row sees nothing (a NaN or +inf row stays NaN, as the spec)
        e = torch.softmax(s, dim=-1) if s.shape[-1] else s.exp()  # one fused pass (NaN on a row that sees nothing)
        e = e.masked_fill(~alive, 0.0) if e.requires_grad else e.masked_fill_(~alive, 0.0)  # backward reads e
        # the weight of a row's largest score is exp(peak − lse): its log-sum-exp without a second pass of exp
        top = e.amax(dim=-1, keepdim=True) if e.shape[-1] else torch.ones_like(peak)
        weights = e[..., :Lk] if r.rule.sinks is not None else e
        if r.dropout_p > 0:
            weights = F.dropout(weights, p=r.dropout_p, training=True)
        out = (weights.reshape(B, r.Hkv, G * Lq, Lk) @ v).view(B, Hq, Lq, r.Dv)  # (B, Hq, Lq, Dv)
        lse = None
        if r.return_lse:
            lse = torch.where(alive, peak - torch.log(torch.where(alive, top, torch.ones_like(top))), peak)[..., 0]
        return Result(out.to(r.q.dtype), weights if r.return_weights else None, lse)
