"""One context-parallel training step of a `DecoderLM`: the same loss and gradients as one process.

    loss = train_step(model, batch, pad_id, optimizer, group=group, layout="zigzag")

Every rank holds the same parameters and the same batch (B, L + 1); each runs the model on its
shard of the inputs, `model(shard(inputs, group, dim=1), group=group)`, and scores its shard of
the targets. The loss is summed over this rank's targets and divided by the global count of
targets, so the ranks' losses add up to one process's mean loss; the loss and the parameter
gradients are then summed over the ranks (all_reduce), as DDP would.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .. import checks
from .layout import check_layout, shard

__all__ = ["train_step"]


def train_step(
    model: nn.Module,
    batch: torch.Tensor,
    pad_id: int,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    group=None,
    layout: str = "zigzag",
) -> float:
    """One step of `model` (a DecoderLM) on `batch` (B, L + 1), the same on every rank; returns the global mean loss.

    The loss equals `next_token_loss(model(batch[:, :-1]), batch, pad_id)` of one process, and after
    the call every rank holds that loss's parameter gradients (and has stepped `optimizer`, if given).
    group    the process group the sequence is split across (None: the default group)
    layout   "zigzag" or "contiguous" (see `shard`)
    """
    if not isinstance(batch, torch.Tensor) or batch.dim() != 2 or batch.shape[1] < 2:
        raise ValueError(
            f"batch must be (B, L + 1) token ids with L >= 1, got "
            f"{tuple(batch.shape) if isinstance(batch, torch.Tensor) else type(batch).__name__}"
        )
    checks.integer("pad_id", pad_id)
    check_layout(layout)
    inputs, targets = batch[:, :-1], batch[:, 1:]
    ids = shard(inputs, group, layout=layout, dim=1)  # Sharded (B, Lr)
    tgt = shard(targets, group, layout=layout, dim=1)
    local_targets = torch.where(ids.positions < ids.seq_len, tgt.tensor, torch.full_like(tgt.tensor, pad_id))
    count = int((targets != pad_id).sum())
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    logits = model(ids, group=group).tensor  # (B, Lr, V)
    loss = F.cross_entropy(logits.flatten(0, 1), local_targets.flatten(), ignore_index=pad_id, reduction="sum") / max(
        count, 1
    )
    loss.backward()
    total = loss.detach().clone()
    dist.all_reduce(total, group=group)
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
    if optimizer is not None:
        optimizer.step()
    return float(total)
