"""Backend "native" with bfloat16/float16 inputs, every path on any CPU: the half GEMM (MKL's
gemm_bf16bf16f32 / gemm_f16f16f32, float32 accumulation; forced with `half_gemm=True` where the CPU lacks
the instructions, when MKL widens to float32 inside), bfloat16's own VDPBF16PS tiles in the forward where the CPU
has AVX512-BF16 (`tiles`, on by default; off: MKL's) and the fallback that converts to float32
(`half_gemm=False`). Every score feature, forward and backward, against the float64 reference by the
tolerance rule (tests/tolerances.py); `gemm_path` names the path the CPU takes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import selfattn
from selfattn.kernels import native
from selfattn.kernels.native import NativeBackend, gemm_path, has_half_gemm
from selfattn.kernels.native_op import native_forward
from selfattn.request import build_request

from ..helpers import make_inputs, reference_of
from ..test_score_features import FEATURE_NAMES, SHAPES, features
from ..tolerances import assert_close_to_reference, max_error, tolerance

HALF = [torch.bfloat16, torch.float16]
PATHS = {
    "half-gemm": dict(half_gemm=True, tiles=True),
    "mkl-tiles": dict(half_gemm=True, tiles=False),
    "float32": dict(half_gemm=False),
}
"""The half path with bfloat16's own tiles (VDPBF16PS, where the CPU has AVX512-BF16; elsewhere MKL's), with MKL's
GEMM on every tile, and the fallback to float32."""
EXTRA = ["causal", "window-softcap", "mask-bool", "mask-additive"]


@pytest.fixture(scope="module", autouse=True)
def built():
    try:
        native.build()
    except RuntimeError as error:
        pytest.skip(f"the native kernel is unavailable here: {error}")


def _kwargs(feature, B, Hq, Lq, Lk, dtype):
    if feature in FEATURE_NAMES:
        return features(B, Hq, Lq, dtype)[feature]
    g = torch.Generator().manual_seed(5)
    hidden = torch.rand(Lq, Lk, generator=g) < 0.3
    hidden[:, 0] = False  # every row sees a key
    return {
        "causal": dict(causal=True),
        "window-softcap": dict(window=9, causal=True, softcap=4.0),
        "mask-bool": dict(mask=~hidden),
        "mask-additive": dict(mask=torch.where(hidden, -2.0, 0.5).to(dtype)),
    }[feature]


def _case(shape, dtype, feature):
    B, Hq, Hkv, Lq, Lk, D, Dv = shape
    q, k, v = make_inputs(B, Hq, Hkv, Lq, Lk, D, Dv, dtype=dtype)
    return q, k, v, _kwargs(feature, B, Hq, Lq, Lk, dtype)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("feature", FEATURE_NAMES + EXTRA)
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("path", PATHS)
def test_forward_matches_reference_on_both_paths(path, dtype, feature, shape):
    q, k, v, kw = _case(shape, dtype, feature)
    ref_out, _, ref_lse = reference_of(q, k, v, **kw)
    naive = selfattn.attention(q, k, v, backend="naive", return_lse=True, **kw)
    got = NativeBackend(**PATHS[path]).forward(build_request(q, k, v, return_lse=True, **kw))
    assert got.output.dtype == dtype and got.lse.dtype == torch.float32
    assert_close_to_reference(got.output, ref_out, naive.output, dtype=dtype)
    assert_close_to_reference(got.lse, ref_lse, naive.lse, dtype=dtype, what="lse")


def _grads(backend, q, k, v, kw, dtype):
    """∂(Σ out² + Σ lse)/∂(q, k, v[, sinks]) through `backend` (a NativeBackend, or "naive"), inputs in `dtype`."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    kw = {name: value.to(dtype) if name in ("alibi", "sinks") else value for name, value in kw.items()}
    if "mask" in kw and kw["mask"].dtype != torch.bool:
        kw["mask"] = kw["mask"].to(dtype)
    if "sinks" in kw:
        kw["sinks"] = kw["sinks"].detach().requires_grad_()
        leaves.append(kw["sinks"])
    if backend == "naive":
        out = selfattn.attention(*leaves[:3], backend="naive", return_lse=True, **kw)
    else:
        out = backend.forward(build_request(*leaves[:3], return_lse=True, **kw))
    return torch.autograd.grad((out.output.float() ** 2).sum() + out.lse.sum(), leaves)


