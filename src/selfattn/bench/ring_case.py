"""`selfattn bench --case ring`: ring attention over 1, 2 and 4 processes of this machine.

For each world size W, W processes (gloo on 127.0.0.1, one thread each) run causal attention
over one sequence of L positions in the zigzag layout, forward and backward, and each reports

    seconds per step     best of `repeats` steps (forward + backward)
    bytes sent           counted at every send (`count_traffic`) against the formula
                             forward   (W−1) · B·Hkv·Lr·(D+Dv) · bytes(dtype)
                             backward  (W−1) · B·Hkv·Lr·(D+Dv) · bytes(dtype)
                                       + W · B·Hkv·Lr·(D+Dv) · bytes(accumulation dtype)
                         (the K/V blocks travel W−1 hops; each dK/dV block W−1 hops and one home)
    peak memory          the step's peak extra resident memory (VmHWM − VmRSS before), and the
                         bytes of the rank's inputs: both fall as 1/W

Then a simulated table to 64 ranks for a longer sequence, from the rates measured at W = 1
(visible query–key pairs per second, forward and backward apart) and a stated link (bandwidth
LINK_BYTES_PER_S, latency LINK_LATENCY_S): per ring step a rank computes Lr²/2 pairs (zigzag:
half of every block) while the next block is in flight, so a step takes max(compute, transfer),
and a pass takes W steps. Tables for the measured length and for a long one (sim_seq_len).

Returns plain data (a dict); the CLI renders it. A benchmark, not a test: on two shared cores the
four-process times measure contention as much as the ring.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

__all__ = ["LINK_BYTES_PER_S", "LINK_LATENCY_S", "SIM_WORLDS", "formula_bytes", "ring_case", "simulate", "worker"]

LINK_BYTES_PER_S = 12.5e9
"""The simulated link: 100 Gb/s (one InfiniBand EDR / 100 GbE port per rank), each direction."""

LINK_LATENCY_S = 5e-6
"""The simulated link's time per message (a few microseconds on InfiniBand / RoCE)."""

SIM_WORLDS = (1, 2, 4, 8, 16, 32, 64)

BLOCK_BACKEND = "tiled"
"""The kernel for each block: O(N) memory, so a rank's peak memory follows its share of the sequence
("auto" may pick the naive kernel for mid-sized blocks, whose weight matrix is Lr × Lr)."""

FULL = dict(seq_len=8192, batch=1, q_heads=8, kv_heads=4, head_dim=64, repeats=3, sim_seq_len=1 << 18)
QUICK = dict(seq_len=2048, batch=1, q_heads=4, kv_heads=2, head_dim=32, repeats=2, sim_seq_len=1 << 16)

GROUP_TIMEOUT_S = 600.0


def formula_bytes(world: int, local_len: int, batch: int, kv_heads: int, head_dim: int, dtype=torch.float32):
    """(forward, backward) bytes one rank sends for causal zigzag attention (every block is needed)."""
    element = torch.finfo(dtype).bits // 8
    acc = max(element, 4)
    block = batch * kv_heads * local_len * 2 * head_dim
    forward = (world - 1) * block * element
    backward = forward + (world if world > 1 else 0) * block * acc
    return forward, backward


def worker(rank: int, world: int, spec: dict) -> dict:
    """One rank of the benchmark (run by `selfattn.distributed.spawn`)."""
    from ..distributed import count_traffic, ring_attention, shard
    from .memory import peak_extra_bytes

    g = torch.Generator().manual_seed(0)
    B, Hq, Hkv, L, D = (spec[k] for k in ("batch", "q_heads", "kv_heads", "seq_len", "head_dim"))
    q = torch.randn(B, Hq, L, D, generator=g)
    k = torch.randn(B, Hkv, L, D, generator=g)
    v = torch.randn(B, Hkv, L, D, generator=g)
    sq, sk, sv = (shard(t) for t in (q, k, v))
    del q, k, v
    leaves = [t.tensor.requires_grad_() for t in (sq, sk, sv)]
    input_bytes = sum(t.numel() * t.element_size() for t in leaves)

    def step():
        for t in leaves:
            t.grad = None
        out = ring_attention(sq, sk, sv, causal=True, backend=spec["backend"]).tensor
        out.backward(torch.ones_like(out))

    def forward():
        with torch.no_grad():
            ring_attention(sq, sk, sv, causal=True, backend=spec["backend"])

    def counted_step():
        with count_traffic() as traffic:
            step()
        return traffic

    step()
    traffic, peak_extra = peak_extra_bytes(counted_step)
    times, fwd_times = [], []
    for _ in range(spec["repeats"]):
        t0 = time.perf_counter()
        forward()
        fwd_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    f_fwd, f_bwd = formula_bytes(world, sq.local_len, B, Hkv, D)
    return {
        "rank": rank,
        "seconds_per_step": min(times),
        "forward_seconds": min(fwd_times),
        "bytes_sent": {"forward": traffic.forward, "backward": traffic.backward},
        "bytes_formula": {"forward": f_fwd, "backward": f_bwd},
        "peak_extra_bytes": peak_extra,
        "input_bytes": input_bytes,
        "local_len": sq.local_len,
    }


