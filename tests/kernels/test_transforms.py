"""Torch transforms over `attention` (issue 28): torch.compile(fullgraph=True), torch.export, torch.func.vmap,
torch.func.grad (and vmap of it), double backward — × every backend that runs on a CPU × the score features.
Each cell equals the eager call (tests/tolerances.py) or raises a named error at the call.

Shapes are tiny (B=2, Hq=2, Hkv=1, L=6, D=4, float64) and the compiles grouped: one graph per backend holds
every feature it serves (a compile costs seconds on a shared CPU). flex refuses these lengths on the CPU by
name (it needs L >= 128 there), so its cells are refusals, as is every feature a backend lacks."""

from __future__ import annotations

import re

import pytest
import torch
from torch.func import grad, vmap

import selfattn

from ..helpers import make_inputs
from ..tolerances import TOL

BACKENDS = ["auto", "naive", "sdpa", "tiled", "native", "flex"]
B, HQ, HKV, L, D = 2, 2, 1, 6, 4
FEATURES = {
    "plain": {},
    "causal": dict(causal=True),
    "window": dict(window=(3, 2)),
    "softcap": dict(softcap=2.0, causal=True),
    "sinks": dict(sinks=torch.tensor([0.5, -1.0], dtype=torch.float64)),
    "alibi": dict(alibi=torch.tensor([0.25, 0.5], dtype=torch.float64), causal=True),
    "segments": dict(segments=torch.tensor([[0, 0, 0, 1, 1, 1], [4, 4, 4, 4, 4, 4]])),
}
DOUBLE_BACKWARD = r"double backward through the \w+ attention kernel is not supported"
SDPA_DOUBLE_BACKWARD = r"derivative for aten::_scaled_dot_product_\w+_backward is not implemented"


def _skip_unbuilt(backend):
    if backend == "native":
        from selfattn.kernels import native_build

        if native_build.unavailable_reason() is not None:
            pytest.skip(native_build.unavailable_reason())


def _inputs(seed=0):
    return make_inputs(B, HQ, HKV, L, L, D, dtype=torch.float64, seed=seed)


def _call(backend, feature):
    kwargs = FEATURES[feature]
    return lambda q, k, v: selfattn.attention(q, k, v, backend=backend, **kwargs)


def refusal(backend, feature) -> str | None:
    """The eager call's refusal (its ValueError's message), or None when the backend serves the cell."""
    try:
        _call(backend, feature)(*_inputs())
    except ValueError as error:
        assert f"backend '{backend}' cannot serve this request" in str(error)
        return str(error)
    return None


def _refused(backend) -> str:
    return re.escape(f"backend '{backend}' cannot serve this request")


def _close(got, want, tol):
    assert max(float((g - w).abs().max()) for g, w in zip(got, want, strict=True)) <= tol


@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_vmap(backend, feature):
    _skip_unbuilt(backend)
    f = _call(backend, feature)
    qs, ks, vs = (torch.stack(parts) for parts in zip(_inputs(0), _inputs(1), _inputs(2), strict=True))
    why = refusal(backend, feature)
    if why is not None:
        with pytest.raises(ValueError, match=re.escape(why)):
            vmap(f)(qs, ks, vs)
        return
    eager = [f(qs[i], ks[i], vs[i]) for i in range(3)]
    _close(vmap(f)(qs, ks, vs), eager, TOL["float64"])


def _loss(f, w):
    return lambda q, k, v: (f(q, k, v) * w).sum()