@pytest.mark.parametrize("feature", FEATURE_NAMES + EXTRA)
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("path", PATHS)
def test_backward_matches_float64_on_both_paths(path, dtype, feature):
    """Gradients of q, k, v (and the sinks) against float64 autograd through the naive path, by the rule:
    at most twice the naive path's error in the same dtype (relative to the gradient's size), plus the floor."""
    q, k, v, kw = _case(SHAPES[0], torch.float64, feature)
    want = _grads("naive", q, k, v, kw, torch.float64)
    naive = _grads("naive", q, k, v, kw, dtype)
    got = _grads(NativeBackend(**PATHS[path]), q, k, v, kw, dtype)
    for name, g, w, n in zip("q k v sinks".split(), got, want, naive, strict=False):
        assert g.dtype == dtype, name
        scale = max(1.0, float(w.abs().max()))
        err, tol = max_error(g, w) / scale, tolerance(dtype, max_error(n, w) / scale)
        assert err <= tol, f"d{name}: {err:.3g} > {tol:.3g} ({path}, {dtype}, {feature})"


def test_the_half_gemm_path_keeps_bf16_operands_and_rounds_p():
    """Forced, the kernel gets bfloat16 q, k, v (the operator returns bfloat16 out, float32 lse) and rounds P
    to bfloat16 for P·V, so it differs from the float32 path somewhere while both meet the rule."""
    q, k, v = make_inputs(1, 2, 2, 200, 200, 32, dtype=torch.bfloat16)
    r = build_request(q, k, v, causal=True)
    half = NativeBackend(half_gemm=True).forward(r).output
    converted = NativeBackend(half_gemm=False).forward(r).output
    assert half.dtype == converted.dtype == torch.bfloat16
    assert not torch.equal(half, converted)
    tiles = NativeBackend(half_gemm=True).runs_tiles(r)
    out, lse = native_forward(q, k, v, *native.tile_arguments(r, native.BLOCK_Q, native.BLOCK_K, tiles))
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert torch.equal(out, half)  # the operator on the bfloat16 tensors themselves is what the backend ran


def test_the_operator_passes_opcheck_with_half_inputs():
    q, k, v = make_inputs(1, 2, 1, 20, 20, 8, dtype=torch.bfloat16)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    sinks = torch.tensor([0.5, -1.0])
    args = (q, k, v, None, 4, 0, 8**-0.5, 0.0, sinks, None, None, None, None, None, None, 16, 16, True)
    torch.library.opcheck(native_forward, args)


@pytest.mark.parametrize("dtype", HALF)
def test_gemm_path_names_the_path_this_cpu_takes(dtype):
    said = gemm_path(dtype)
    half = "bfloat16" if dtype == torch.bfloat16 else "float16"
    if has_half_gemm(dtype):
        assert said.startswith(f"{half} GEMM, float32 accumulation (MKL")
        assert NativeBackend()._operand_dtype(dtype) == dtype
    else:
        assert said.startswith(f"converted to float32 (this CPU has no {half} GEMM")
        assert NativeBackend()._operand_dtype(dtype) == torch.float32
    assert gemm_path(dtype, half_gemm=False) == "converted to float32 (forced)"
    assert gemm_path(dtype, half_gemm=True).startswith(f"{half} GEMM, float32 accumulation")
    assert NativeBackend(half_gemm=True).gemm_path(dtype) == gemm_path(dtype, True)


def test_gemm_path_of_full_precision_and_bad_arguments():
    assert gemm_path(torch.float32) == "float32 GEMM (BLAS sgemm)"
    assert gemm_path(torch.float64) == "float64 GEMM (BLAS dgemm)"
    assert not has_half_gemm(torch.float32)
    with pytest.raises(ValueError, match="not torch.int64"):
        gemm_path(torch.int64)
    with pytest.raises(TypeError, match="dtype must be a torch.dtype, got str 'bf16'"):
        gemm_path("bf16")
    with pytest.raises(TypeError, match="half_gemm must be None, True or False, got str 'yes'"):
        NativeBackend(half_gemm="yes")
    assert repr(NativeBackend(half_gemm=False)).endswith("half_gemm=False)")


