"""Which positions of the sequence each rank holds: the zigzag and contiguous layouts.

A sequence of L positions is padded to Lp (a multiple of the layout's `units(world)`) and cut
into equal chunks. With W ranks:

    contiguous   W chunks of Lp/W:   rank i holds chunk i
    zigzag       2W chunks of Lp/2W: rank i holds chunks i and 2W−1−i

    W = 2, Lp = 8        positions  0 1 | 2 3 | 4 5 | 6 7
      contiguous         rank 0: 0 1 2 3            rank 1: 4 5 6 7
      zigzag             rank 0: 0 1 . . 6 7        rank 1: 2 3 4 5

Under causal attention the work of a rank grows with its positions; the zigzag layout pairs an
early chunk with a late one, so every rank does the same work (the contiguous layout leaves
the last rank W times the first's). A rank's rows are always in increasing position order, cut
into one (contiguous) or two (zigzag) runs of consecutive positions: its `segments`.

`shard(x, group)` returns a `Sharded`: this rank's rows plus the true length L, so the padding
(positions >= L) is hidden from attention and dropped by `unshard` without the user counting it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import checks

__all__ = [
    "LAYOUTS",
    "Sharded",
    "check_layout",
    "padded_length",
    "positions",
    "segments",
    "shard",
    "units",
    "unshard",
    "world_and_rank",
]

LAYOUTS = ("zigzag", "contiguous")


def check_layout(layout) -> str:
    if not isinstance(layout, str):
        raise TypeError(f"layout must be a str, got {type(layout).__name__} {layout!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose one of {LAYOUTS}")
    return layout


def units(world: int, layout: str) -> int:
    """Chunks the padded sequence is cut into: W (contiguous) or 2W (zigzag)."""
    return 2 * world if check_layout(layout) == "zigzag" else world


def padded_length(seq_len: int, world: int, layout: str) -> int:
    """L rounded up to a multiple of `units(world, layout)` (and at least one position per chunk)."""
    n = units(world, layout)
    return max(n, -(-seq_len // n) * n)


def segments(rank: int, world: int, local_len: int, layout: str) -> list[tuple[int, int]]:
    """The runs of consecutive global positions [start, stop) rank `rank` holds, in its row order.

    local_len   rows per rank (Lp / W)
    """
    if check_layout(layout) == "contiguous":
        return [(rank * local_len, (rank + 1) * local_len)]
    c = local_len // 2
    late = 2 * world - 1 - rank
    return [(rank * c, (rank + 1) * c), (late * c, (late + 1) * c)]


def positions(rank: int, world: int, local_len: int, layout: str, device=None) -> torch.Tensor:
    """Global position of each local row: int64 (local_len,)."""
    return torch.cat([torch.arange(a, b, device=device) for a, b in segments(rank, world, local_len, layout)])


@dataclass(frozen=True)
class Sharded:
    """This rank's part of a sequence.

    tensor   the local rows: size local_len = padded_length / world along `dim`
    seq_len  the true (unpadded) length L of the whole sequence
    layout   "zigzag" or "contiguous"
    dim      the sequence dimension of `tensor`
    world, rank   of the group it was sharded over
    """

    tensor: torch.Tensor
    seq_len: int
    layout: str
    dim: int
    world: int
    rank: int

    @property
    def local_len(self) -> int:
        return self.tensor.shape[self.dim]

    @property
    def positions(self) -> torch.Tensor:
        """Global position of each local row, int64 (local_len,); positions >= seq_len are padding."""
        return positions(self.rank, self.world, self.local_len, self.layout, device=self.tensor.device)

    def check_group(self, group) -> None:
        """ValueError unless `group` (None: the default group) is the group this was sharded over:
        the same size, this process at the same rank."""
        world, rank = world_and_rank(group)
        if (world, rank) != (self.world, self.rank):
            raise ValueError(
                f"the input was sharded over {self.world} ranks (as rank {self.rank}), but the group has "
                f"{world} (this process is rank {rank}): pass the group it was sharded over"
            )

    def like(self, tensor: torch.Tensor, dim: int | None = None) -> Sharded:
        """The same part of the sequence, another tensor (an output, a gradient)."""
        return Sharded(tensor, self.seq_len, self.layout, self.dim if dim is None else dim, self.world, self.rank)


def world_and_rank(group) -> tuple[int, int]:
    """(world size, this process's rank) in `group` (None: the default group); RuntimeError before `init`."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is not initialised: call selfattn.distributed.init(...) "
            "or torch.distributed.init_process_group(...) first"
        )
    return dist.get_world_size(group), dist.get_rank(group)


def _dim(x: torch.Tensor, dim) -> int:
    checks.integer("dim", dim)
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim={dim} is out of range for a tensor of shape {tuple(x.shape)}")
    return dim % x.dim()


def shard(x: torch.Tensor, group=None, *, layout: str = "zigzag", dim: int = 2) -> Sharded:
    """This rank's rows of the whole sequence `x` (the same tensor on every rank).

    x      (..., L, ...) with the sequence along `dim` (2 for (B, H, L, D); 1 for ids (B, L))
    returns a `Sharded` holding (..., Lp/W, ...): padded with zeros to Lp = padded_length(L, W, layout)
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    check_layout(layout)
    dim = _dim(x, dim)
    world, rank = world_and_rank(group)
    seq_len = x.shape[dim]
    total = padded_length(seq_len, world, layout)
    if total > seq_len:
        pad_shape = list(x.shape)
        pad_shape[dim] = total - seq_len
        x = torch.cat([x, x.new_zeros(pad_shape)], dim=dim)
    local = total // world
    parts = [x.narrow(dim, a, b - a) for a, b in segments(rank, world, local, layout)]
    tensor = parts[0] if len(parts) == 1 else torch.cat(parts, dim=dim)
    return Sharded(tensor.contiguous(), seq_len, layout, dim, world, rank)


def unshard(x: Sharded, group=None) -> torch.Tensor:
    """The whole sequence back on every rank (an all_gather): (..., L, ...), padding dropped."""
    import torch.distributed as dist

    if not isinstance(x, Sharded):
        raise TypeError(f"unshard takes the Sharded that shard() or ring_attention returned, got {type(x).__name__}")
    x.check_group(group)
    t = x.tensor.contiguous()
    gathered = [torch.empty_like(t) for _ in range(x.world)]
    dist.all_gather(gathered, t, group=group)
    pieces: list[tuple[int, torch.Tensor]] = []
    for r, part in enumerate(gathered):
        offset = 0
        for a, b in segments(r, x.world, x.local_len, x.layout):
            pieces.append((a, part.narrow(x.dim, offset, b - a)))
            offset += b - a
    whole = torch.cat([p for _, p in sorted(pieces, key=lambda item: item[0])], dim=x.dim)
    return whole.narrow(x.dim, 0, x.seq_len)