def simulate(
    spec: dict,
    seq_len: int,
    forward_pairs_per_s: float,
    backward_pairs_per_s: float,
    link_bytes_per_s: float = LINK_BYTES_PER_S,
    latency_s: float = LINK_LATENCY_S,
) -> list[dict]:
    """Time per forward+backward step at each of SIM_WORLDS ranks for `seq_len`, from measured pair rates.

    A ring step computes Lr²/2 visible pairs while the next block (and, backward, a dK/dV block)
    is in flight; it takes max(compute, latency + bytes / bandwidth); a pass takes W ring steps.
    """
    rows = []
    base = None
    for world in SIM_WORLDS:
        Lr = -(-seq_len // (2 * world)) * 2
        pairs = Lr * Lr / 2 if world > 1 else seq_len * seq_len / 2  # per ring step; W = 1: the whole causal map
        f_bytes, b_bytes = formula_bytes(world, Lr, spec["batch"], spec["kv_heads"], spec["head_dim"])
        compute_f, compute_b = pairs / forward_pairs_per_s, pairs / backward_pairs_per_s
        send_f = latency_s + f_bytes / (world - 1) / link_bytes_per_s if world > 1 else 0.0
        send_b = 2 * latency_s + b_bytes / world / link_bytes_per_s if world > 1 else 0.0
        seconds = world * (max(compute_f, send_f) + max(compute_b, send_b))
        base = seconds if base is None else base
        rows.append(
            {
                "world": world,
                "seq_len": seq_len,
                "local_len": Lr,
                "compute_s_per_ring_step": compute_f + compute_b,
                "transfer_s_per_ring_step": send_f + send_b,
                "bound": "compute" if compute_f + compute_b >= send_f + send_b else "link",
                "seconds_per_step": seconds,
                "speedup": base / seconds,
                "efficiency": base / seconds / world,
                "bytes_sent_per_rank": f_bytes + b_bytes,
            }
        )
    return rows


def ring_case(quick: bool = False, worlds=(1, 2, 4), link_bytes_per_s: float = LINK_BYTES_PER_S) -> dict:
    """Measure ring attention at each world size and simulate to 64 ranks; returns plain data."""
    from ..distributed.spawn import run_local

    spec: dict[str, Any] = dict(QUICK if quick else FULL, backend=BLOCK_BACKEND)
    measured = []
    for world in worlds:
        ranks = run_local(world, "selfattn.bench.ring_case:worker", args=(spec,), timeout_s=GROUP_TIMEOUT_S)
        measured.append({"world": world, "seconds_per_step": max(r["seconds_per_step"] for r in ranks), "ranks": ranks})
    one = next((m for m in measured if m["world"] == 1), None)
    table = None
    rates = None
    if one is not None:
        r0 = one["ranks"][0]
        pairs = spec["seq_len"] ** 2 / 2
        fwd = pairs / r0["forward_seconds"]
        bwd = pairs / max(1e-9, r0["seconds_per_step"] - r0["forward_seconds"])
        rates = {"forward_pairs_per_s": fwd, "backward_pairs_per_s": bwd}
        table = {
            "measured_length": simulate(spec, spec["seq_len"], fwd, bwd, link_bytes_per_s),
            "long": simulate(spec, spec["sim_seq_len"], fwd, bwd, link_bytes_per_s),
        }
    return {
        "case": "ring",
        "spec": spec,
        "layout": "zigzag",
        "causal": True,
        "dtype": "float32",
        "threads_per_rank": 1,
        "cores": os.cpu_count(),
        "measured": measured,
        "rates": rates,
        "link_bytes_per_s": link_bytes_per_s,
        "link_latency_s": LINK_LATENCY_S,
        "simulated": table,
        "memory_method": "per rank: peak RSS during one forward+backward step (VmHWM after clear_refs) minus "
        "RSS before it; input_bytes: the rank's q, k, v shards",
    }
