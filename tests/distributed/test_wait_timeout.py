"""The wait timeout `init` sets is what every later wait reads (`comm.wait_timeout_s`), from any thread."""

from __future__ import annotations

import socket
import threading

import torch.distributed as dist

from selfattn.distributed import comm


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_init_sets_the_timeout_every_wait_reads(monkeypatch):
    monkeypatch.setattr(comm, "_WAIT_TIMEOUT", comm._WaitTimeout())
    assert comm.wait_timeout_s() == comm.DEFAULT_TIMEOUT_S
    comm.init("gloo", timeout_s=7.5, rank=0, world_size=1, master_addr="127.0.0.1", master_port=_free_port())
    try:
        seen = []
        reader = threading.Thread(target=lambda: seen.append(comm.wait_timeout_s()))
        reader.start()
        reader.join()
        assert seen == [7.5] and comm.wait_timeout_s() == 7.5
    finally:
        dist.destroy_process_group()