TILE_CASES = {
    "odd-dims": ((1, 2, 2, 37, 37, 7, 5), dict(causal=True)),
    "keys-past-a-group": ((2, 4, 2, 130, 130, 64, 64), dict(causal=True)),
    "wide-heads": ((1, 2, 2, 129, 1031, 128, 128), dict(causal=True)),
    "window-odd-edges": ((1, 4, 4, 300, 300, 33, 17), dict(window=37, causal=True)),
    "two-sided": ((1, 3, 3, 200, 201, 16, 48), dict(window=(5, 9))),
    "decode-split-k": ((1, 8, 1, 1, 3000, 64, 64), dict(causal=True)),
    "gqa-stacked": ((1, 8, 2, 5, 700, 64, 64), dict(causal=True)),
    "odd-dv-over-64": ((1, 2, 1, 3, 513, 64, 80), {}),
    "causal-many-blocks": ((1, 2, 2, 1100, 1100, 64, 64), dict(causal=True)),
    "diagonal-odd-shift": ((1, 2, 1, 300, 777, 64, 64), dict(causal=True)),
}
"""Shapes the packed tiles meet at their edges: D and Dv odd or past one vector, keys past a group of 16, tiles
starting and ending on odd keys (windows), split-K chunks, GQA's stacked rows; in the backward, key blocks whose
diagonal query blocks see only their first keys (each tile cut to the keys its rows see), and with Lk − Lq odd
(477) query blocks that start on an odd row (35 for the second key block) and see up to an odd key, so that the
transposed P and dS pair a row inside the block with one outside it."""


@pytest.mark.parametrize("case", TILE_CASES)
@pytest.mark.parametrize("tiles", [True, False])
def test_tiles_meet_the_rule(case, tiles):
    """The forward on bfloat16's own tiles (VDPBF16PS, where the CPU has AVX512-BF16) and on MKL's per-tile GEMM,
    against float64 by the tolerance rule; the compute path names the tiles where they run."""
    shape, kw = TILE_CASES[case]
    q, k, v = make_inputs(*shape[:6], shape[6], dtype=torch.bfloat16)
    ref_out, _, ref_lse = reference_of(q, k, v, **kw)
    naive = selfattn.attention(q, k, v, backend="naive", return_lse=True, **kw)
    backend = NativeBackend(half_gemm=True, tiles=tiles)
    r = build_request(q, k, v, return_lse=True, **kw)
    got = backend.forward(r)
    assert_close_to_reference(got.output, ref_out, naive.output, dtype=torch.bfloat16)
    assert_close_to_reference(got.lse, ref_lse, naive.lse, dtype=torch.bfloat16, what="lse")
    assert ("VDPBF16PS" in backend.compute_path(r)) == backend.runs_tiles(r)
    here = native.cpu.has("avx512_bf16") and native.cpu.has("avx512")
    assert backend.runs_tiles(r) == (tiles and here)
    many_rows = r.G * r.Lq > native.FEW_ROWS  # fewer take the few-row loops: packing K and V would not pay
    assert NativeBackend(half_gemm=True).runs_tiles(r) == (here and not native.cpu.has("amx_tile") and many_rows)


@pytest.mark.parametrize("case", TILE_CASES)
@pytest.mark.parametrize("tiles", [True, False])
def test_tiles_backward_meets_the_rule(case, tiles):
    """Gradients of q, k, v through the tiles (every product of the backward: q·kᵀ, dO·Vᵀ, dS·K, and dSᵀ·Q, Pᵀ·dO on
    the transposes) and through MKL's GEMMs, against float64 autograd by the rule, at the tiles' edge shapes."""
    shape, kw = TILE_CASES[case]
    q, k, v = make_inputs(*shape[:6], shape[6], dtype=torch.float64)
    want = _grads("naive", q, k, v, kw, torch.float64)
    naive = _grads("naive", q, k, v, kw, torch.bfloat16)
    got = _grads(NativeBackend(half_gemm=True, tiles=tiles), q, k, v, kw, torch.bfloat16)
    for name, g, w, n in zip("q k v".split(), got, want, naive, strict=True):
        scale = max(1.0, float(w.abs().max()))
        err, tol = max_error(g, w) / scale, tolerance(torch.bfloat16, max_error(n, w) / scale)
        assert err <= tol, f"d{name}: {err:.3g} > {tol:.3g} ({case}, tiles={tiles})"


