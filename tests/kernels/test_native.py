"""Backend "native" (the compiled CPU kernel), what only it does: how it builds (once, cached,
never at import, one stated reason when it cannot), its refusals, and a forward that does not depend
on the thread count. The contract it shares with "tiled" (the feature × dtype matrix, awkward
lengths and head dims, masks, poisoned padding, fully masked rows, gradients, gradcheck) is tested
for both in test_fused.py."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import selfattn
from selfattn.kernels import native, native_build
from selfattn.kernels.naive import NaiveBackend
from selfattn.kernels.native import NativeBackend
from selfattn.request import build_request

from ..helpers import forward_with_lse, make_inputs, reference_of
from ..tolerances import assert_close_to_reference, max_error, tolerance
from .test_native_half import TILE_CASES

SMALL = NativeBackend(block_q=16, block_k=32)
"""Small blocks, so that lengths like 300 span many tasks."""


@pytest.fixture(autouse=True)
def built(native_built):
    """Every test here runs with the kernel built (once per session; skipped without a compiler)."""
    return native_built


def test_thread_count_does_not_change_the_forward():
    q, k, v = make_inputs(2, 8, 2, 300, 300, 16, 16, dtype=torch.float32)
    before = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            outs.append(forward_with_lse(SMALL, q, k, v, causal=True).output)
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(outs[0], o) for o in outs[1:])  # a task's arithmetic does not depend on its worker


def test_refusals_say_why(monkeypatch):
    q, k, v = make_inputs(1, 1, 1, 4, 4, 8, 8)
    reasons = NativeBackend().not_supported_reasons(build_request(q, k, v, return_weights=True, dropout_p=0.1))
    assert len(reasons) == 2 and "weights" in reasons[0] and "dropout" in reasons[1]
    mask = torch.zeros(4, 4, dtype=torch.float64, requires_grad=True)
    assert "additive mask" in NativeBackend().refuse(build_request(q, k, v, mask=mask))
    with torch.no_grad():
        assert NativeBackend().refuse(build_request(q, k, v, mask=mask)) is None
    meta = torch.zeros(1, 1, 4, 8, device="meta")
    assert "device meta is not supported (supported: cpu)" in NativeBackend().refuse(build_request(meta, meta, meta))


def test_a_failed_build_is_one_stated_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # nothing built there
    monkeypatch.setattr(native_build, "_LIBRARY", native_build._Library())
    monkeypatch.setattr(native_build, "_missing_tools", lambda: "no C++ compiler ('c++' is not on PATH)")
    assert not native.is_built()
    q, k, v = make_inputs(1, 1, 1, 4, 4, 8, 8)
    assert "no C++ compiler" in NativeBackend().refuse(build_request(q, k, v))
    with pytest.raises(RuntimeError, match="cannot build the native kernel: no C\\+\\+ compiler.*using 'tiled'"):
        native.build()
    assert "using 'tiled' instead" in NativeBackend().refuse(build_request(q, k, v))  # remembered, not retried


def test_auto_asks_the_disk_whether_the_library_is_there_at_most_once_a_look(monkeypatch, tmp_path):
    """ "auto" asks every backend's state on every call: while the kernel is not loaded that was two stats a call.
    One look holds LOOK_SECONDS (per path); a library another process builds is then seen."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(native_build, "_LIBRARY", native_build._Library())
    clock = [1000.0]
    monkeypatch.setattr(native_build.time, "monotonic", lambda: clock[0])
    looks = []
    real = type(tmp_path).is_file
    monkeypatch.setattr(type(tmp_path), "is_file", lambda self: looks.append(self) or real(self))
    q, k, v = make_inputs(1, 2, 2, 1, 64, 8, dtype=torch.float32)
    for _ in range(20):
        selfattn.attention(q, k, v, causal=True)
    assert len(looks) == 1 and not native.is_built()
    path = native_build._library_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")  # another process built it
    assert not native.is_built()  # within the look
    clock[0] += native_build.LOOK_SECONDS + 0.01
    assert native.is_built() and native.unavailable_reason() is None and len(looks) == 2
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "other"))  # another cache: looked at afresh
    assert not native.is_built() and len(looks) == 3


