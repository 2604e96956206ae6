"""Backend "native" (the compiled CPU kernel) against the float64 reference: the feature × dtype
matrix of test_attention, awkward lengths and head dims, masks, poisoned padding, fully masked
rows, gradients against naive autograd, gradcheck; and how it builds (never at import)."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import selfattn
from selfattn.functional import build_request
from selfattn.kernels import native
from selfattn.kernels.naive import NaiveBackend
from selfattn.kernels.native import NativeBackend

from ..helpers import make_inputs, reference_of
from ..test_attention import DTYPES, FEATURES, SHAPES, resolve
from ..tolerances import assert_close_to_reference, max_error

SMALL = NativeBackend(block_q=16, block_k=32)
"""Small blocks, so that lengths like 113 span many full, partial and ragged tiles and tasks."""

BACKENDS = {"small-blocks": SMALL, "default-blocks": NativeBackend()}

LENGTHS = [(1, 1), (3, 3), (15, 15), (113, 113), (1023, 1023), (15, 40), (40, 15), (1, 113), (113, 1)]

RULES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(window=5),
    "causal-window": dict(causal=True, window=17),
}


@pytest.fixture(scope="session", autouse=True)
def built():
    """Build the kernel once per session (it is cached on disk); skip only if there is no compiler."""
    missing = native._missing_tools()
    if missing is not None and not native.is_built():
        pytest.skip(f"the native kernel cannot be built here: {missing}")
    return native.build()


def inputs(B, Hq, Hkv, Lq, Lk, D, Dv, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, Lq, D, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(B, Hkv, Lk, D, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(B, Hkv, Lk, Dv, generator=g, dtype=torch.float64).to(dtype)
    return q, k, v


def run(backend, q, k, v, **kwargs):
    return backend.forward(build_request(q, k, v, return_lse=True, **kwargs))


def reference_lse(q, k, v, mask=None, **kwargs):
    return reference_of(q, k, v, **dict(kwargs, mask=mask))


def assert_lse_equal(lse, ref_lse, tol):
    got = lse.double().numpy()
    finite = np.isfinite(ref_lse)
    assert (np.isneginf(got) == ~finite).all(), "lse must be −inf exactly where a row sees nothing"
    assert np.abs(got[finite] - ref_lse[finite]).max(initial=0.0) <= tol


@pytest.mark.parametrize("blocks", sorted(BACKENDS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("feature", sorted(FEATURES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_feature_dtype_matrix_matches_reference(blocks, dtype, feature, shape):
    q, k, v = make_inputs(*shape, dtype=dtype)
    f = resolve(FEATURES[feature], shape, dtype)
    res = BACKENDS[blocks].forward(build_request(q, k, v, return_lse=True, **f))
    assert res.output.dtype == dtype and res.output.shape == (*q.shape[:3], v.shape[-1])
    ref_out, _, ref_lse = reference_of(q, k, v, **f)
    naive = NaiveBackend().forward(build_request(q, k, v, return_lse=True, **f))
    assert_close_to_reference(res.output, ref_out, naive.output, dtype=dtype)
    finite = np.isfinite(ref_lse)
    assert (np.isneginf(res.lse.double().numpy()) == ~finite).all()
    assert max_error(res.lse.double().numpy()[finite], ref_lse[finite]) <= \
        2 * max_error(naive.lse.double().numpy()[finite], ref_lse[finite]) + 1e-5


@pytest.mark.parametrize("D", [1, 3, 64, 80])
@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("lengths", LENGTHS, ids=lambda t: f"{t[0]}x{t[1]}")
def test_awkward_lengths_and_head_dims(lengths, rule, D):
    Lq, Lk = lengths
    heads = (1, 1) if Lq * Lk > 10_000 else (4, 2)
    q, k, v = inputs(1, *heads, Lq, Lk, D, max(1, D - 1))
    ref_out, _, ref_lse = reference_lse(q, k, v, **RULES[rule])
    for backend in (SMALL, NativeBackend()):
        res = run(backend, q, k, v, **RULES[rule])
        assert_close_to_reference(res.output, ref_out)
        assert_lse_equal(res.lse, ref_lse, 1e-12)


def _masks(B, Hq, Lq, Lk):
    g = torch.Generator().manual_seed(4)
    bool_full = torch.rand(B, Hq, Lq, Lk, generator=g) > 0.4
    bool_full[:, :, 2] = False                                      # a row that sees nothing
    additive = torch.randn(1, Hq, Lq, Lk, generator=g, dtype=torch.float64)
    additive[torch.rand(additive.shape, generator=g) > 0.8] = float("-inf")
    return {
        "bool-full": bool_full,
        "bool-2d": torch.rand(Lq, Lk, generator=g) > 0.5,
        "key-padding": (torch.arange(Lk)[None] < torch.tensor([Lk, Lk // 3])[:, None])[:, None, None, :],
        "per-head-query": torch.rand(1, Hq, Lq, 1, generator=g) > 0.2,
        "additive": additive,
        "additive-keys": torch.randn(Lk, generator=g, dtype=torch.float64),
        "transposed": (torch.rand(Lk, Lq, generator=g) > 0.5).T,   # strides not in the usual order
    }


@pytest.mark.parametrize("mask_kind", sorted(_masks(2, 4, 3, 3)))
@pytest.mark.parametrize("rule", ["plain", "causal-window"])
def test_user_masks_through_strides(mask_kind, rule):
    B, Hq, Hkv, Lq, Lk = 2, 4, 2, 45, 37
    q, k, v = inputs(B, Hq, Hkv, Lq, Lk, 8, 8)
    mask = _masks(B, Hq, Lq, Lk)[mask_kind]
    res = run(SMALL, q, k, v, mask=mask, **RULES[rule])
    ref_out, _, ref_lse = reference_lse(q, k, v, mask=mask, **RULES[rule])
    assert_close_to_reference(res.output, ref_out)
    assert_lse_equal(res.lse, ref_lse, 1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("rule", sorted(RULES))
def test_low_precision_within_twice_the_naive_error(dtype, rule):
    q, k, v = inputs(1, 4, 2, 113, 97, 32, 32, dtype=dtype, seed=2)
    res = run(SMALL, q, k, v, softcap=5.0, **RULES[rule])
    naive = run(NaiveBackend(), q, k, v, softcap=5.0, **RULES[rule])
    ref_out, _, ref_lse = reference_lse(q, k, v, softcap=5.0, **RULES[rule])
    assert res.output.dtype == dtype and res.lse.dtype == torch.float32
    assert_close_to_reference(res.output, ref_out, naive.output, dtype=dtype)


@pytest.mark.parametrize("kwargs", [dict(causal=True), dict(causal=True, window=300), dict()], ids=str)
def test_many_tasks_with_default_blocks(kwargs):
    q, k, v = inputs(2, 4, 2, 1100, 1100, 16, 16, dtype=torch.float32)
    naive = NaiveBackend().forward(build_request(q, k, v, **kwargs))
    ref_out, _, _ = reference_lse(q, k, v, **kwargs)
    assert_close_to_reference(run(NativeBackend(), q, k, v, **kwargs).output, ref_out, naive.output)


def _poisoned(t: torch.Tensor, pad: int) -> torch.Tensor:
    """t as a view into a bigger buffer whose extra positions and features are NaN."""
    B, H, L, D = t.shape
    buffer = torch.full((B, H, L + pad, D + 3), float("nan"), dtype=t.dtype)
    buffer[:, :, :L, :D] = t
    return buffer[:, :, :L, :D]


@pytest.mark.parametrize("rule", sorted(RULES))
def test_padding_of_partial_blocks_is_never_read(rule):
    q, k, v = inputs(1, 4, 2, 113, 71, 8, 8)
    pq, pk, pv = (_poisoned(t, pad=200) for t in (q, k, v))
    mask = torch.rand(113, 71, generator=torch.Generator().manual_seed(0)) > 0.3
    ref_out, _, _ = reference_lse(q, k, v, mask=mask, **RULES[rule])
    for backend in BACKENDS.values():
        res = run(backend, pq, pk, pv, mask=mask, **RULES[rule])
        assert_close_to_reference(res.output, ref_out)
    pq, pk, pv = (t.requires_grad_() for t in (pq, pk, pv))
    out = run(SMALL, pq, pk, pv, **RULES[rule]).output
    grads = torch.autograd.grad(out.square().sum(), (pq, pk, pv))
    assert all(torch.isfinite(g).all() for g in grads)


def test_keys_no_query_may_see_are_never_read():
    # a window of 8 over 200 positions, decoding the last 16: keys before 200 − 16 − 8 are hidden from
    # every query; NaN there must not reach the output (the kernel never reads them)
    q, k, v = inputs(1, 2, 1, 16, 200, 8, 8)
    k_bad, v_bad = k.clone(), v.clone()
    k_bad[:, :, :170] = float("nan")
    v_bad[:, :, :170] = float("nan")
    ref_out, _, _ = reference_lse(q, k, v, causal=True, window=8)
    for backend in BACKENDS.values():
        assert_close_to_reference(run(backend, q, k_bad, v_bad, causal=True, window=8).output, ref_out)


def test_non_contiguous_inputs():
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in inputs(2, 4, 2, 50, 50, 8, 8))
    assert not q.is_contiguous()
    assert_close_to_reference(run(SMALL, q, k, v, causal=True).output, reference_lse(q, k, v, causal=True)[0])
    q1, k1, v1 = (t[..., ::2] for t in inputs(1, 2, 2, 9, 9, 8, 8))   # stride 2 along D: copied once
    assert_close_to_reference(run(SMALL, q1, k1, v1).output, reference_lse(q1, k1, v1)[0])


def test_fully_masked_rows_give_zeros_lse_minus_inf_and_finite_gradients():
    q, k, v = (t.requires_grad_() for t in inputs(1, 2, 1, 40, 20, 8, 8))
    mask = torch.ones(40, 20, dtype=torch.bool)
    mask[[0, 17, 39]] = False
    res = run(SMALL, q, k, v, mask=mask, causal=True)          # causal, Lq > Lk: rows 0..19 see nothing too
    assert (res.output[:, :, :20] == 0).all() and (res.output[:, :, [39]] == 0).all()
    assert torch.isneginf(res.lse[:, :, :20]).all() and torch.isfinite(res.lse[:, :, 20:39]).all()
    grads = torch.autograd.grad(res.output.sum(), (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)
    assert (grads[0][:, :, :20] == 0).all()


def test_empty_query_and_key_lengths():
    q, k, v = inputs(1, 2, 2, 0, 5, 4, 4)
    assert run(SMALL, q, k, v, causal=True).output.shape == (1, 2, 0, 4)
    q, k, v = inputs(1, 2, 2, 5, 0, 4, 4)
    res = run(SMALL, q, k, v)
    assert (res.output == 0).all() and torch.isneginf(res.lse).all()


def test_thread_count_does_not_change_the_forward():
    q, k, v = inputs(2, 8, 2, 300, 300, 16, 16, dtype=torch.float32)
    before = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            outs.append(run(SMALL, q, k, v, causal=True).output)
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(outs[0], o) for o in outs[1:])   # a task's arithmetic does not depend on its worker


GRAD_CASES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "causal-lq<lk": dict(causal=True, lengths=(19, 45)),
    "causal-lq>lk": dict(causal=True, lengths=(45, 19)),
    "window": dict(causal=True, window=9),
    "window-only": dict(window=4),
    "softcap": dict(softcap=1.5, scale=0.7),
    "bool-mask": dict(mask="bool", causal=True),
    "additive-mask": dict(mask="additive"),
}


@pytest.mark.parametrize("blocks", sorted(BACKENDS))
@pytest.mark.parametrize("case", sorted(GRAD_CASES))
def test_gradients_match_naive_autograd(case, blocks):
    kwargs = dict(GRAD_CASES[case])
    Lq, Lk = kwargs.pop("lengths", (37, 37))
    q, k, v = inputs(2, 4, 2, Lq, Lk, 8, 6, seed=5)
    g = torch.Generator().manual_seed(9)
    if kwargs.get("mask") == "bool":
        kwargs["mask"] = torch.rand(2, 1, Lq, Lk, generator=g) > 0.4
    elif kwargs.get("mask") == "additive":
        kwargs["mask"] = torch.randn(1, 4, Lq, Lk, generator=g, dtype=torch.float64)
    d_out = torch.randn(2, 4, Lq, 6, generator=g, dtype=torch.float64)
    d_lse = torch.randn(2, 4, Lq, generator=g, dtype=torch.float64)

    def grads(backend):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        res = run(backend, *leaves, **kwargs)
        lse = torch.where(torch.isfinite(res.lse), res.lse, 0.0)   # the lse is differentiable too
        loss = (res.output * d_out).sum() + (lse * d_lse).sum()
        return torch.autograd.grad(loss, leaves)

    for got, want in zip(grads(BACKENDS[blocks]), grads(NaiveBackend())):
        assert torch.isfinite(got).all()
        assert max_error(got, want) < 1e-12


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_low_precision_gradients_match_float64(dtype):
    q, k, v = inputs(1, 4, 1, 70, 70, 16, 16, dtype=dtype, seed=8)
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(run(NaiveBackend(), *ref, causal=True, window=30).output.square().sum(), ref)

    def grads(backend):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        return torch.autograd.grad(run(backend, *leaves, causal=True, window=30).output.float().square().sum(), leaves)
    for g, n, w in zip(grads(SMALL), grads(NaiveBackend()), want):
        assert g.dtype == dtype
        assert_close_to_reference(g, w, n, dtype=dtype, what="gradient")


def test_gradcheck_float64():
    q, k, v = (t.requires_grad_() for t in inputs(1, 4, 2, 13, 17, 4, 3))
    mask = torch.rand(13, 17, generator=torch.Generator().manual_seed(1)) > 0.2

    def f(q, k, v):
        res = run(NativeBackend(4, 8), q, k, v, causal=True, window=6, mask=mask, softcap=2.0)
        return res.output, torch.where(torch.isfinite(res.lse), res.lse, 0.0)
    # dQ sums the key blocks' parts in the order workers finish them: equal up to rounding (see native.py)
    assert torch.autograd.gradcheck(f, (q, k, v), nondet_tol=1e-12)


def test_refusals_say_why(monkeypatch):
    q, k, v = inputs(1, 1, 1, 4, 4, 8, 8)
    reasons = NativeBackend().not_supported_reasons(build_request(q, k, v, return_weights=True, dropout_p=0.1))
    assert len(reasons) == 2 and "weights" in reasons[0] and "dropout" in reasons[1]
    mask = torch.zeros(4, 4, dtype=torch.float64, requires_grad=True)
    assert "additive mask" in NativeBackend().refuse(build_request(q, k, v, mask=mask))
    with torch.no_grad():
        assert NativeBackend().refuse(build_request(q, k, v, mask=mask)) is None
    meta = torch.zeros(1, 1, 4, 8, device="meta")
    assert "device meta is not supported (supported: cpu)" in NativeBackend().refuse(build_request(meta, meta, meta))


def test_a_failed_build_is_one_stated_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))                 # nothing built there
    monkeypatch.setattr(native, "_STATE", {"ops": None, "error": None})
    monkeypatch.setattr(native, "_missing_tools", lambda: "no C++ compiler ('c++' is not on PATH)")
    assert not native.is_built()
    q, k, v = inputs(1, 1, 1, 4, 4, 8, 8)
    assert "no C++ compiler" in NativeBackend().refuse(build_request(q, k, v))
    with pytest.raises(RuntimeError, match="cannot build the native kernel: no C\\+\\+ compiler.*using 'tiled'"):
        native.build()
    assert "using 'tiled' instead" in NativeBackend().refuse(build_request(q, k, v))   # remembered, not retried


def test_import_never_compiles(tmp_path):
    code = ("import selfattn, selfattn.kernels.native as n; import torch;"
            "assert not n.is_built(); assert n._STATE['ops'] is None;"
            "q = torch.zeros(1, 1, 4, 8); from selfattn.functional import build_request;"
            "n.NativeBackend().refuse(build_request(q, q, q));"   # asking costs no compile
            "assert not n.is_built(); print('ok')")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok" and "compiling" not in done.stderr
    assert not any(tmp_path.rglob("*.so"))


def test_build_is_cached_and_says_where(built):
    assert native.is_built() and native.unavailable_reason() is None
    assert native.build() is built                         # loaded once per process
    path = native._library_path()
    assert path.is_file() and native.build_dir() in path.parents
    assert torch.__version__.replace("+", "_") in str(path)


def test_through_attention_by_name():
    q, k, v = inputs(1, 4, 2, 33, 33, 8, 8)
    if "native" not in selfattn.kernels.BACKENDS:
        pytest.skip("backend 'native' is not registered in selfattn.kernels.BACKENDS")
    out = selfattn.attention(q, k, v, causal=True, backend="native")
    assert_close_to_reference(out, reference_lse(q, k, v, causal=True)[0])
