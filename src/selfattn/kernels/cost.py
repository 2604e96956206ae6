"""The rule behind backend="auto": a small cost model whose constants were measured, not guessed.

For a request that several backends can serve, "auto" estimates each one's seconds as

    seconds ≈ CALL_SECONDS[b] + TILE_SECONDS · tiles (tiled only)
              + max(pairs_b · flops per pair / RATE_GFLOPS[b],   compute
                    bytes of K and V / READ_GBPS[b])             memory: one decoding step is bound by it
    (all but the call cost × BACKWARD_FACTOR[b] when the request needs gradients)

and takes the smallest. What differs between backends is which (query, key) pairs they compute:

    sdpa, causal with Lq = Lk, no mask   the visible half: PyTorch's flash kernel skips blocks
    sdpa, window or Lq ≠ Lk or a mask    all Lq·Lk, through a dense mask (RATE "sdpa_masked")
    tiled                                the tiles it visits (`tiled.Plan.work`): a window of w
                                         costs O(N·w), bottom-right causal skips the hidden blocks
    naive                                all Lq·Lk, and the whole weight matrix in memory

So SDPA wins plain and square-causal attention (its fused kernel has no Python per tile), and
"tiled" wins sliding windows, chunked prefill (causal, Lq < Lk), causal plus a padding mask,
and whatever SDPA refuses (lse, softcap) once past a few dozen positions; naive wins tiny
problems SDPA refuses, and is the only one that returns weights.

The constants come from a calibration grid (causal / full / window / prefill / decoding / GQA
/ masks / softcap / forward+backward; B=1, H=8, D=64, fp32; torch 2.13 on a 2-core AMD EPYC
VM, timed with 1 thread because the shared machine's 2-thread figures were noisy; the 2-thread
ratios of the targets agree within about 10%). With them "auto" took the fastest backend in 32
of the 33 grid cases, and one 3% slower in the last (prefill Lq=256, Lk=4096, where SDPA and
tiled are neck and neck). They are rates for this CPU; what decides the choice
is their ratios, which belong to the algorithms and carry over between CPUs far better than the
absolute numbers. Nothing is timed at import or at dispatch: the estimate is arithmetic on the
request's shape. Off the CPU the rates say nothing, and "auto" keeps the fixed preference order
of `selfattn.kernels.AUTO_ORDER` instead.

Adding a backend to the model: an entry in RATE_GFLOPS, READ_GBPS, CALL_SECONDS, BACKWARD_FACTOR
and in WORK (which pairs it computes, at which rate, with what extra cost). A backend without
an entry gets no estimate (None), and "auto" takes it only when no estimated backend can serve.
"""

from __future__ import annotations

from collections.abc import Callable

from . import native
from .base import Request
from .sdpa import fused_causal
from .tiled import BLOCK_K, BLOCK_Q, Plan

__all__ = [
    "RATE_GFLOPS",
    "READ_GBPS",
    "CALL_SECONDS",
    "TILE_SECONDS",
    "BACKWARD_FACTOR",
    "BUSY_FACTOR",
    "WORK",
    "CLOSE",
    "visible_pairs",
    "estimate_seconds",
]

RATE_GFLOPS = {
    "sdpa": 60.0,  # full and square-causal forward, L = 4096: 571 ms / 301 ms
    "sdpa_masked": 52.0,  # with a dense attn_mask (window w=256, L=4096): 668 ms for all L² pairs
    "tiled": 52.0,  # full and causal forward, L = 4096, 1024×256 tiles: 604 ms / 340 ms
    "naive": 15.0,  # full forward, L = 4096: 2.3 s (three passes over a materialised L×L matrix)
    "naive_masked": 9.5,  # causal forward, L = 4096: 3.7 s (the mask is one more pass)
    "native": 90.0,  # full and causal forward, L = 4096 (91–96), and windows counted as below
    "flex": 60.0,  # causal forward, compiled, L = 4096
    "flex_window": 9.0,  # window w = 256, L = 8192, per visible pair (its CPU kernel visits more)
}
"""GFLOP/s of computed pairs (2·(D + Dv) flops per query-key pair and head), 1 thread, measured."""

READ_GBPS = {"sdpa": 14.0, "tiled": 15.7, "naive": 14.9, "native": 23.5, "flex": 14.0}
"""GB/s at which each reads K and V, from one decoding step over a cache of 16384 (64 MiB). SDPA
reads them once per query head (a GQA group of G heads reads its K and V G times), the others
once per key/value head (the group's queries are the rows of one matmul)."""

CALL_SECONDS = {"sdpa": 40e-6, "tiled": 200e-6, "naive": 150e-6, "native": 25e-6, "flex": 1.06e-3}
"""Fixed cost of one call (checks, small allocations, dispatch), measured at L = 16."""

TILE_SECONDS = 60e-6
"""The tiled kernel's Python and small-op overhead per visited tile (about a dozen ops), measured."""

