"""The test side of `selfattn.distributed.spawn`: real processes, a gloo group on 127.0.0.1.

    failures = run_group(2, "tests.distributed.workers:group_two", timeout_s=15)

(Starting a group to watch it fail: `selfattn.distributed.spawn.start` and `collect` directly.)

One spawn runs many cases: process start-up is the expensive part on two cores.
"""

from __future__ import annotations

from selfattn.distributed.spawn import run_local

__all__ = ["RUN_TIMEOUT_S", "START_TIMEOUT_S", "run_group"]

START_TIMEOUT_S = 120.0
"""Spawning and importing torch on two busy cores may take a while."""

RUN_TIMEOUT_S = 600.0
"""The most a group's work may take once started."""


def run_group(world: int, target: str, *, timeout_s: float, args: tuple = ()) -> list:
    try:
        return run_local(world, target, args=args, timeout_s=timeout_s, wait_s=START_TIMEOUT_S + RUN_TIMEOUT_S)
    except RuntimeError as e:
        raise AssertionError(str(e)) from None
