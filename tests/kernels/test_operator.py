"""The native kernel as a PyTorch operator (`kernels.native_op`): opcheck, torch.compile with no graph
break, torch.export, torch.func.vmap, double backward refused by name, deterministic mode. Outputs are
checked against the float64 NumPy reference, gradients against plain PyTorch autograd ("naive")."""

import pytest
import torch

import selfattn
from selfattn import masks
from selfattn.kernels.native_op import DOUBLE_BACKWARD, native_backward, native_forward
from selfattn.scores import ScoreRule
from tests.tolerances import TOL

from ..helpers import make_inputs, reference_of
from ..tolerances import assert_close_to_reference


@pytest.fixture(autouse=True)
def built(native_built):
    return native_built


def _features(Hq=4, L=40):
    """Every score feature at once: an additive mask, sinks (differentiable), ALiBi, non-contiguous segments,
    a two-sided window and a softcap."""
    gen = torch.Generator().manual_seed(1)
    mask = torch.randn(1, 1, L, L, generator=gen, dtype=torch.float64) * 0.5
    sinks = torch.randn(Hq, generator=gen, dtype=torch.float64).requires_grad_()
    alibi = torch.rand(Hq, generator=gen, dtype=torch.float64) * 0.1
    segments = (torch.arange(L)[None] // 7 % 3).to(torch.int64)  # ids 0,1,2,0,1,2: segments come back
    return {"mask": mask, "sinks": sinks, "alibi": alibi, "segments": segments, "window": (9, 4), "softcap": 5.0}


def _grads(out, tensors):
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    return torch.autograd.grad((out * weights).sum(), tensors)


def test_opcheck_forward_and_backward():
    q, k, v = make_inputs(1, 4, 2, 40, 40, 8, 8)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    f = _features()
    rule = ScoreRule(scale=0.3, mask=f["mask"], sinks=f["sinks"], alibi=f["alibi"], segments=f["segments"])
    span, _ = rule.segment_spans
    bm = masks.block_mask(lambda b, h, qi, kv: (qi + kv + h) % 5 != 0, 1, 4, 40, 40)  # a mask_mod's block map
    blocks = (bm.kinds, bm.index, bm.partial)
    args = (f["mask"].expand(1, 4, 40, 40), 9, 4, 0.3, 5.0, f["sinks"], f["alibi"], span, f["segments"], *blocks)
    args += (16, 16, True)
    torch.library.opcheck(native_forward, (q, k, v) + args)
    q, k, v = (t.detach() for t in (q, k, v))
    args = args[:5] + (f["sinks"].detach(),) + args[6:]
    out, lse = native_forward(q, k, v, *args)
    # the backward's own inputs need no gradient: a second derivative is refused (test below)
    torch.library.opcheck(native_backward, (torch.randn_like(out), q, k, v, lse, torch.randn_like(lse)) + args)


def test_segment_spans_match_brute_force():
    segments = torch.tensor([[3, 3, 1, 1, 3, 2, 2, 1], [0, 0, 0, 5, 5, 5, 5, 9]])
    span, contiguous = ScoreRule(scale=1.0, segments=segments).segment_spans
    for b in range(2):
        for i in range(8):
            same = [j for j in range(8) if segments[b, j] == segments[b, i]]
            assert (int(span[0, b, i]), int(span[1, b, i])) == (min(same), max(same) + 1)
    assert contiguous is False  # row 0's ids 3 and 1 come back
    assert ScoreRule(scale=1.0, segments=segments[1:]).segment_spans[1] is True


class _Block(torch.nn.Module):
    """A tiny attention block: projections, attention by `backend`, every feature when `features`."""

    def __init__(self, backend: str, features: dict | None):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = torch.nn.Linear(16, 3 * 16, dtype=torch.float64)
        self.backend, self.features = backend, features or {}

    def forward(self, x):
        q, k, v = self.qkv(x).reshape(x.shape[0], x.shape[1], 3, 4, 4).permute(2, 0, 3, 1, 4)
        causal = not self.features
        return selfattn.attention(q, k, v, causal=causal, backend=self.backend, **self.features)


@pytest.mark.parametrize("with_features", [False, True], ids=["causal", "every-feature"])
def test_compile_fullgraph_has_no_graph_break(with_features):
    features = _features() if with_features else None
    # fullgraph: a graph break raises; inductor for the plain block, aot_eager (dynamo + fake tensors + AOT autograd,
    # no C++ codegen on two shared cores) for the one with every feature
    # compile caches are keyed without the operator's fake implementation: compile afresh
    caches = (
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    )
    with caches[0], caches[1]:
        _check_compiled(features, backend="aot_eager" if features else "inductor")


def _check_compiled(features, backend):
    x = torch.randn(1, 40, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    compiled = torch.compile(_Block("native", features), fullgraph=True, backend=backend)
    eager = _Block("naive", features)
    out = compiled(x)
    expected = eager(x)
    torch.testing.assert_close(out, expected, rtol=TOL["float64_compiled_rel"], atol=TOL["float64_compiled"])
    params = list(compiled.parameters()) + ([features["sinks"]] if features else [])
    expected_params = list(eager.parameters()) + ([features["sinks"]] if features else [])
    for got, want in zip(_grads(out, params), _grads(expected, expected_params), strict=True):
        torch.testing.assert_close(got, want, rtol=TOL["float64_grad_rel"], atol=TOL["float64_grad"])


def test_export_records_the_operator():
    q, k, v = make_inputs(1, 4, 2, 33, 33, 8, 8)

    class Attend(torch.nn.Module):
        def forward(self, q, k, v):
            return selfattn.attention(q, k, v, causal=True, backend="native")

    program = torch.export.export(Attend(), (q, k, v))
    assert "selfattn.native_forward" in str(program.graph)
    assert_close_to_reference(program.module()(q, k, v), reference_of(q, k, v, causal=True)[0])


def test_vmap_runs_the_kernel_per_entry():
    q, k, v = make_inputs(3, 4, 2, 33, 33, 8, 8)
    sinks = torch.linspace(-1, 1, 4, dtype=torch.float64)
    out = torch.func.vmap(lambda a, b, c: selfattn.attention(a, b, c, causal=True, sinks=sinks, backend="native"))(
        q[:, None], k[:, None], v[:, None]
    )
    assert out.shape == (3, 1, 4, 33, 8)
    assert_close_to_reference(out[:, 0], reference_of(q, k, v, causal=True, sinks=sinks)[0])


def test_vmap_over_segments_is_refused_by_name():
    q, k, v = make_inputs(2, 2, 2, 16, 16, 8, 8)
    segments = torch.tensor([[0] * 8 + [1] * 8, [0] * 4 + [1] * 12])
    with pytest.raises(RuntimeError, match="vmap over the segments of native attention is not supported"):
        torch.func.vmap(lambda a, b, c, s: selfattn.attention(a, b, c, segments=s, backend="native"))(
            q[:, None], k[:, None], v[:, None], segments[:, None]
        )


def test_double_backward_is_refused_in_one_sentence():
    q, k, v = make_inputs(1, 2, 2, 24, 24, 8, 8)
    q.requires_grad_()
    out = selfattn.attention(q, k, v, causal=True, backend="native")
    (dq,) = torch.autograd.grad(out.square().sum(), q, create_graph=True)  # the first derivative is fine
    assert_close_to_reference(dq.detach(), _grads_naive(q, k, v))
    with pytest.raises(RuntimeError, match="double backward through the native attention kernel is not supported"):
        dq.sum().backward()
    assert DOUBLE_BACKWARD.count(".") <= 1


def _grads_naive(q, k, v):
    q = q.detach().requires_grad_()
    out = selfattn.attention(q, k, v, causal=True, backend="naive")
    return torch.autograd.grad(out.square().sum(), q)[0].numpy()


def test_deterministic_mode_gives_one_dq_bit_pattern():
    q, k, v = make_inputs(2, 8, 2, 300, 300, 16, 16, dtype=torch.float32)
    threads, mode = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    patterns = set()
    try:
        torch.set_num_threads(2)
        torch.use_deterministic_algorithms(True)
        for _ in range(6):
            qg = q.detach().requires_grad_()
            out = selfattn.kernels.native.NativeBackend(block_q=16, block_k=32).forward(
                selfattn.request.build_request(qg, k, v, causal=True)
            )
            (dq,) = _grads(out.output, [qg])
            patterns.add(dq.numpy().tobytes())
    finally:
        torch.use_deterministic_algorithms(mode)
        torch.set_num_threads(threads)
    assert len(patterns) == 1
    qg = q.detach().double().requires_grad_()
    expected = _grads(selfattn.attention(qg, k.double(), v.double(), causal=True, backend="naive"), [qg])[0]
    torch.testing.assert_close(dq.double(), expected, rtol=TOL["float32_grad_rel"], atol=TOL["float32_grad"])
