"""The rule behind backend="auto": a small cost model whose constants were measured, not guessed.

For a request that several backends can serve, "auto" estimates each one's seconds as

    seconds ≈ cost.call_seconds + extra                      (tiled: TILE_SECONDS per visited tile)
              + max(pairs · flops per pair / rate,           compute: (pairs, rate, extra) = cost.work(r),
                                                             rate × cost.dtype_speed[dtype] outside float32
                                                             (backward_dtype_speed with gradients)
                    bytes of K and V / cost.read_gbps)       memory: one decoding step is bound by it
    (all but the call cost × cost.backward_factor when the request needs gradients)

where `cost` is the backend's `base.Cost` record, declared next to its `Capabilities` in its own
module, and takes the smallest. What differs between backends is which (query, key) pairs they compute:

    sdpa, causal with Lq = Lk, no mask   the visible half: PyTorch's flash kernel skips blocks
    sdpa, window or Lq ≠ Lk or a mask    all Lq·Lk, through a dense mask (sdpa.RATE_MASKED_GFLOPS)
    tiled                                the tiles it visits (`tiled.Plan.work`): a window of w
                                         costs O(N·w), bottom-right causal skips the hidden blocks
    naive                                all Lq·Lk, and the whole weight matrix in memory

So SDPA wins plain and square-causal attention (its fused kernel has no Python per tile), and
"tiled" wins sliding windows, chunked prefill (causal, Lq < Lk), causal plus a padding mask,
and whatever SDPA refuses (lse, softcap) once past a few dozen positions; naive wins tiny
problems SDPA refuses, and is the only one that returns weights.

The constants are rates and ratios measured on the CPUs this was built on (`scripts/calibrate_native.py`,
`scripts/calibrate_dtypes.py`, `scripts/measure_auto.py`): what each one is, how it was measured, on which CPU, and
what "auto" chose with them is docs/calibration.md. What decides a choice is their ratios, which belong to the
algorithms and carry over between CPUs far better than the absolute numbers. Nothing is timed at import or at
dispatch: the estimate is arithmetic on the request's shape. Off the CPU the rates say nothing, and "auto" keeps a
fixed preference instead (`kernels.dispatch`).

A backend without a `Cost` record gets no estimate (None), and "auto" never takes it (it says so
among its reasons); it can still be asked for by name. How to add a backend: docs/architecture.md.
"""

from __future__ import annotations

from .base import Backend, Request

__all__ = ["CLOSE", "visible_pairs", "request_pairs", "estimate_seconds"]

CLOSE = 1.1
"""Estimates within this factor of the fastest count as close: among them "auto" takes the one whose
busy-core estimate (× Cost.busy_factor) is smallest — the backend whose worst case is best. 1.1, the bound
auto is held to under load: a choice that is no more than this much slower idle, and faster on busy cores
(one decoding step without GQA, Lk = 2048–16384: SDPA 1.05–1.1× faster idle, native 1.1–1.2× faster with one
busy process beside it)."""


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


def request_pairs(r: Request) -> int:
    """The (query, key) pairs `r`'s position rules let through: `visible_pairs` in O(1) for causal and a window
    of w; for a two-sided window or segments, counted per query row in O(B·Lq) (segments: a query row sees at
    most its segment's span). A mask_mod's block mask keeps its share of them (`BlockMask.visible_fraction`: exact
    for a mask_mod alone, its share of the position rule's pairs otherwise)."""
    bm = r.rule.block_mask
    if bm is not None:
        return round(request_pairs(r.with_rule(block_mask=None, mask_mod=None)) * bm.visible_fraction())
    if r.rule.segments is None and not isinstance(r.window, tuple):
        return visible_pairs(r.Lq, r.Lk, causal=r.causal, window=r.window)
    import torch

    from ..scores import values_readable

    left, right = r.rule.bounds or (None, None)
    if not values_readable(r.q, r.rule.segments):  # traced (compile, export): in Python, segments not read (more pairs)
        lo_of = (lambda p: 0) if left is None else (lambda p: max(p - left, 0))
        hi_of = (lambda p: r.Lk) if right is None else (lambda p: min(max(p + right + 1, 0), r.Lk))
        shift = r.Lk - r.Lq
        return r.B * sum(max(hi_of(i + shift) - lo_of(i + shift), 0) for i in range(r.Lq))
    p = torch.arange(r.Lq) + (r.Lk - r.Lq)
    lo = torch.zeros_like(p) if left is None else (p - left).clamp(min=0)
    hi = torch.full_like(p, r.Lk) if right is None else (p + right + 1).clamp(min=0, max=r.Lk)
    if r.rule.segments is None:
        return int((hi - lo).clamp(min=0).sum()) * r.B
    span, _ = r.rule.segment_spans
    span = span.cpu()
    return int((torch.minimum(hi, span[1]) - torch.maximum(lo, span[0])).clamp(min=0).sum())


def estimate_seconds(backend: Backend, r: Request) -> float | None:
    """Estimated seconds for `backend` to serve `r` on this CPU (see the module docstring); None for a
    backend without a `Cost` record."""
    cost = backend.cost
    if cost is None:
        return None
    pairs, rate, extra = cost.work(r)
    flops_per_pair = 2.0 * r.B * r.Hq * (r.D + r.Dv)
    one_head = r.Lk * (r.D + r.Dv) * r.k.element_size()  # one kv head's K and V
    read = r.B * r.Hkv * one_head / (cost.read_gbps * 1e9)
    if cost.reads_per_query_head:  # a GQA group's further heads read their kv head again: cached, or not
        again = cost.cached_read_gbps if one_head <= cost.cached_kv_bytes else cost.read_gbps
        read += r.B * (r.Hq - r.Hkv) * one_head / (again * 1e9)
    rate *= cost.speed(r.q.dtype, backward=r.needs_grad)
    work = extra + max(pairs * flops_per_pair / (rate * 1e9), read)
    if r.needs_grad:
        work *= cost.backward_factor
    return cost.call_seconds + work
