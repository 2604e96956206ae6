"""Context-parallel (ring) attention on torch.distributed: one sequence split across processes.

    init(timeout_s=30)                          start the process group (torchrun's environment)
    s = shard(x, group)                         this rank's rows of x (zigzag layout, padded)
    out = ring_attention(sq, sk, sv, causal=True)   this rank's rows of attention over the whole
    unshard(out, group)                         the whole sequence back on every rank
    mha(x.tensor, context_parallel=ContextParallel.of(x, group))   a MultiHeadSelfAttention on a shard
    model(shard(ids, group, dim=1), group=group)                  a DecoderLM on a shard (Sharded logits)
    train_step(model, batch, pad_id, optimizer, group=group)      one step, equal to one process's

See docs/distributed.md.
"""

from .comm import RankFailure, init
from .context import ContextParallel
from .layout import LAYOUTS, Sharded, padded_length, positions, segments, shard, unshard
from .model import train_step
from .ring import Traffic, count_traffic, ring_attention

__all__ = [
    "LAYOUTS",
    "ContextParallel",
    "RankFailure",
    "Sharded",
    "Traffic",
    "count_traffic",
    "init",
    "padded_length",
    "positions",
    "ring_attention",
    "segments",
    "shard",
    "train_step",
    "unshard",
]
