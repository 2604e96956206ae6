"""Talking to the other ranks with a deadline: point-to-point steps, the metadata check, start-up.

Every wait has a timeout, and a wait that fails names the rank it was waiting for:

    RankFailure: rank 2: receiving the K/V block (forward step 0) with rank 1 failed (waiting at most
    15 s): rank 1 died, hung or left the ring — see its own log. Original error: ...

`init(...)` starts the process group the same way: each rank first checks in at the
rendezvous store, and a rank that never arrives is named ("ranks [3] did not join within
30 s") instead of the rendezvous timing out anonymously.
"""

from __future__ import annotations

import datetime
import os
import threading
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Exchange",
    "Peer",
    "RankFailure",
    "check_same",
    "group_ranks",
    "init",
    "wait_timeout_s",
]

DEFAULT_TIMEOUT_S = 300.0
"""How long one wait for another rank may take when neither the caller nor `init` said otherwise."""


class _WaitTimeout:
    """Seconds one wait may take, on any group: as `init` last set it, else DEFAULT_TIMEOUT_S. One per process
    (`_WAIT_TIMEOUT`), set by `init` and read by every wait, from any thread (under its lock)."""

    def __init__(self, seconds: float = DEFAULT_TIMEOUT_S) -> None:
        self._lock = threading.Lock()
        self._seconds = float(seconds)

    def get(self) -> float:
        with self._lock:
            return self._seconds

    def set(self, seconds: float) -> None:
        with self._lock:
            self._seconds = float(seconds)


_WAIT_TIMEOUT = _WaitTimeout()

JOIN_PREFIX = "selfattn/joined/"


class RankFailure(RuntimeError):
    """Another rank died, hung or never joined; `rank` is the one that did not answer (or None)."""

    def __init__(self, message: str, rank: int | None):
        super().__init__(message)
        self.rank = rank


def wait_timeout_s() -> float:
    """Seconds one wait (on any group) may take: as `init` set it, else DEFAULT_TIMEOUT_S."""
    return _WAIT_TIMEOUT.get()


def group_ranks(group) -> tuple[int, int, list[int]]:
    """(world size, this process's rank in the group, global rank of each group rank)."""
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    globals_ = list(range(world)) if group is None else [dist.get_global_rank(group, r) for r in range(world)]
    return world, rank, globals_


@dataclass
class Peer:
    """One outstanding send or receive, and what to say if it fails."""

    work: Any  # a torch.distributed Work handle
    peer: int
    what: str


class Exchange:
    """The point-to-point operations of one step, posted together and waited for with a deadline.

    Operations are posted in the order they are added (`send`, `recv`), which is the same on
    both sides of every pair, as NCCL requires; gloo matches them by tag as well.
    """

    def __init__(self, group, timeout_s: float, rank: int, global_ranks: list[int], label: str):
        self.group, self.timeout_s, self.rank, self.globals = group, timeout_s, rank, global_ranks
        self.label = label
        self._ops: list[tuple[dist.P2POp, int, str]] = []
        self._pending: list[Peer] = []
        self.bytes_sent = 0

    def send(self, tensor: torch.Tensor, peer: int, what: str, tag: int) -> None:
        self._ops.append((dist.P2POp(dist.isend, tensor, self.globals[peer], self.group, tag), peer, what))
        self.bytes_sent += tensor.numel() * tensor.element_size()

    def recv(self, tensor: torch.Tensor, peer: int, what: str, tag: int) -> None:
        self._ops.append((dist.P2POp(dist.irecv, tensor, self.globals[peer], self.group, tag), peer, what))

    def post(self) -> None:
        if not self._ops:
            return
        try:
            works = dist.batch_isend_irecv([op for op, _, _ in self._ops])
        except RuntimeError as e:
            peers = sorted({p for _, p, _ in self._ops})
            culprit = peers[0] if len(peers) == 1 else self._culprit()
            raise self._failure(culprit, "posting " + self.label, e) from e
        self._pending = [Peer(w, p, what) for w, (_, p, what) in zip(works, self._ops, strict=True)]
        self._ops = []

    def _culprit(self) -> int | None:
        """After a batch of several peers' operations failed to post: the peer whose own operation, posted alone,
        fails at once (gloo: a connection the dead rank closed), or None. Only on the way to raising: what the
        probe posts to a live peer is never waited for (that peer is about to fail as well)."""
        for op, peer, _ in self._ops:
            try:
                op.op(op.tensor, op.peer, op.group, op.tag)
            except RuntimeError:
                return peer
        return None

    def wait(self) -> None:
        deadline = datetime.timedelta(seconds=self.timeout_s)
        pending, self._pending = self._pending, []
        for item in pending:
            try:
                finished = item.work.wait(deadline)
            except RuntimeError as e:
                raise self._failure(item.peer, item.what, e) from e
            if finished is False:
                raise self._failure(item.peer, item.what, None)

    def _failure(self, peer: int | None, what: str, error: Exception | None) -> RankFailure:
        who = "a peer" if peer is None else f"rank {peer}"
        how = "timed out" if error is None else "failed"
        text = (
            f"rank {self.rank}: {what} ({self.label}) with {who} {how} (waiting at most {self.timeout_s:g} s): "
            f"{who} died, hung or left the ring — see its own log"
        )
        if error is not None:
            text += f". Original error: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
        return RankFailure(text, peer)


