"""`ContextParallel`: the argument that makes a module's attention run over a sequence split across ranks.

    cp = ContextParallel(group, layout="zigzag", seq_len=L)      # or ContextParallel.of(sharded_x, group)
    y = mha(x_local, context_parallel=cp)        # MultiHeadSelfAttention on this rank's rows (B, Lr, d_model)
    logits = model(shard(ids, group, dim=1), group=group)    # DecoderLM: builds the ContextParallel itself

Everything in a transformer but attention works row by row, so each rank runs it on its own rows;
only attention needs the whole sequence, and `ContextParallel.attention` sends it to
`ring_attention` with the shard's layout and true length. It is an argument of the call (never
an attribute set on a live module), immutable, and safe to share between threads.
`selfattn.modules` knows it only by its `attention` method (`modules.SequenceParallel`): the
modules sit below this package and do not import it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import checks
from .layout import Sharded, check_layout
from .ring import ring_attention

__all__ = ["ContextParallel"]


@dataclass(frozen=True)
class ContextParallel:
    """This rank holds rows of a sequence split across `group`; attention goes round the ring.

    group    the torch.distributed process group (None: the default group)
    layout   which positions each rank holds: "zigzag" or "contiguous" (see `shard`)
    seq_len  the true length L of the whole sequence; positions >= L are padding
             (None: no padding, L = local rows × world)
    """

    group: object = None
    layout: str = "zigzag"
    seq_len: int | None = None

    def __post_init__(self):
        check_layout(self.layout)
        checks.optional_integer("seq_len", self.seq_len, low=1)

    @classmethod
    def of(cls, sharded: Sharded, group=None) -> ContextParallel:
        """The ContextParallel of a `Sharded` from `shard(x, group, ...)`: its layout and true length.
        Raises ValueError when `group` is not the group it was sharded over (another size or rank)."""
        if not isinstance(sharded, Sharded):
            raise TypeError(f"sharded must be the Sharded that shard() returns, got {type(sharded).__name__}")
        sharded.check_group(group)
        return cls(group, sharded.layout, sharded.seq_len)

    def attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        causal: bool = False,
        scale: float | None = None,
        backend: str = "auto",
    ) -> torch.Tensor:
        """This rank's rows of attention over the whole sequence (`ring_attention`).

        q (B, Hq, Lr, D), k (B, Hkv, Lr, D), v (B, Hkv, Lr, Dv)  ->  (B, Hq, Lr, Dv)
        """
        return ring_attention(
            q,
            k,
            v,
            group=self.group,
            causal=causal,
            scale=scale,
            layout=self.layout,
            seq_len=self.seq_len,
            backend=backend,
        )
