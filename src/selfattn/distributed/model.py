"""A `DecoderLM` on a shard of the sequence: context parallelism without changing the model.

    cp = ContextParallelLM(model, group)            # the same parameters on every rank
    ids = shard(batch[:, :-1], group, dim=1)         # this rank's positions (zigzag)
    logits = cp(ids)                                 # Sharded (B, Lr, vocab): this rank's rows

Everything in the model but attention works position by position, so each rank runs it on its
own rows; only attention needs the whole sequence. `ContextParallelLM` runs the model's
blocks inside `selfattn.functional.intercept(...)`, which routes each of the model's
`attention` calls to `ring_attention`, and embeds each row at its *global* position.
`train_step` is one optimiser step of the language model, equal to one process's step on the
whole batch: the loss is summed over this rank's targets and divided by the global count,
and parameter gradients are summed over the ranks (all_reduce), as DDP would.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ..functional import intercept
from ..kernels import Result
from .layout import Sharded, check_layout
from .ring import ring_attention

__all__ = ["ContextParallelLM", "train_step"]


class ContextParallelLM(nn.Module):
    """`model` (a DecoderLM) on this rank's shard of the sequence.

    forward(ids)   ids: Sharded (B, Lr) along dim 1 from `shard(input_ids, group, dim=1)`
                   returns Sharded logits (B, Lr, vocab); rows at padding positions are garbage
                   and must be ignored (`train_step` does)
    """

    def __init__(self, model: nn.Module, group=None, *, layout: str = "zigzag", backend: str = "auto"):
        super().__init__()
        for name in ("tok_emb", "pos_emb", "drop", "blocks", "ln_f", "lm_head", "config"):
            if not hasattr(model, name):
                raise TypeError(f"model must be a selfattn DecoderLM (it has no {name!r}), got {type(model).__name__}")
        self.model = model
        self.group = group
        self.layout = check_layout(layout)
        self.backend = backend

    def forward(self, ids: Sharded) -> Sharded:
        if not isinstance(ids, Sharded) or ids.dim != 1 or ids.tensor.dim() != 2:
            raise TypeError("ids must be the Sharded (B, Lr) that shard(input_ids, group, dim=1) returns")
        if ids.layout != self.layout:
            raise ValueError(f"ids are in the {ids.layout!r} layout, the model runs {self.layout!r}")
        m = self.model
        if ids.seq_len > m.config.max_len:
            raise ValueError(f"sequence of {ids.seq_len} positions exceeds max_len={m.config.max_len}")
        pos = ids.positions
        pos = torch.where(pos < ids.seq_len, pos, torch.zeros_like(pos))                # padding rows: any position
        x = m.drop(m.tok_emb(ids.tensor) + m.pos_emb(pos))                            # (B, Lr, d_model)
        with intercept(self._router(ids)):
            for block in m.blocks:
                x = block(x)
        return ids.like(m.lm_head(m.ln_f(x)))                                          # (B, Lr, V)

    def _router(self, ids: Sharded):
        Lr = ids.local_len

        def route(request, compute) -> Result:
            if request.Lq != Lr or request.Lk != Lr:
                raise ValueError(f"context parallel attention needs this rank's {Lr} rows as queries and keys, "
                                 f"got Lq={request.Lq}, Lk={request.Lk} (a KV cache is not supported)")
            if request.mask is not None or request.return_weights or request.dropout_p > 0:
                raise ValueError("context parallel attention supports causal / window / softcap only: no mask, "
                                 "no returned weights, no attention dropout")
            res = ring_attention(request.q, request.k, request.v, group=self.group, causal=request.causal,
                                 window=request.window, softcap=request.softcap, scale=request.scale,
                                 layout=self.layout, seq_len=ids.seq_len, return_lse=True, backend=self.backend)
            return Result(res.output, None, res.lse if request.return_lse else None)

        return route


def train_step(cp: ContextParallelLM, batch: torch.Tensor, pad_id: int,
               optimizer: torch.optim.Optimizer | None = None) -> float:
    """One step on `batch` (B, L + 1), the same on every rank; returns the global mean loss.

    The loss equals `next_token_loss(model(batch[:, :-1]), batch, pad_id)` of one process, and after
    the call every rank holds that loss's parameter gradients (and has stepped `optimizer`, if given).
    """
    from .layout import shard

    if not isinstance(batch, torch.Tensor) or batch.dim() != 2 or batch.shape[1] < 2:
        raise ValueError(f"batch must be (B, L + 1) token ids with L >= 1, got "
                         f"{tuple(batch.shape) if isinstance(batch, torch.Tensor) else type(batch).__name__}")
    inputs, targets = batch[:, :-1], batch[:, 1:]
    ids = shard(inputs, cp.group, layout=cp.layout, dim=1)
    tgt = shard(targets, cp.group, layout=cp.layout, dim=1)
    local_targets = torch.where(ids.positions < ids.seq_len, tgt.tensor, torch.full_like(tgt.tensor, pad_id))
    count = int((targets != pad_id).sum())
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    logits = cp(ids).tensor
    loss = F.cross_entropy(logits.flatten(0, 1), local_targets.flatten(), ignore_index=pad_id,
                           reduction="sum") / max(count, 1)
    loss.backward()
    total = loss.detach().clone()
    dist.all_reduce(total, group=cp.group)
    for p in cp.model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=cp.group)
    if optimizer is not None:
        optimizer.step()
    return float(total)
