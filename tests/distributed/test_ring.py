"""Ring attention in real processes (gloo on 127.0.0.1): equal to the float64 spec, in every case.

One spawned group per world size (2 … 5) runs every case (see workers.py and sweep.py: every
layout, length 1 … 3·2W and window up to the whole sequence, forward and backward), because
starting processes is the expensive part on a small machine.
"""

from __future__ import annotations

import pytest

from selfattn.distributed import RankFailure, init
from selfattn.distributed.spawn import collect, free_port, start

from .harness import START_TIMEOUT_S, run_group

TIMEOUT_S = 15.0
"""The process group's timeout in these tests: a dead rank must be reported well within it."""

HANG_TIMEOUT_S = 5.0
"""The timeout when a rank hangs (the survivors wait this long before they raise)."""

SLACK_S = 5.0
"""Seconds past the timeout a survivor may take to raise (busy cores)."""


@pytest.mark.parametrize("world, target", [(2, "group_two"), (3, "group_three"), (4, "group_four"), (5, "group_five")])
def test_ring_equals_single_process(world, target):
    failures = run_group(world, f"tests.distributed.workers:{target}", timeout_s=TIMEOUT_S)
    flat = [f"rank {r}: {f}" for r, fs in enumerate(failures) for f in fs]
    assert not flat, "\n".join(flat)


@pytest.mark.parametrize("world, first, count", [(2, 0, 8), (3, 2, 4)])
def test_ring_score_features_equal_the_spec(world, first, count):
    """Sinks, ALiBi and two-sided windows, forward and backward, every dtype (features.py)."""
    failures = run_group(world, "tests.distributed.features:group", timeout_s=TIMEOUT_S, args=(first, count))
    flat = [f"rank {r}: {f}" for r, fs in enumerate(failures) for f in fs]
    assert not flat, "\n".join(flat)


@pytest.mark.parametrize(
    "world, how, timeout_s", [(3, "die", TIMEOUT_S), (3, "die_first", TIMEOUT_S), (2, "hang", HANG_TIMEOUT_S)]
)
def test_failed_rank_ends_the_others_with_a_named_error(world, how, timeout_s):
    victim = 1
    procs, results = start(world, "tests.distributed.workers:fails_mid_call", timeout_s=timeout_s, args=(victim, how))
    got = collect(procs, results, world - 1, wait_s=START_TIMEOUT_S + timeout_s)
    assert victim not in got
    assert sorted(got) == [r for r in range(world) if r != victim], f"survivors did not answer: {got}"
    for rank, (status, text) in got.items():
        assert status == "ok", text
        seconds, named, message = text.split("|", 2)
        assert float(seconds) <= timeout_s + SLACK_S, message
        assert f"rank {rank}:" in message and f"with rank {victim}" in message, message
        assert named != "None" and int(named) == victim, message


def test_rank_that_never_joins_is_named():
    with pytest.raises(RankFailure, match=r"ranks \[1, 2\] did not join within"):
        init("gloo", timeout_s=2, rank=0, world_size=3, master_addr="127.0.0.1", master_port=free_port())
