"""Context-parallel (ring) attention on torch.distributed: one sequence split across processes.

    init(timeout_s=30)                          start the process group (torchrun's environment)
    s = shard(x, group)                         this rank's rows of x (zigzag layout, padded)
    out = ring_attention(sq, sk, sv, causal=True)   this rank's rows of attention over the whole
    unshard(out, group)                         the whole sequence back on every rank
    ContextParallelLM(model, group)             a DecoderLM running on a shard of the sequence

See docs/distributed.md.
"""

from .comm import RankFailure, init
from .layout import LAYOUTS, Sharded, padded_length, positions, segments, shard, unshard
from .ring import Traffic, count_traffic, ring_attention

__all__ = [
           "LAYOUTS",
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
