"""The native kernel as PyTorch operators: `torch.ops.selfattn.native_forward` and `native_backward`.

Registered with `torch.library.define` at import (nothing compiles then: the C++ is built on the
first real call, `native_build.build`), each with a fake implementation (shapes and dtypes only, so
`torch.compile`, `torch.export` and FakeTensor tracing see through it without running it), the
forward with its autograd formula (`native_backward`) and both with a vmap rule. So
`torch.compile(fullgraph=True)` keeps a model that calls `selfattn.attention(..., backend="native")` in
one graph, `torch.export` records the operator, and `torch.library.opcheck` passes.

    native_forward(q, k, v, mask, left, right, scale, softcap, <each per-head feature>, seg_span, seg_ids,
                   blk_kinds, blk_index, blk_partial, block_q, block_k, tiles) -> (out (B, Hq, Lq, Dv), lse (B, Hq, Lq))
    native_backward(dout, q, k, v, lse, delta, <the same arguments after v>) -> (dq, dk, dv)

q, k, v in float32/float64, or bfloat16/float16 for the half-GEMM path (`native.gemm_path`), with unit
stride along D; out has q's dtype, lse the compute dtype (float32 for half inputs), and so do the mask
and the per-head features; the arguments after v are `native.tile_arguments`. Gradients flow to q, k, v
and sinks (a sink's gradient is plain PyTorch here, `scores.sink_grad`); the other features and the mask
are constants.

Refused, each in one sentence: double backward (a gradient of the gradient: the kernel's backward has
no derivative of its own); vmap over the segments. vmap over anything else runs the kernel once per
vmapped entry.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..request import accumulate_dtype
from ..scores import PER_HEAD, sink_grad
from .base import SecondDerivativeRefused, looped_vmap, softmax_delta
from .native_build import build

__all__ = [
    "native_attention",
    "native_forward",
    "native_backward",
    "unit_stride",
    "DOUBLE_BACKWARD",
    "TILE_ARGUMENTS",
    "NativeAttention",
]

DOUBLE_BACKWARD = (
    "double backward through the native attention kernel is not supported (its backward has no derivative); "
    "use backend='naive' for a gradient of a gradient"
)
"""The refusal of a second derivative (RuntimeError)."""


TILE_ARGUMENTS = (
    ("mask", "Tensor?"),
    ("left", "int"),
    ("right", "int"),
    ("scale", "float"),
    ("softcap", "float"),
    *((name, "Tensor?") for name in PER_HEAD),
    ("seg_span", "Tensor?"),
    ("seg_ids", "Tensor?"),
    ("blk_kinds", "Tensor?"),
    ("blk_index", "Tensor?"),
    ("blk_partial", "Tensor?"),
    ("block_q", "int"),
    ("block_k", "int"),
    ("tiles", "bool"),
)
"""The C++ tile's arguments after q, k, v (`native.tile_arguments` builds them), with their schema types: the
one list both operators' schemas are written from. The per-head score features follow the softcap in
`scores.FEATURES` order, as the C++ takes them; tiles: the products on the kernel's own tiles, forward and
backward (bfloat16's on VDPBF16PS where the CPU has AVX512-BF16; float32's on AVX512F; `NativeBackend.runs_tiles`)."""

_TILE = ", ".join(f"{kind} {name}" for name, kind in TILE_ARGUMENTS)
_SINKS_AT = 3 + [name for name, _ in TILE_ARGUMENTS].index("sinks")
_SEGMENTS_AT = tuple(3 + i for i, (name, _) in enumerate(TILE_ARGUMENTS) if name.startswith(("seg_", "blk_")))

# torch.library.define + impl rather than custom_op: custom_op wraps the kernel in torch._disable_dynamo, whose
# first call imports torch._dynamo (the compiler stack, ~1 s), and a plain eager call must not pay for it.
torch.library.define("selfattn::native_forward", f"(Tensor q, Tensor k, Tensor v, {_TILE}) -> (Tensor, Tensor)")
torch.library.define(
    "selfattn::native_backward",
    f"(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor lse, Tensor delta, {_TILE}) -> (Tensor, Tensor, Tensor)",
)


@torch.library.impl("selfattn::native_forward", "cpu")
def _forward_cpu(q: Tensor, k: Tensor, v: Tensor, *args) -> tuple[Tensor, Tensor]:
    """(out, lse) of the native kernel; compiles it on the first call."""
    out, lse = build().forward(q, k, v, *args)
    return out, lse


@torch.library.impl("selfattn::native_backward", "cpu")
def _backward_cpu(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, lse: Tensor, delta: Tensor, *args):
    """(dq, dk, dv) of the native kernel, P recomputed from lse; delta = rowsum(dO ∘ O) − dlse."""
    dq, dk, dv = build().backward(dout, q, k, v, lse, delta, *args)
    return dq, dk, dv


@torch.library.register_fake("selfattn::native_forward")
def _forward_fake(q, k, v, *args):
    B, Hq, Lq, _ = q.shape
    return q.new_empty((B, Hq, Lq, v.shape[3])), q.new_empty((B, Hq, Lq), dtype=accumulate_dtype(q.dtype))


@torch.library.register_fake("selfattn::native_backward")
def _backward_fake(dout, q, k, v, lse, delta, *args):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)  # contiguous, as the kernel's


native_forward = torch.ops.selfattn.native_forward.default
"""native_forward(q, k, v, *TILE_ARGUMENTS) -> (out (B, Hq, Lq, Dv), lse (B, Hq, Lq))."""

native_backward = torch.ops.selfattn.native_backward.default
"""native_backward(dout, q, k, v, lse, delta, *TILE_ARGUMENTS) -> (dq, dk, dv)."""


def unit_stride(t: Tensor) -> Tensor:
    """t laid out as the kernel reads it: unit stride along the last dim, rows at least a row apart."""
    if (t.shape[-1] > 1 and t.stride(-1) != 1) or (t.shape[2] > 1 and t.stride(2) < t.shape[3]):
        t = t.contiguous()
    return t


def _setup_context(ctx, inputs, output):
    tensors = [t if isinstance(t, Tensor) or t is None else None for t in inputs]
    ctx.save_for_backward(*tensors, *output)
    ctx.constants = [None if isinstance(t, Tensor) or t is None else t for t in inputs]


def _backward(ctx, d_out, d_lse):
    *saved, out, lse = ctx.saved_tensors
    q, k, v, *args = (c if t is None else t for t, c in zip(saved, ctx.constants, strict=True))
    d_out = unit_stride(torch.zeros_like(out) if d_out is None else d_out.to(out.dtype))
    delta = softmax_delta(d_out, out, d_lse, lse.dtype).contiguous()
    dq, dk, dv = _NativeBackward.apply(d_out, q, k, v, lse.contiguous(), delta, *args)
    sinks = args[_SINKS_AT - 3]
    d_sinks = sink_grad(sinks, lse, delta) if sinks is not None and ctx.needs_input_grad[_SINKS_AT] else None
    grads = [None] * (3 + len(TILE_ARGUMENTS))
    grads[:3], grads[_SINKS_AT] = (dq, dk, dv), d_sinks
    return tuple(grads)


torch.library.register_autograd("selfattn::native_forward", _backward, setup_context=_setup_context)


class _NativeBackward(SecondDerivativeRefused):
    """`native_backward` as a Function (setup_context, vmap through the operator's rule) whose own derivative
    raises DOUBLE_BACKWARD: what a create_graph=True backward records, under torch.func transforms too."""

    generate_vmap_rule = True
    refusal = DOUBLE_BACKWARD

    @staticmethod
    def forward(*inputs):
        return native_backward(*inputs)


class NativeAttention(torch.autograd.Function):
    """`native_forward` with the same autograd formula, as an autograd.Function with setup_context, so that
    torch.func.grad and vmap(grad) work over it (the operator's own autograd is not a functorch transform's);
    vmap goes through the operators' rules (generate_vmap_rule). torch.compile and torch.export trace it."""

    generate_vmap_rule = True

    @staticmethod
    def forward(*inputs):
        return native_forward(*inputs)

    setup_context = staticmethod(_setup_context)
    backward = staticmethod(_backward)


def native_attention(q: Tensor, k: Tensor, v: Tensor, *tile_arguments) -> tuple[Tensor, Tensor]:
    """(out, lse) of `native_forward`, differentiable under torch.func transforms too (`NativeAttention`);
    while compiling the operator itself (with its registered autograd: the graph records one operator). A plain
    eager call that records no gradient (no grad mode, or no input that requires one) and runs under no
    torch.func transform calls the compiled kernel directly: the Function and the operator's Python layers cost
    about 100 µs a call, more than a decoding step's whole kernel."""
    if torch.compiler.is_compiling():
        return native_forward(q, k, v, *tile_arguments)
    if _plain_eager(q, k, v, tile_arguments):
        return build().forward(q, k, v, *tile_arguments)
    return NativeAttention.apply(q, k, v, *tile_arguments)


def _plain_eager(q: Tensor, k: Tensor, v: Tensor, tile_arguments: tuple) -> bool:
    """No autograd to record, and nothing else that must see the operator: no torch.func transform (vmap, grad,
    jvp), no dispatch mode (FakeTensorMode, FlopCounterMode), no tensor subclass."""
    if torch._C._are_functorch_transforms_active() or torch._C._len_torch_dispatch_stack() > 0:
        return False
    if not all(type(t) is Tensor for t in (q, k, v)):
        return False
    if not torch.is_grad_enabled():
        return True
    return not any(isinstance(t, Tensor) and t.requires_grad for t in (q, k, v, *tile_arguments))


def _refuse_double_backward(ctx, *grads):
    raise RuntimeError(DOUBLE_BACKWARD)


torch.library.register_autograd(
    "selfattn::native_backward", _refuse_double_backward, setup_context=lambda ctx, inputs, output: None
)


def _looped(op, segments_at: tuple[int, ...]):
    """A vmap rule for `op`: one call per vmapped entry, stacked along dim 0 (the kernel has no batch of
    batches). The segment arguments (their positions `segments_at`) are refused: their spans and ids are
    derived per request, outside the operator."""

    def rule(info, in_dims, *args):
        if any(in_dims[i] is not None for i in segments_at):
            raise RuntimeError("vmap over the segments of native attention is not supported; vmap q, k, v instead")
        return looped_vmap(op, info, in_dims, args)

    return rule


torch.library.register_vmap("selfattn::native_forward", _looped(native_forward, _SEGMENTS_AT))
torch.library.register_vmap("selfattn::native_backward", _looped(native_backward, tuple(i + 3 for i in _SEGMENTS_AT)))