@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_func_grad_and_vmap_of_it(backend, feature):
    """torch.func.grad against the eager autograd.grad of the same backend; vmap(grad) against a loop."""
    _skip_unbuilt(backend)
    f = _call(backend, feature)
    q, k, v = _inputs()
    w = torch.randn(B, HQ, L, D, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    loss = _loss(f, w)
    why = refusal(backend, feature)
    if why is not None:  # (with a gradient asked for, the refusal may give one reason more)
        with pytest.raises(ValueError, match=_refused(backend)):
            grad(loss, argnums=(0, 1, 2))(q, k, v)
        return
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    eager = torch.autograd.grad(loss(*leaves), leaves)
    _close(grad(loss, argnums=(0, 1, 2))(q, k, v), eager, TOL["float64_grad"])
    qs = torch.stack([q, q * 0.5, -q])
    per_sample = vmap(grad(loss), in_dims=(0, None, None))(qs, k, v)
    _close(per_sample, [grad(loss)(qs[i], k, v) for i in range(3)], TOL["float64_grad"])


@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_double_backward(backend, feature):
    """A gradient of a gradient: naive's against a central difference of its first gradient (float64); the
    fused kernels refuse it by name when it is asked — never a gradient cut off from the graph."""
    _skip_unbuilt(backend)
    f = _call(backend, feature)
    q, k, v = _inputs()
    g = torch.Generator().manual_seed(11)
    w, w2, direction = (torch.randn(B, HQ, L, D, dtype=torch.float64, generator=g) for _ in range(3))
    why = refusal(backend, feature)
    if why is not None:
        with pytest.raises(ValueError, match=_refused(backend)):
            f(q.requires_grad_(), k, v)
        return

    def first(q):
        q = q.detach().requires_grad_()
        (dq,) = torch.autograd.grad((f(q, k, v) * w).sum(), q, create_graph=True)
        return q, dq

    leaf, dq = first(q)
    served_by = backend
    if backend == "auto":  # auto's refusal is the one of the kernel it weighed fastest for this form
        served_by = selfattn.kernels.explain(dict(q=leaf, k=k, v=v, **FEATURES[feature]))["choice"]
    if served_by in ("tiled", "native", "sdpa"):
        expected = SDPA_DOUBLE_BACKWARD if served_by == "sdpa" else DOUBLE_BACKWARD
        with pytest.raises(RuntimeError, match=expected):
            torch.autograd.grad((dq * w2).sum(), leaf)
        return
    (second,) = torch.autograd.grad((dq * w2).sum(), leaf)
    eps = 1e-5
    ahead, behind = (first(q + s * eps * direction)[1] for s in (1, -1))
    difference = ((ahead - behind) * w2).sum() / (2 * eps)
    assert abs(float((second * direction).sum() - difference.detach())) <= TOL["float64_central_difference"]


def _served(backend):
    return [name for name in FEATURES if refusal(backend, name) is None]


def _all_features(backend, names):
    def run(q, k, v):
        return tuple(selfattn.attention(q, k, v, backend=backend, **FEATURES[n]) for n in names)

    return run


@pytest.mark.parametrize("backend", BACKENDS)
def test_compile_fullgraph(backend):
    """One graph (fullgraph=True) holding every feature the backend serves, each equal to eager; a refused
    feature is refused by name under compile too."""
    _skip_unbuilt(backend)
    names = _served(backend)
    q, k, v = _inputs()
    if names:
        torch._dynamo.reset()
        compiled = torch.compile(_all_features(backend, names), fullgraph=True, backend="eager")
        _close(compiled(q, k, v), _all_features(backend, names)(q, k, v), TOL["float64"])
    refused = [name for name in FEATURES if name not in names]
    if refused:
        why = refusal(backend, refused[0])
        compiled = torch.compile(_call(backend, refused[0]), fullgraph=True, backend="eager")
        with pytest.raises(Exception, match=re.escape(why.split(":")[0])):
            compiled(q, k, v)


class _Module(torch.nn.Module):
    def __init__(self, run):
        super().__init__()
        self.run = run

    def forward(self, q, k, v):
        return self.run(q, k, v)


@pytest.mark.parametrize("backend", BACKENDS)
def test_export(backend):
    """torch.export of every feature the backend serves, in one program, each equal to eager."""
    _skip_unbuilt(backend)
    names = _served(backend)
    if not names:
        pytest.skip(f"backend {backend!r} serves none of these cells on this CPU (each refusal is named above)")
    q, k, v = _inputs()
    run = _all_features(backend, names)
    program = torch.export.export(_Module(run), (q, k, v))
    _close(program.module()(q, k, v), run(q, k, v), TOL["float64"])
