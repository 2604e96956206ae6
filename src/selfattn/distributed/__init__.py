"""Context-parallel (ring) attention on torch.distributed: one sequence split across processes.

    init(timeout_s=30)                          start the process group (torchrun's environment)
    s = shard(x, group)                         this rank's rows of x (zigzag layout, padded)
    out = ring_attention(sq, sk, sv, causal=True)   this rank's rows of attention over the whole
    unshard(out, group)                         the whole sequence back on every rank
    mha(x.tensor, context_parallel=ContextParallel.of(x, group))   a MultiHeadSelfAttention on a shard
    model(shard(ids, group, dim=1), group=group)                  a DecoderLM on a shard (Sharded logits)

A library only: training a model this way lives with the model (`selfattn.model.train.parallel`).
See docs/distributed.md.
"""

from .comm import RankFailure, init
from .context import ContextParallel
from .layout import LAYOUTS, Sharded, padded_length, positions, segments, shard, unshard
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
    "unshard",
]
