"""A bounded cache of traces, so that one change costs one forward pass.

    cache = TraceCache(max_bytes=128 << 20)
    trace = cache.get((text, intervention), lambda: capture(...))

The web app explains the same text many times: the page shows it, then each intervention is compared
with the text without it (`experiment.compare` needs that baseline), the page asks for its baseline's
arrays, and for another layer's arrays, and for a head search. Each of these needs a trace the server
has already computed. The server keeps the last traces by (text, intervention) here, so a change of
intervention runs one forward pass (the changed one) and everything else is read back.

Bounded: at most `max_entries` traces and `max_bytes` of their tensors (a trace larger than that is
computed and not kept); the least recently used goes first. Thread-safe, and two threads asking for the
same key at once compute it once (the second waits for the first). A model is assumed not to change
while a cache is in use: the server's model never does; a library caller who trains between calls
passes no cache (the default).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import torch

from ..trace_types import ModelTrace

T = TypeVar("T")

__all__ = ["TraceCache", "trace_bytes"]


def trace_bytes(trace: ModelTrace) -> int:
    """The bytes of every tensor a trace holds (the token strings are not counted)."""
    tensors = [trace.token_ids] + ([trace.logits] if trace.logits is not None else [])
    for layer in trace.layers:
        tensors += [layer.x, layer.q, layer.k, layer.v, layer.visible, layer.lse, layer.attn_out, layer.output]
        tensors += [c.visible for c in layer.changed.values()]
    digests = sum(layer.digest.nbytes for layer in trace.layers if layer.digest is not None)
    return digests + sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


class _Slot:
    def __init__(self):
        self.done = threading.Event()
        self.trace: Any = None  # a ModelTrace, or another kept value (the server's experiment dicts)
        self.bytes = 0


class TraceCache:
    """Traces by key (the server's: (text, Intervention)), least recently used evicted first."""

    def __init__(self, *, max_bytes: int, max_entries: int = 64, size: Callable[[Any], int] = trace_bytes):
        """size(value) -> bytes: what one kept value costs (default `trace_bytes`; the server also keeps the
        results of its experiments, small dicts, in one of these with a size of their own)."""
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
            raise ValueError(f"max_bytes must be an int >= 0, got {max_bytes!r}")
        if not isinstance(max_entries, int) or isinstance(max_entries, bool) or max_entries < 1:
            raise ValueError(f"max_entries must be an int >= 1, got {max_entries!r}")
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.size = size
        self.computed = 0
        """How many traces were computed (forward passes run) through this cache."""
        self._slots: OrderedDict[Hashable, _Slot] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The trace of `key`: kept, being computed by another thread (waited for), or `compute()`d now."""
        while True:
            with self._lock:
                slot = self._slots.get(key)
                mine = slot is None
                if mine:
                    slot = self._slots[key] = _Slot()
                else:
                    self._slots.move_to_end(key)
            assert slot is not None  # found, or made just above
            if mine:
                return self._fill(key, slot, compute)
            slot.done.wait()
            if slot.trace is not None:
                return slot.trace
            # the thread computing it failed (and removed the slot): try again, raising our own error

    def _fill(self, key: Hashable, slot: _Slot, compute: Callable[[], T]) -> T:
        try:
            trace = compute()
        except BaseException:
            with self._lock:
                self._slots.pop(key, None)
            slot.done.set()
            raise
        slot.trace, slot.bytes = trace, self.size(trace)
        with self._lock:
            self.computed += 1
            if slot.bytes > self.max_bytes:
                self._slots.pop(key, None)
            self._evict()
        slot.done.set()
        return trace

    def _evict(self) -> None:
        """Drop the least recently used finished traces until both bounds hold (under the lock)."""
        while len(self._slots) > self.max_entries or self._held() > self.max_bytes:
            old = next((k for k, s in self._slots.items() if s.done.is_set() or s.trace is not None), None)
            if old is None:
                return
            self._slots.pop(old)

    def _held(self) -> int:
        return sum(s.bytes for s in self._slots.values())

    def __len__(self) -> int:
        with self._lock:
            return sum(s.trace is not None for s in self._slots.values())