def test_the_tiles_run_where_the_cpu_has_avx512_bf16_only():
    """With AVX512-BF16 the tiles add the products in another order than MKL's GEMM: the scores differ in their
    last bits somewhere; without it `tiles` changes nothing."""
    q, k, v = make_inputs(2, 4, 2, 130, 130, 64, 64, dtype=torch.bfloat16)
    r = build_request(q, k, v, causal=True, return_lse=True)
    on, off = (NativeBackend(half_gemm=True, tiles=t).forward(r) for t in (True, False))
    same = torch.equal(on.output, off.output) and torch.equal(on.lse, off.lse)
    assert same != NativeBackend(half_gemm=True, tiles=True).runs_tiles(r)


def test_tiles_multiply_no_key_outside_the_tile():
    """An infinite value of a key no row of a tile sees reaches no output there. Under window=38 the query block
    of rows 160–191 (32 rows high: `query_block`) reads keys from 123 on, an odd key: key 122 shares its pair of
    packed values; the tiles add key 123 on its own, so rows 160–191 stay finite, as on MKL's per-tile GEMM."""
    q, k, v = make_inputs(1, 2, 2, 300, 300, 32, 32, dtype=torch.bfloat16)
    v = v.clone()
    v[:, :, 122] = float("inf")
    r = build_request(q, k, v, window=38, causal=True)
    assert native.query_block(r, native.BLOCK_Q) == 32
    tiles = NativeBackend(half_gemm=True, tiles=True).forward(r).output
    mkl = NativeBackend(half_gemm=True, tiles=False).forward(r).output
    assert torch.equal(tiles.isnan(), mkl.isnan()) and torch.equal(tiles.isinf(), mkl.isinf())
    assert tiles[:, :, 160:192].isfinite().all() and not tiles[:, :, 122:160].isfinite().all()


def test_tiles_is_a_bool():
    with pytest.raises(TypeError, match="tiles must be None, True or False, got str 'yes'"):
        NativeBackend(tiles="yes")
    assert repr(NativeBackend(tiles=False)).endswith("tiles=False)")


def _tiles_or_skip(r):
    backend = NativeBackend(half_gemm=True, tiles=True)
    if not backend.runs_tiles(r):
        pytest.skip("the bfloat16 tiles run only where the CPU has AVX512-BF16")
    return backend


def test_a_packing_buffer_used_before_holds_nothing_of_that_call():
    """Packed operands live in buffers the kernel keeps between calls (csrc `PackPool`). A call whose packing has
    padding (D odd: the last pair's second dim; keys past a group of 16; Dv past a vector of 16) after one that
    filled the same buffers with inf must write every value: an inf left as the second dim of D = 33's last pair
    meets the query's 0 there, 0 · inf = NaN, in every score (keys and dims past the rest are summed in lanes
    that are never stored). Fails if pack_group leaves that pair as it found it."""
    inf = torch.full((1, 2, 64, 64), float("inf"), dtype=torch.bfloat16)
    backend = _tiles_or_skip(build_request(inf, inf, inf, causal=True))
    for _ in range(2):  # forward, then forward and backward: their buffers go back to the pool full of inf
        leaves = [inf.clone().requires_grad_() for _ in range(3)]
        out = backend.forward(build_request(*leaves, causal=True)).output
        torch.autograd.grad(out.float().sum(), leaves)
    shape, kw = (1, 2, 2, 40, 37, 33, 17), dict(causal=True)
    q, k, v = make_inputs(*shape, dtype=torch.float64)
    want, naive = _grads("naive", q, k, v, kw, torch.float64), _grads("naive", q, k, v, kw, torch.bfloat16)
    got = _grads(backend, q, k, v, kw, torch.bfloat16)
    for name, g, w, n in zip("q k v".split(), got, want, naive, strict=True):
        scale = max(1.0, float(w.abs().max()))
        assert g.isfinite().all(), name
        assert max_error(g, w) / scale <= tolerance(torch.bfloat16, max_error(n, w) / scale), name
    qb, kb, vb = (t.to(torch.bfloat16) for t in (q, k, v))
    ref_out = reference_of(qb, kb, vb, **kw)[0]
    naive_out = selfattn.attention(qb, kb, vb, backend="naive", **kw)
    assert_close_to_reference(backend.forward(build_request(qb, kb, vb, **kw)).output, ref_out, naive_out)


