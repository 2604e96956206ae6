"""The native kernel as PyTorch operators: `torch.ops.selfattn.native_forward` and `native_backward`.

Registered with `torch.library.custom_op` at import (nothing compiles then: the C++ is built on the
first real call, `native_build.build`), each with a fake implementation (shapes and dtypes only, so
`torch.compile`, `torch.export` and FakeTensor tracing see through it without running it), the
forward with its autograd formula (`native_backward`) and both with a vmap rule. So
`torch.compile(fullgraph=True)` keeps a model that calls `selfattn.attention(..., backend="native")` in
one graph, `torch.export` records the operator, and `torch.library.opcheck` passes.

    native_forward(q, k, v, mask, left, right, scale, softcap, sinks, alibi, seg_span, seg_ids,
                   block_q, block_k) -> (out (B, Hq, Lq, Dv), lse (B, Hq, Lq))
    native_backward(dout, q, k, v, lse, delta, <the same arguments after v>) -> (dq, dk, dv)

q, k, v in float32/float64, or bfloat16/float16 for the half-GEMM path (`native.gemm_path`), with unit
stride along D; out has q's dtype, lse the compute dtype (float32 for half inputs), and so do the mask,
sinks and alibi; the arguments after v are `native.tile_arguments`. Gradients flow to q, k, v and sinks
(a sink's gradient is plain PyTorch here, `scores.sink_grad`); mask, alibi and segments are constants.

Refused, each in one sentence: double backward (a gradient of the gradient: the kernel's backward has
no derivative of its own); vmap over the segments. vmap over anything else runs the kernel once per
vmapped entry.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..request import accumulate_dtype
from ..scores import sink_grad
from .base import softmax_delta
from .native_build import build

__all__ = ["native_forward", "native_backward", "unit_stride", "DOUBLE_BACKWARD"]

DOUBLE_BACKWARD = (
    "double backward through the native attention kernel is not supported (its backward has no derivative); "
    "use backend='naive' or 'tiled' for a gradient of a gradient"
)
"""The refusal of a second derivative (RuntimeError)."""


@torch.library.custom_op("selfattn::native_forward", mutates_args=(), device_types="cpu")
def native_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    left: int,
    right: int,
    scale: float,
    softcap: float,
    sinks: Tensor | None,
    alibi: Tensor | None,
    seg_span: Tensor | None,
    seg_ids: Tensor | None,
    block_q: int,
    block_k: int,
) -> tuple[Tensor, Tensor]:
    """(out, lse) of the native kernel; compiles it on the first call."""
    out, lse = build().forward(
        q, k, v, mask, left, right, scale, softcap, sinks, alibi, seg_span, seg_ids, block_q, block_k
    )
    return out, lse


@native_forward.register_fake
def _forward_fake(q, k, v, mask, left, right, scale, softcap, sinks, alibi, seg_span, seg_ids, block_q, block_k):
    B, Hq, Lq, _ = q.shape
    return q.new_empty((B, Hq, Lq, v.shape[3])), q.new_empty((B, Hq, Lq), dtype=accumulate_dtype(q.dtype))


@torch.library.custom_op("selfattn::native_backward", mutates_args=(), device_types="cpu")
def native_backward(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lse: Tensor,
    delta: Tensor,
    mask: Tensor | None,
    left: int,
    right: int,
    scale: float,
    softcap: float,
    sinks: Tensor | None,
    alibi: Tensor | None,
    seg_span: Tensor | None,
    seg_ids: Tensor | None,
    block_q: int,
    block_k: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) of the native kernel, P recomputed from lse; delta = rowsum(dO ∘ O) − dlse."""
    args = (mask, left, right, scale, softcap, sinks, alibi, seg_span, seg_ids, block_q, block_k)
    dq, dk, dv = build().backward(dout, q, k, v, lse, delta, *args)
    return dq, dk, dv


@native_backward.register_fake
def _backward_fake(dout, q, k, v, lse, delta, *args):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)  # contiguous, as the kernel's


def unit_stride(t: Tensor) -> Tensor:
    """t laid out as the kernel reads it: unit stride along the last dim, rows at least a row apart."""
    if (t.shape[-1] > 1 and t.stride(-1) != 1) or (t.shape[2] > 1 and t.stride(2) < t.shape[3]):
        t = t.contiguous()
    return t


def _setup_context(ctx, inputs, output):
    q, k, v, mask, left, right, scale, softcap, sinks, alibi, seg_span, seg_ids, block_q, block_k = inputs
    ctx.save_for_backward(q, k, v, mask, sinks, alibi, seg_span, seg_ids, *output)
    ctx.constants = (left, right, scale, softcap, block_q, block_k)


def _backward(ctx, d_out, d_lse):
    q, k, v, mask, sinks, alibi, seg_span, seg_ids, out, lse = ctx.saved_tensors
    left, right, scale, softcap, block_q, block_k = ctx.constants
    d_out = unit_stride(torch.zeros_like(out) if d_out is None else d_out.to(out.dtype))
    delta = softmax_delta(d_out, out, d_lse, lse.dtype).contiguous()
    args = (mask, left, right, scale, softcap, sinks, alibi, seg_span, seg_ids, block_q, block_k)
    dq, dk, dv = native_backward(d_out, q, k, v, lse.contiguous(), delta, *args)
    d_sinks = sink_grad(sinks, lse, delta) if sinks is not None and ctx.needs_input_grad[8] else None
    return (dq, dk, dv) + (None,) * 5 + (d_sinks,) + (None,) * 5


native_forward.register_autograd(_backward, setup_context=_setup_context)


def _refuse_double_backward(ctx, *grads):
    raise RuntimeError(DOUBLE_BACKWARD)


native_backward.register_autograd(_refuse_double_backward, setup_context=lambda ctx, inputs, output: None)


def _looped(op, segments_at: tuple[int, ...]):
    """A vmap rule for `op`: one call per vmapped entry, stacked along dim 0 (the kernel has no batch of
    batches). The segment arguments (their positions `segments_at`) are refused: their spans and ids are
    derived per request, outside the operator."""

    def rule(info, in_dims, *args):
        if any(in_dims[i] is not None for i in segments_at):
            raise RuntimeError("vmap over the segments of native attention is not supported; vmap q, k, v instead")
        moved = [a if d is None else a.movedim(d, 0) for a, d in zip(args, in_dims, strict=True)]
        results = [
            op(*(a if d is None else a[i] for a, d in zip(moved, in_dims, strict=True))) for i in range(info.batch_size)
        ]
        stacked = tuple(torch.stack(parts) for parts in zip(*results, strict=True))
        return stacked, (0,) * len(stacked)

    return rule


native_forward.register_vmap(_looped(native_forward, (10, 11)))
native_backward.register_vmap(_looped(native_backward, (13, 14)))