def test_import_never_compiles(tmp_path):
    code = (
        "import selfattn, selfattn.kernels.native as n; import torch;"
        "assert not n.is_built(); assert selfattn.kernels.native_build._LIBRARY.ops is None;"
        "q = torch.zeros(1, 1, 4, 8); from selfattn.request import build_request;"
        "n.NativeBackend().refuse(build_request(q, q, q));"  # asking costs no compile
        "assert not n.is_built(); print('ok')"
    )
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok" and "compiling" not in done.stderr
    assert not any(tmp_path.rglob("*.so"))


def test_build_is_cached_and_says_where(built):
    assert native.is_built() and native.unavailable_reason() is None
    assert native.build() is built  # loaded once per process
    path = native_build._library_path()
    assert path.is_file() and native.build_dir() in path.parents
    assert torch.__version__.replace("+", "_") in str(path)


def test_through_attention_by_name():
    q, k, v = make_inputs(1, 4, 2, 33, 33, 8, 8)
    if "native" not in selfattn.kernels.BACKENDS:
        pytest.skip("backend 'native' is not registered in selfattn.kernels.BACKENDS")
    out = selfattn.attention(q, k, v, causal=True, backend="native")
    assert_close_to_reference(out, reference_of(q, k, v, causal=True)[0])


def test_scale_zero_goes_elsewhere_so_a_nan_key_still_shows():
    """BLAS skips a product whose alpha is 0: native would turn NaN·0 into 0. It refuses scale = 0, and
    auto serves it with a backend that keeps IEEE's NaN · 0 = NaN, as the reference does."""
    q, k, v = make_inputs(1, 2, 1, 4, 3, 3, dtype=torch.float32)
    k[..., 2, :] = float("nan")
    assert "scale = 0" in NativeBackend().refuse(build_request(q, k, v, scale=0.0))
    out = selfattn.attention(q, k, v, scale=0.0)
    ref = reference_of(q, k, v, scale=0.0)[0]
    assert np.array_equal(np.isnan(out.numpy()), np.isnan(ref)) and np.isnan(ref).all()


def test_a_window_gets_a_lower_query_block():
    """A block of b rows reads b + span − 1 keys per row: under a window the block is span / 4 rows high
    (at least 32, at most block_q); a window unbounded on one side, or none, keeps block_q."""
    one = torch.zeros(())
    qkv = (one.expand(1, 8, 4096, 64),) * 3
    for kwargs, want in (
        (dict(causal=True, window=256), 64),
        (dict(window=(128, 127)), 64),
        (dict(causal=True, window=16), native.MIN_WINDOW_BLOCK_Q),
        (dict(causal=True, window=1024), native.BLOCK_Q),
        (dict(causal=True), native.BLOCK_Q),
        (dict(window=(None, 8)), native.BLOCK_Q),
        (dict(), native.BLOCK_Q),
    ):
        r = build_request(*qkv, **kwargs)
        assert NativeBackend().blocks(r) == (want, native.BLOCK_K), kwargs
        assert NativeBackend(block_q=16).blocks(r)[0] == 16  # an explicit lower block stays
    q, k, v = make_inputs(1, 4, 2, 700, 700, 16, 16)
    for kwargs in (dict(causal=True, window=256), dict(window=(100, 37))):  # 64- and 32-row blocks, ragged
        assert_close_to_reference(
            forward_with_lse(NativeBackend(), q, k, v, **kwargs).output, reference_of(q, k, v, **kwargs)[0]
        )


AVX2_OR_SCALAR = (
    "AVX2 (8 float32 lanes)" if torch.backends.cpu.get_cpu_capability() != "DEFAULT" else "scalar code (no AVX2)"
)


def test_the_softmax_runs_avx512_only_where_the_cpu_has_it(built):
    """The rule that picks the softmax's instructions, given faked CPU features, and its choice on this CPU
    (on an AVX2-only CPU the AVX512 variant is compiled but never run: its speed and results are unmeasured here)."""
    assert built.softmax_path_for(False, False) == AVX2_OR_SCALAR
    assert built.softmax_path_for(False, True) == AVX2_OR_SCALAR  # AVX512-BF16's conversions need AVX512F
    assert built.softmax_path_for(True, False) == "AVX512 (16 float32 lanes)"
    assert built.softmax_path_for(True, True) == "AVX512 (16 float32 lanes), P rounded to bfloat16 with AVX512-BF16"
    here = built.softmax_path_for(torch.cpu._is_avx512_supported(), torch.cpu._is_avx512_bf16_supported())
    assert built.softmax_path() == here == native.softmax_lanes()
    assert here in native.instruction_set()


