"""The benchmark cases: what is measured, at which size, against which backends.

Every case runs each of its backends on the same inputs (seeded), fp32 unless noted. The full
sizes are the ones the tiled kernel's targets are stated at; `quick` sizes finish in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, cast

import torch

from .. import kernels
from ..functional import attention
from ..kernels.cost import request_pairs
from ..request import build_request
from ..scores import FEATURES, PER_HEAD
from . import mask_mod_cases

__all__ = ["Case", "CASES", "EXTRA_CASES", "SEED", "BACKWARD_FLOPS_FACTOR", "select", "split_names", "request_of"]

SEED = 0
"""Inputs are torch.randn from this seed, the same for every backend of a case."""

BACKWARD_FLOPS_FACTOR = 2.5
"""The backward pass is counted as 2.5× the forward's flops (5 matmuls against 2), FlashAttention's convention."""


@dataclass(frozen=True)
class Case:
    """One benchmark: a shape, a masking rule, a pass (forward or forward+backward), and backends."""

    name: str
    title: str
    batch: int
    q_heads: int
    kv_heads: int
    len_q: int
    len_k: int
    head_dim: int
    causal: bool = True
    window: int | tuple[int | None, int | None] | None = None
    features: tuple[str, ...] = ()  # score features with drawn values: a PER_HEAD name, or "packed" (segments)
    backward: bool = False
    backends: tuple[str, ...] = ("sdpa", "native", "flex", "tiled", "auto", "naive")
    dtype: torch.dtype = torch.float32
    rounds: int | None = None  # timed rounds without a warm-up, for calls of many seconds; None: adaptive

    @property
    def shape(self) -> str:
        """B×Hq×Lq×D, plus kv heads and Lk where they differ."""
        text = f"{self.batch}×{self.q_heads}×{self.len_q}×{self.head_dim}"
        if self.kv_heads != self.q_heads:
            text += f", Hkv={self.kv_heads}"
        if self.len_k != self.len_q:
            text += f", Lk={self.len_k}"
        if self.window is not None:
            text += f", w={self.window}"
        if "packed" in self.features:
            text += f", {PACKED_SEGMENTS} segments"
        text += "".join(f", {name}" for name in self.features if name != "packed")
        return text

    @property
    def flops(self) -> float:
        """Useful flops: 4·D per visible (query, key) pair per head (Q Kᵀ and P V), ×3.5 with the backward."""
        one = torch.zeros(())
        q = one.expand(self.batch, self.q_heads, self.len_q, self.head_dim)
        k = one.expand(self.batch, self.kv_heads, self.len_k, self.head_dim)
        pairs = request_pairs(build_request(q, k, k, **self.kwargs())) / self.batch
        forward = 4.0 * self.batch * self.q_heads * pairs * self.head_dim
        return forward * (1 + BACKWARD_FLOPS_FACTOR) if self.backward else forward

    def inputs(self, requires_grad: bool | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (B, Hq, Lq, D), k and v (B, Hkv, Lk, D), from SEED."""
        grad = self.backward if requires_grad is None else requires_grad
        g = torch.Generator().manual_seed(SEED)
        shapes = (
            (self.batch, self.q_heads, self.len_q, self.head_dim),
            (self.batch, self.kv_heads, self.len_k, self.head_dim),
            (self.batch, self.kv_heads, self.len_k, self.head_dim),
        )
        return cast(
            tuple[torch.Tensor, torch.Tensor, torch.Tensor],
            tuple(torch.randn(s, generator=g, dtype=self.dtype).requires_grad_(grad) for s in shapes),
        )

    def kwargs(self) -> dict[str, Any]:
        """The masking arguments of `selfattn.attention` for this case (score features drawn from SEED)."""
        out: dict[str, Any] = {"causal": self.causal, "window": self.window}
        g = torch.Generator().manual_seed(SEED + 2)
        for name in PER_HEAD:  # in FEATURES order: the generator's draws are the same whatever the case
            draw = FEATURES[name].draw
            if name in self.features and draw is not None:
                out[name] = draw(self.q_heads, g, self.dtype)
        if "packed" in self.features:  # PACKED_SEGMENTS documents of equal length, one row
            out["segments"] = (torch.arange(self.len_q) * PACKED_SEGMENTS // self.len_q)[None].expand(self.batch, -1)
        return out


PACKED_SEGMENTS = 8
"""Documents packed into one row in the "packed" cases."""


def _cases() -> tuple[tuple[Case, Case], ...]:
    """(full, quick) pairs."""
    base: dict[str, Any] = dict(batch=1, q_heads=8, kv_heads=8, head_dim=64)
    pairs: tuple[tuple[Case, dict[str, Any]], ...] = (
        (Case("causal_forward", "causal forward", len_q=4096, len_k=4096, **base), dict(len_q=256, len_k=256)),
        (
            Case("forward_backward", "causal forward + backward", len_q=2048, len_k=2048, backward=True, **base),
            dict(len_q=128, len_k=128),
        ),
        (
            Case(
                "sliding_window",
                "sliding window, causal (SDPA gets the equivalent dense mask)",
                len_q=8192,
                len_k=8192,
                window=256,
                **base,
            ),
            dict(len_q=512, len_k=512, window=32),
        ),
        (
            Case(
                "gqa",
                "grouped-query attention, causal forward (8 query heads share 2 key/value heads)",
                len_q=4096,
                len_k=4096,
                **{**base, "kv_heads": 2},
            ),
            dict(len_q=256, len_k=256),
        ),
        (
            Case(
                "decode",
                "one KV-cache decoding step (Lq = 1, causal bottom-right: sees the whole cache)",
                len_q=1,
                len_k=16384,
                **base,
            ),
            dict(len_k=512),
        ),
        (
            Case(
                "decode_gqa",
                "one decoding step, 8 query heads sharing one key/value head (native splits the keys: split-K)",
                len_q=1,
                len_k=16384,
                **{**base, "kv_heads": 1},
            ),
            dict(len_k=4096),
        ),
        (
            Case(
                "memory",
                "causal forward at L = 32768: peak extra memory (naive would need 32 GiB of weights)",
                len_q=32768,
                len_k=32768,
                backends=("sdpa", "native", "tiled", "naive"),
                rounds=1,
                **base,
            ),
            dict(len_q=1024, len_k=1024, rounds=None),
        ),
    )
    features: dict[str, Any] = dict(len_q=4096, len_k=4096, backends=("native", "tiled"), **base)
    pairs += (
        (
            Case(
                "packed",
                "packed sequences, causal: native's segments vs Flex's document block mask vs SDPA's dense mask",
                len_q=8 * 1024,
                len_k=8 * 1024,
                features=("packed",),
                backends=("native", "flex", "sdpa", "auto"),
                **base,
            ),
            dict(len_q=1024, len_k=1024),
        ),
        *(
            (Case(name, f"{FEATURES[name].words}, causal (against causal_forward)", features=(name,), **features), {})
            for name in PER_HEAD
        ),
        (
            Case(
                "two_sided",
                "two-sided window (1024, 1024), not causal: the visible pairs of causal (against causal_forward and "
                "Flex's block mask)",
                causal=False,
                window=(1024, 1024),
                **(features | dict(backends=("native", "flex", "tiled", "auto"))),
            ),
            {},
        ),
    )
    dtypes: dict[str, Any] = dict(backends=("sdpa", "native", "tiled", "auto"), **base)
    pairs += (
        (
            Case(
                "causal_bf16",
                "causal forward in bfloat16 (the dtype CPU inference runs in; % peak of the bf16 GEMM)",
                len_q=4096,
                len_k=4096,
                dtype=torch.bfloat16,
                **dtypes,
            ),
            dict(len_q=256, len_k=256),
        ),
        (
            Case("causal_fp64", "causal forward in float64", len_q=2048, len_k=2048, dtype=torch.float64, **dtypes),
            dict(len_q=256, len_k=256),
        ),
        (
            Case(
                "forward_backward_bf16",
                "causal forward + backward in bfloat16",
                len_q=2048,
                len_k=2048,
                backward=True,
                dtype=torch.bfloat16,
                **dtypes,
            ),
            dict(len_q=128, len_k=128),
        ),
    )
    quick_features = dict(len_q=256, len_k=256)
    return tuple((full, replace(full, **(quick or quick_features))) for full, quick in pairs)


CASES: dict[str, tuple[Case, Case]] = {full.name: (full, quick) for full, quick in _cases()} | mask_mod_cases.cases(
    Case
)
"""name → (full-size case, quick case)."""


EXTRA_CASES = {
    "hf": "a tiny Llama's forward pass, attn_implementation selfattn vs sdpa vs eager (selfattn.bench.hf_case)",
    "ring": "ring attention over 1, 2 and 4 local processes, bytes per rank, memory, scaling to 64 ranks "
    "(selfattn.bench.ring_case)",
    "explain": "selfattn explain vs transformers eager with output_attentions, 512 tokens on the Qwen2.5-0.5B "
    "configuration: time and peak memory (selfattn.bench.explain_case)",
    "gguf": "the first and the second load of SmolLM2-135M's GGUF file: dequantized, then from the cache "
    "(selfattn.bench.gguf_case)",
    "bf16": "explain vs transformers eager, both in bfloat16, 256 tokens on the Qwen2.5-3B configuration with "
    "random weights: peak memory and time (selfattn.bench.bf16_case)",
    "command": "whole commands in fresh processes (explain, --html, heads, --patch, a GGUF file's first and second "
    "command) against transformers' load + one eager forward with output_attentions: time and peak memory, "
    "process start and load included (selfattn.bench.command_case)",
    "attribution": "attribution vs exact patching on SmolLM2's IOI pair: time ratio, top-10 heads' Spearman ρ "
    "(selfattn.bench.attribution_case)",
}
"""Cases that measure a whole model or several processes rather than one attention call; run only when named."""


def split_names(names=None) -> tuple[list[str], list[str]]:
    """(kernel case names, extra case names) of `names` (None: every kernel case, no extra one);
    an unknown name is a ValueError listing them all."""
    if names is None:
        return list(CASES), []
    if isinstance(names, str):
        names = [names]
    unknown = [n for n in names if n not in CASES and n not in EXTRA_CASES]
    if unknown:
        raise ValueError(f"unknown bench case {unknown[0]!r}; choose from {', '.join([*CASES, *EXTRA_CASES])}")
    return [n for n in names if n in CASES], [n for n in names if n in EXTRA_CASES]


def select(names=None, quick: bool = False) -> list[Case]:
    """The kernel cases called `names` (all when None), at full or quick size; unknown names are a ValueError."""
    return [CASES[n][1 if quick else 0] for n in split_names(names)[0]]


def request_of(case: Case, inputs: tuple | None = None):
    """The `selfattn.kernels.Request` that `attention` builds for this case's masking and `inputs`
    (q, k, v; default: `case.inputs()`)."""
    q, k, v = case.inputs() if inputs is None else inputs
    return build_request(q, k, v, **case.kwargs())


def resolve(case: Case, backend: str, q, k, v) -> tuple[str | None, str | None]:
    """(the backend that will run — for "auto", the one it picks — or None, and why not if None)."""
    try:
        return kernels.choose(request_of(case, (q, k, v)), backend).name, None
    except ValueError as refusal:
        return None, str(refusal)


def make_call(case: Case, backend: str, q, k, v):
    """A function that runs the case once with `backend` and returns what it produced
    (the output, and with a backward pass the gradients of q, k, v)."""
    kwargs = case.kwargs()
    if not case.backward:

        def forward_only():
            with torch.no_grad():
                return [attention(q, k, v, backend=backend, **kwargs)]

        return forward_only

    g = torch.Generator().manual_seed(SEED + 1)
    d_out = torch.randn(case.batch, case.q_heads, case.len_q, case.head_dim, generator=g, dtype=case.dtype)

    def forward_backward():
        for t in (q, k, v):
            t.grad = None
        out = attention(q, k, v, backend=backend, **kwargs)
        out.backward(d_out)
        return [out.detach(), q.grad, k.grad, v.grad]

    return forward_backward
