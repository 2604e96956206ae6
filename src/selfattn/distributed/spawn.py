"""N processes on this machine without torchrun: for benchmarks, notebooks and quick trials.

    results = run_local(4, "mypkg.mymod:work", args=(...,), timeout_s=60)

Each process joins a gloo group on 127.0.0.1 (a free port, found by binding to port 0) through
`init`, calls `work(rank, world, *args)` and sends back its return value (which must pickle);
`run_local` returns them in rank order, or raises RuntimeError with every failed rank's
traceback. The processes are started by `torch.multiprocessing.start_processes` (spawn). For real jobs use
torchrun (docs/distributed.md).
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import queue
import socket
import time
import traceback

__all__ = ["collect", "free_port", "run_local", "start"]

POLL_S = 1.0
"""How often the parent checks that its children are alive while it waits for answers."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, target: str, timeout_s: float, threads: int, args: tuple, results) -> None:
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    try:
        from .comm import init

        init("gloo", timeout_s=timeout_s, rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port)
        module, name = target.split(":")
        results.put((rank, "ok", getattr(importlib.import_module(module), name)(rank, world, *args)))
    except BaseException:  # noqa: BLE001 - handed to the parent, which raises it
        results.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def start(world: int, target: str, *, args: tuple = (), timeout_s: float = 60.0, threads: int = 1):
    """Start `world` processes running `target` ("module:function"); returns (processes, answer queue).

    Started by `torch.multiprocessing.start_processes` (spawn, daemons, rank as the first argument), not joined:
    `collect` waits on the answers, so a rank that hangs or dies is named instead of waited on forever."""
    if ":" not in target:
        raise ValueError(f"target must be 'module:function', got {target!r}")
    import torch.multiprocessing

    results = mp.get_context("spawn").Queue()
    port = free_port()
    context = torch.multiprocessing.start_processes(
        _entry,
        args=(world, port, target, timeout_s, threads, args, results),
        nprocs=world,
        join=False,
        daemon=True,
        start_method="spawn",
    )
    return list(context.processes), results


def collect(procs, results, expect: int, wait_s: float) -> dict[int, tuple[str, object]]:
    """Up to `expect` answers {rank: ("ok" | "error", value)} within wait_s; stops early once every
    process is gone; then ends (kills) what is still running."""
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


def run_local(
    world: int, target: str, *, args: tuple = (), timeout_s: float = 60.0, threads: int = 1, wait_s: float = 3600.0
) -> list:
    """Run `target` ("module:function") in `world` processes; their return values in rank order.

    timeout_s  the process group's timeout (any wait for another rank)
    threads    intra-op threads per process
    wait_s     the most the whole run may take
    """
    procs, results = start(world, target, args=args, timeout_s=timeout_s, threads=threads)
    got = collect(procs, results, world, wait_s)
    errors = [f"rank {r}:\n{v}" for r, (s, v) in sorted(got.items()) if s == "error"]
    missing = sorted(set(range(world)) - set(got))
    if errors or missing:
        raise RuntimeError("\n".join(errors) + (f"\nno answer from ranks {missing}" if missing else ""))
    return [got[r][1] for r in range(world)]