@pytest.mark.parametrize("case", TILE_CASES)
@pytest.mark.parametrize("tiles", [True, False])
def test_float32_tiles_meet_the_rule(case, tiles):
    """The float32 forward on the kernel's own AVX512 tiles (K packed once a call, V's rows read in place; where the
    CPU has AVX512F) and on MKL's sgemm per tile, against float64 by the tolerance rule, at the tiles' edge shapes;
    the compute path names the tiles where they run."""
    shape, kw = TILE_CASES[case]
    q, k, v = make_inputs(*shape, dtype=torch.float32)
    ref_out, _, ref_lse = reference_of(q, k, v, **kw)
    naive = selfattn.attention(q, k, v, backend="naive", return_lse=True, **kw)
    backend = NativeBackend(tiles=tiles)
    r = build_request(q, k, v, return_lse=True, **kw)
    got = backend.forward(r)
    assert_close_to_reference(got.output, ref_out, naive.output)
    assert_close_to_reference(got.lse, ref_lse, naive.lse, dtype=torch.float32, what="lse")
    assert ("AVX512 tiles" in backend.compute_path(r)) == backend.runs_tiles(r) == (tiles and native.cpu.has("avx512"))
    default = native.cpu.has("avx512") and not native.cpu.has("amx_tile") and r.G * r.Lq > native.FEW_ROWS
    assert NativeBackend().runs_tiles(r) == default


@pytest.mark.parametrize("case", TILE_CASES)
@pytest.mark.parametrize("tiles", [True, False])
def test_float32_tiles_backward_meets_the_rule(case, tiles):
    """Gradients of q, k, v through the float32 tiles (q·kᵀ and dO·Vᵀ on K and V packed, dV, dK and dQ on P, dS read
    transposed or as they are against dO's, Q's and K's rows) and through MKL's sgemm, against float64 autograd by the
    rule, at the tiles' edge shapes."""
    shape, kw = TILE_CASES[case]
    q64, k64, v64 = make_inputs(*shape, dtype=torch.float64)
    weights = None
    grads = {}
    for name, backend, dtype in (
        ("native", NativeBackend(tiles=tiles), torch.float32),
        ("naive", NaiveBackend(), torch.float32),
        ("reference", NaiveBackend(), torch.float64),
    ):
        q, k, v = (t.to(dtype).requires_grad_() for t in (q64, k64, v64))
        out = backend.forward(build_request(q, k, v, return_lse=True, **kw))
        if weights is None:
            weights = torch.randn(out.output.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        loss = (out.output.double() * weights).sum() + out.lse.double().nan_to_num(neginf=0.0).sum()
        grads[name] = torch.autograd.grad(loss, (q, k, v))
    for label, got, naive, want in zip("qkv", grads["native"], grads["naive"], grads["reference"], strict=True):
        scale = max(1.0, float(want.abs().max()))
        err, tol = max_error(got, want) / scale, tolerance(torch.float32, max_error(naive, want) / scale)
        assert err <= tol, f"d{label}: {err:.3g} > {tol:.3g} ({case}, tiles={tiles})"


def test_float32_tiles_read_no_value_outside_the_tile():
    """An infinite value of a key no row of a tile sees reaches no output there: the tiles read V's rows of the
    tile's keys only (the query block of rows 160–191 under window=38 starts on key 123, beside key 122)."""
    q, k, v = make_inputs(1, 2, 2, 300, 300, 32, 32, dtype=torch.float32)
    v = v.clone()
    v[:, :, 122] = float("inf")
    r = build_request(q, k, v, window=38, causal=True)
    tiles = NativeBackend(tiles=True).forward(r).output
    mkl = NativeBackend(tiles=False).forward(r).output
    assert torch.equal(tiles.isnan(), mkl.isnan()) and torch.equal(tiles.isinf(), mkl.isinf())
    assert tiles[:, :, 160:192].isfinite().all() and not tiles[:, :, 122:160].isfinite().all()
