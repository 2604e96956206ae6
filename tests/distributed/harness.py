"""Run a function in W real processes joined by a gloo process group on 127.0.0.1.

    results = run_group(2, "tests.distributed.workers:attention_cases", timeout_s=20)

Each process starts with `selfattn.distributed.init` on a free port and calls the target with
(rank, world); the return values come back in rank order. A process that raises sends its
traceback, and `run_group` fails with it. One spawn runs many cases: process start-up is the
expensive part on two cores.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import queue
import socket
import time
import traceback

START_TIMEOUT_S = 120.0
"""Spawning and importing torch on two busy cores may take a while."""

POLL_S = 1.0

RUN_TIMEOUT_S = 600.0
"""The most a group's work may take once started."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, target: str, timeout_s: float, args: tuple, results) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    try:
        from selfattn.distributed import init

        init("gloo", timeout_s=timeout_s, rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port)
        module, name = target.split(":")
        value = getattr(importlib.import_module(module), name)(rank, world, *args)
        results.put((rank, "ok", value))
    except BaseException:  # noqa: BLE001 - the parent reports it
        results.put((rank, "error", traceback.format_exc()))
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def start_group(world: int, target: str, *, timeout_s: float = 30.0, args: tuple = ()):
    """Start the processes; returns (processes, result queue)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, world, port, target, timeout_s, args, results), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    return procs, results


def collect(procs, results, expect: int, wait_s: float) -> dict[int, tuple[str, object]]:
    """Up to `expect` (status, value) answers by rank, within wait_s; stops early once every process is gone."""
    got: dict[int, tuple[str, object]] = {}
    deadline = time.monotonic() + wait_s
    try:
        while len(got) < expect and time.monotonic() < deadline:
            try:
                rank, status, value = results.get(timeout=POLL_S)
            except queue.Empty:
                if not any(p.is_alive() for p in procs):
                    break
                continue
            got[rank] = (status, value)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
    return got


def run_group(world: int, target: str, *, timeout_s: float = 30.0, args: tuple = ()) -> list:
    procs, results = start_group(world, target, timeout_s=timeout_s, args=args)
    got = collect(procs, results, world, START_TIMEOUT_S + RUN_TIMEOUT_S)
    errors = [f"rank {r}:\n{v}" for r, (s, v) in sorted(got.items()) if s == "error"]
    missing = sorted(set(range(world)) - set(got))
    assert not errors and not missing, "\n".join(errors) + (f"\nno answer from ranks {missing}" if missing else "")
    return [got[r][1] for r in range(world)]
