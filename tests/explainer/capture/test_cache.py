"""The server's TraceCache: bounded by entries and bytes, least recently used first, one computation per key."""

from __future__ import annotations

import threading

import pytest

from selfattn.explainer import tracing
from selfattn.explainer.capture.cache import TraceCache, trace_bytes

TEXT = "一只蓝色怪兽走进森林"


@pytest.fixture(scope="module")
def trace(tiny):
    return tracing.trace(tiny, TEXT)


def test_trace_bytes_counts_every_tensor(trace):
    layer = trace.layers[0]
    per_layer = sum(
        t.numel() * t.element_size()
        for t in (layer.x, layer.q, layer.k, layer.v, layer.visible, layer.lse, layer.attn_out, layer.output)
    )
    d = layer.digest  # the summaries and thumbnails read at the capture point
    per_layer += sum(t.numel() * t.element_size() for t in (d.means, d.rows, d.thumbnails))
    logits = trace.logits.numel() * trace.logits.element_size()
    ids = trace.token_ids.numel() * trace.token_ids.element_size()
    assert trace_bytes(trace) == per_layer * trace.n_layers + logits + ids  # both layers have the same shapes


def test_kept_traces_are_read_back_and_the_oldest_go_first(trace):
    cache = TraceCache(max_bytes=10 * trace_bytes(trace), max_entries=2)
    calls = []

    def compute(key):
        return lambda: calls.append(key) or trace

    for key in ("a", "b", "a", "c", "a", "b"):
        assert cache.get(key, compute(key)) is trace
    assert calls == ["a", "b", "c", "b"]  # "a" stayed (used last), "b" was evicted by "c"
    assert cache.computed == 4 and len(cache) == 2


def test_a_trace_over_the_byte_bound_is_not_kept(trace):
    cache = TraceCache(max_bytes=trace_bytes(trace) - 1)
    assert cache.get("a", lambda: trace) is trace and len(cache) == 0
    cache = TraceCache(max_bytes=trace_bytes(trace) * 3 // 2)
    cache.get("a", lambda: trace)
    cache.get("b", lambda: trace)
    assert len(cache) == 1  # two would exceed the bound


def test_one_computation_per_key_at_once_and_errors_are_not_kept(trace):
    cache = TraceCache(max_bytes=1 << 30)
    started, release = threading.Event(), threading.Event()
    calls = []

    def slow():
        calls.append(1)
        started.set()
        release.wait(10)
        return trace

    results = []
    first = threading.Thread(target=lambda: results.append(cache.get("k", slow)))
    first.start()
    started.wait(10)
    second = threading.Thread(target=lambda: results.append(cache.get("k", slow)))
    second.start()
    release.set()
    first.join(10)
    second.join(10)
    assert results == [trace, trace] and calls == [1]

    def broken():
        raise ValueError("refused text")

    for _ in range(2):  # a refusal is raised each time, never kept
        with pytest.raises(ValueError, match="refused text"):
            cache.get("bad", broken)
    assert len(cache) == 1


@pytest.mark.parametrize("kwargs", [dict(max_bytes=-1), dict(max_bytes=1.5), dict(max_bytes=1, max_entries=0)])
def test_bounds_are_checked(kwargs):
    with pytest.raises(ValueError):
        TraceCache(**kwargs)