def test_concurrent_calls_pack_into_buffers_of_their_own():
    """Calls from several threads at once (the app serves requests concurrently) each take their own buffers from
    the pool: every result equals the one the same call gives alone, bit for bit."""
    shapes = [(1, 4, 2, 300, 300, 64, 64), (2, 2, 2, 130, 517, 33, 17), (1, 8, 8, 64, 2000, 64, 64)]
    requests = []
    for i, shape in enumerate(shapes):
        q, k, v = make_inputs(*shape, dtype=torch.bfloat16, seed=i)
        requests.append(build_request(q, k, v, causal=True))
    backend = _tiles_or_skip(requests[0])
    alone = [backend.forward(r).output for r in requests]
    with ThreadPoolExecutor(max_workers=3) as pool:
        together = list(pool.map(lambda r: backend.forward(r).output, requests * 4))
    for i, out in enumerate(together):
        assert torch.equal(out, alone[i % len(requests)]), i


def test_operands_past_a_batch_are_packed_a_batch_of_heads_at_a_time():
    """The tiles pack at most PACK_BATCH_BYTES of operands at once (csrc `in_head_batches`): 8 kv heads of 16,384
    keys pack 6 MB each for the bfloat16 backward (2 heads a batch, 4 batches), 4 MB each for the float32 forward
    at D = 128 (3, 3 and 2 heads) and 8 MB each for the float32 backward (one a batch): every head reads its own
    part of its batch's buffers, forward and backward, against float64 by the rule (fails where a head's part
    ignores where its batch starts)."""
    q, k, v = make_inputs(1, 8, 8, 16, 16384, 64, 64, dtype=torch.float64)
    backend = _tiles_or_skip(build_request(*(t.to(torch.bfloat16) for t in (q, k, v))))
    want, naive = _grads("naive", q, k, v, {}, torch.float64), _grads("naive", q, k, v, {}, torch.bfloat16)
    for name, g, w, n in zip("q k v".split(), _grads(backend, q, k, v, {}, torch.bfloat16), want, naive, strict=True):
        scale = max(1.0, float(w.abs().max()))
        assert max_error(g, w) / scale <= tolerance(torch.bfloat16, max_error(n, w) / scale), name
    q, k, v = make_inputs(1, 8, 8, 16, 8200, 128, 128, dtype=torch.float32)
    r = build_request(q, k, v, return_lse=True)
    if not NativeBackend(tiles=True).runs_tiles(r):
        pytest.skip("the float32 tiles run only where the CPU has AVX512F")
    ref_out, _, ref_lse = reference_of(q, k, v)
    naive_out = selfattn.attention(q, k, v, backend="naive")
    got = NativeBackend(tiles=True).forward(r)
    assert_close_to_reference(got.output, ref_out, naive_out)
    q, k, v = make_inputs(1, 8, 8, 16, 16384, 64, 64, dtype=torch.float64)  # the float32 backward: 8 batches of one
    want, naive = _grads("naive", q, k, v, {}, torch.float64), _grads("naive", q, k, v, {}, torch.float32)
    got32 = _grads(NativeBackend(tiles=True), q, k, v, {}, torch.float32)
    for name, g, w, n in zip("q k v".split(), got32, want, naive, strict=True):
        scale = max(1.0, float(w.abs().max()))
        assert max_error(g, w) / scale <= tolerance(torch.float32, max_error(n, w) / scale), name