BACKWARD_FACTOR = {"sdpa": 3.7, "tiled": 3.3, "naive": 2.4, "native": 3.9, "flex": 3.7}
"""(forward + backward time) / forward time, causal, L = 2048, measured. Naive's forward is slow
(it masks and normalises the whole matrix), its backward is three matmuls. (Flex has no backward
on the CPU; on a GPU the model is not used.)"""

BUSY_FACTOR = {"sdpa": 1.0, "native": 1.0, "flex": 1.0, "naive": 1.5, "tiled": 3.0}
"""How much slower each gets when another busy process shares the cores (`selfattn bench --load 1`),
relative to SDPA. One parallel region per call (SDPA, native, flex's compiled kernel) loses about
the share of the core it gives away; the tiled kernel starts and joins the thread pool per tile and
waits each time for a preempted thread: 1.6× to 13× measured, 3 taken; naive's few big ops, 1.5."""

CLOSE = 1.25
"""Estimates within this factor of the fastest count as close: among them "auto" takes the one whose
busy-core estimate (× BUSY_FACTOR) is smallest — the backend whose worst case is best."""


def visible_pairs(n_q: int, n_k: int, *, causal: bool = False, window: int | None = None) -> int:
    """How many (query, key) pairs the causal/window rule lets through, in O(1).

    Query i stands at position p = i + n_k − n_q and sees min(p + 1, w) keys when p >= 0
    (w = n_k without a window), none when p < 0. Summed over p in closed form."""
    if not causal and window is None:
        return n_q * n_k
    w = n_k if window is None else min(window, n_k)

    def below(n: int) -> int:  # Σ_{p=0}^{n-1} min(p + 1, w)
        n = max(n, 0)
        return n * (n + 1) // 2 if n <= w else w * (w + 1) // 2 + (n - w) * w

    return below(n_k) - below(n_k - n_q)  # positions n_k − n_q … n_k − 1


Work = tuple[int, float, float]
"""(query-key pairs computed, GFLOP/s at which they are computed, extra seconds)."""


def _sdpa_work(r: Request) -> Work:
    if fused_causal(r):
        return visible_pairs(r.Lq, r.Lk, causal=True), RATE_GFLOPS["sdpa"], 0.0
    masked = r.causal or r.window is not None or r.mask is not None
    return r.Lq * r.Lk, RATE_GFLOPS["sdpa_masked" if masked else "sdpa"], 0.0


def _tiled_work(r: Request) -> Work:
    tiles, pairs = Plan.of(r, BLOCK_Q, BLOCK_K).work()
    return pairs, RATE_GFLOPS["tiled"], tiles * TILE_SECONDS


def _naive_work(r: Request) -> Work:
    masked = r.causal or r.window is not None or r.mask is not None
    return r.Lq * r.Lk, RATE_GFLOPS["naive_masked" if masked else "naive"], 0.0


def _native_work(r: Request) -> Work:
    """Visible pairs, plus a window's ragged edge: a query block of native.BLOCK_Q reads about
    BLOCK_Q + w keys per row (measured at the same rate)."""
    if r.window is not None:
        return r.Lq * min(r.Lk, native.BLOCK_Q + r.window), RATE_GFLOPS["native"], 0.0
    return visible_pairs(r.Lq, r.Lk, causal=r.causal), RATE_GFLOPS["native"], 0.0


def _flex_work(r: Request) -> Work:
    pairs = visible_pairs(r.Lq, r.Lk, causal=r.causal, window=r.window)
    return pairs, RATE_GFLOPS["flex_window" if r.window is not None else "flex"], 0.0


WORK: dict[str, Callable[[Request], Work]] = {
    "sdpa": _sdpa_work,
    "tiled": _tiled_work,
    "naive": _naive_work,
    "native": _native_work,
    "flex": _flex_work,
}
"""Per backend: which (query, key) pairs it computes for a request, at which rate, plus extra seconds."""

READS_PER_QUERY_HEAD = frozenset({"sdpa"})
"""Backends that read K and V once per query head (SDPA's CPU kernel), not once per key/value head."""


def estimate_seconds(backend: str, r: Request) -> float | None:
    """Estimated seconds for `backend` to serve `r` on this CPU (see the module docstring); None
    for a backend the model has no entry for."""
    if backend not in WORK:
        return None
    pairs, rate, extra = WORK[backend](r)
    flops_per_pair = 2.0 * r.B * r.Hq * (r.D + r.Dv)
    readers = r.Hq if backend in READS_PER_QUERY_HEAD else r.Hkv
    kv_bytes = r.B * readers * r.Lk * (r.D + r.Dv) * r.k.element_size()
    work = extra + max(pairs * flops_per_pair / (rate * 1e9), kv_bytes / (READ_GBPS[backend] * 1e9))
    if r.needs_grad:
        work *= BACKWARD_FACTOR[backend]
    return CALL_SECONDS[backend] + work