def check_same(meta: dict[str, int], group, what: str) -> None:
    """All ranks of `group` hold the same `meta` (small ints), or every rank raises the same ValueError.

    One all_gather of len(meta) int64 per rank. A rank that does not take part makes the others
    raise `RankFailure` within the group's timeout.
    """
    world, rank, _ = group_ranks(group)
    names = list(meta)
    mine = torch.tensor([int(meta[n]) for n in names], dtype=torch.int64)
    if dist.get_backend(group) == "nccl":
        mine = mine.cuda()
    table = [torch.empty_like(mine) for _ in range(world)]
    timeout = wait_timeout_s()
    try:
        work = dist.all_gather(table, mine, group=group, async_op=True)
        finished = work.wait(datetime.timedelta(seconds=timeout))
    except RuntimeError as e:
        raise RankFailure(
            f"rank {rank}: the {what} metadata exchange did not complete within {timeout:g} s: some "
            f"rank of the group died, hung or never called it. Original error: "
            f"{str(e).splitlines()[0] if str(e) else type(e).__name__}",
            None,
        ) from e
    if finished is False:
        raise RankFailure(f"rank {rank}: the {what} metadata exchange timed out after {timeout:g} s", None)
    rows = [t.cpu().tolist() for t in table]
    for r, row in enumerate(rows):
        if row != rows[0]:
            diffs = ", ".join(
                f"{n}: rank 0 has {a}, rank {r} has {b}" for n, a, b in zip(names, rows[0], row, strict=True) if a != b
            )
            raise ValueError(
                f"{what}: ranks disagree ({diffs}); every rank must pass tensors of the same "
                f"shape and dtype and the same options"
            )


def init(
    backend: str | None = None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    rank: int | None = None,
    world_size: int | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
):
    """Start the default process group with a timeout, naming any rank that never joins.

    Reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the environment when not given
    (torchrun sets them). backend: "gloo" (CPU) or "nccl" (GPU); None picks nccl when CUDA is
    available. Every later wait of `ring_attention` on this group uses `timeout_s`.
    """
    if dist.is_initialized():
        raise RuntimeError("torch.distributed is already initialised")
    rank = int(os.environ["RANK"]) if rank is None else rank
    world_size = int(os.environ["WORLD_SIZE"]) if world_size is None else world_size
    master_addr = os.environ.get("MASTER_ADDR", "127.0.0.1") if master_addr is None else master_addr
    master_port = int(os.environ["MASTER_PORT"]) if master_port is None else master_port
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    timeout = datetime.timedelta(seconds=timeout_s)
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(
        master_addr,
        master_port,
        world_size,
        is_master=(rank == 0 and not agent_store),
        timeout=timeout,
        wait_for_workers=False,
    )
    store.set(f"{JOIN_PREFIX}{rank}", "1")
    keys = [f"{JOIN_PREFIX}{r}" for r in range(world_size)]
    try:
        store.wait(keys, timeout)
    except (RuntimeError, dist.DistStoreError) as e:
        missing = [r for r, key in zip(range(world_size), keys, strict=True) if not store.check([key])]
        raise RankFailure(
            f"rank {rank}: ranks {missing} did not join within {timeout_s:g} s "
            f"(rendezvous at {master_addr}:{master_port})",
            missing[0] if missing else None,
        ) from e
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank % max(1, torch.cuda.device_count()))))
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
    _WAIT_TIMEOUT.set(timeout_s)
    return store
