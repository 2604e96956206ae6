"""The test side of `selfattn.distributed.spawn`: real processes, a gloo group on 127.0.0.1.

    failures = run_group(2, "tests.distributed.workers:group_two", timeout_s=15)

One spawn runs many cases: process start-up is the expensive part on two cores.
"""

from __future__ import annotations

from selfattn.distributed.spawn import collect, free_port, run_local, start

__all__ = ["START_TIMEOUT_S", "collect", "free_port", "run_group", "start_group"]

START_TIMEOUT_S = 120.0
"""Spawning and importing torch on two busy cores may take a while."""

RUN_TIMEOUT_S = 600.0
"""The most a group's work may take once started."""


def start_group(world: int, target: str, *, timeout_s: float, args: tuple = ()):
    return start(world, target, args=args, timeout_s=timeout_s)


def run_group(world: int, target: str, *, timeout_s: float, args: tuple = ()) -> list:
    try:
        return run_local(world, target, args=args, timeout_s=timeout_s, wait_s=START_TIMEOUT_S + RUN_TIMEOUT_S)
    except RuntimeError as e:
        raise AssertionError(str(e)) from None
