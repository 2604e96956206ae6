"""`attention(mask_mod=, score_mod=, block_mask=)`: FlexAttention's functions on every backend that can serve them.

Each mask is given twice: as a mask_mod (torch, called by selfattn on index tensors) and drawn independently in NumPy
for the float64 spec (`selfattn.reference`); each score_mod has its spec form (an additive mask, the spec's softcap,
its ALiBi). Gradients are held against float64 autograd of the naive backend given the NumPy-drawn mask (no mask_mod).
The native kernel runs under each answer of the CPU probe (`cpu.forced`), on its own tiles and on BLAS's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import selfattn
from selfattn import masks
from selfattn.kernels import cpu
from selfattn.kernels.native import NativeBackend
from selfattn.kernels.tiled import TiledBackend
from selfattn.request import build_request

from ..helpers import make_inputs, reference_of
from ..tolerances import TOL, assert_close_to_reference, max_error, tolerance

BACKENDS = ("naive", "sdpa", "tiled", "native")
"""The CPU backends that take a mask_mod without a compile (flex: `test_flex_takes_both_natively`)."""

MOD_BACKENDS = ("naive", "tiled")
"""The CPU backends that take a score_mod without a compile."""

DOC = 97
"""Document length of the document mask: no multiple of the 128-position block."""

PREFIX = 150
"""Positions every query of the prefix-LM mask sees."""

CHUNK = 128
"""Chunk of the chunked mask: exactly one block, so a query block sees one key block."""


def _doc(n: int) -> torch.Tensor:
    return torch.arange(n) // DOC


MASKS = {
    # name: (mask_mod in torch, the same drawn in NumPy: (b (B,1,1,1), h, q, kv) index arrays → bool)
    "document": (
        lambda b, h, q, kv: (q // DOC == kv // DOC) & (kv <= q),
        lambda b, h, q, kv: (q // DOC == kv // DOC) & (kv <= q),
    ),
    "prefix-lm": (lambda b, h, q, kv: (kv < PREFIX) | (kv <= q), lambda b, h, q, kv: (kv < PREFIX) | (kv <= q)),
    "dilated": (
        lambda b, h, q, kv: ((q - kv) % 3 == 0) & (kv <= q),
        lambda b, h, q, kv: (np.mod(q - kv, 3) == 0) & (kv <= q),
    ),
    "chunked": (lambda b, h, q, kv: q // CHUNK == kv // CHUNK, lambda b, h, q, kv: q // CHUNK == kv // CHUNK),
    "sliding": (lambda b, h, q, kv: (q - kv < 40) & (kv <= q), lambda b, h, q, kv: (q - kv < 40) & (kv <= q)),
    "per-head-and-item": (  # heads 0-1 see 40 back, the others everything before; item 1 one more document edge
        lambda b, h, q, kv: (kv <= q) & ((h >= 2) | (q - kv < 40)) & ((b == 0) | (kv // 200 == q // 200)),
        lambda b, h, q, kv: (kv <= q) & ((h >= 2) | (q - kv < 40)) & ((b == 0) | (kv // 200 == q // 200)),
    ),
    "empty-rows": (  # rows 130-139 see nothing: output 0, lse −inf, never NaN
        lambda b, h, q, kv: ((q < 130) | (q >= 140)) & (kv <= q),
        lambda b, h, q, kv: ((q < 130) | (q >= 140)) & (kv <= q),
    ),
}

SHAPES = {
    "gqa-odd": (2, 4, 2, 300, 300, 16),
    "lq-ne-lk": (1, 2, 1, 130, 700, 8),
    "decode-stacked": (1, 8, 2, 3, 700, 16),
    "split-k": (1, 2, 1, 1, 3000, 16),
}


def _drawn(name: str, B: int, H: int, Lq: int, Lk: int) -> np.ndarray:
    """The mask drawn in NumPy: bool (B, H, Lq, Lk)."""
    b, h = np.arange(B)[:, None, None, None], np.arange(H)[None, :, None, None]
    q, kv = np.arange(Lq)[None, None, :, None], np.arange(Lk)[None, None, None, :]
    return np.broadcast_to(MASKS[name][1](b, h, q, kv), (B, H, Lq, Lk))


def _check(out, lse, ref, naive, dtype) -> None:
    ref_out, _, ref_lse = ref
    assert_close_to_reference(out, ref_out, naive.output, dtype=dtype)
    got = lse.detach().double().numpy()
    assert (np.isneginf(got) == np.isneginf(ref_lse)).all(), "lse −inf exactly where a row sees nothing"
    finite = np.isfinite(ref_lse)
    assert_close_to_reference(
        torch.from_numpy(got[finite]), ref_lse[finite], naive.lse.double().numpy()[finite], dtype=dtype, what="lse"
    )


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", MASKS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_mask_mod_is_its_dense_mask(native_built, backend, name, shape):
    B, Hq, Hkv, Lq, Lk, D = SHAPES[shape]
    q, k, v = make_inputs(B, Hq, Hkv, Lq, Lk, D, dtype=torch.float64)
    ref = reference_of(q, k, v, mask=torch.from_numpy(_drawn(name, B, Hq, Lq, Lk).copy()))
    mod = MASKS[name][0]
    naive = selfattn.attention(q, k, v, mask_mod=mod, backend="naive", return_lse=True)
    if backend == "sdpa":  # no lse: its output alone
        out = selfattn.attention(q, k, v, mask_mod=mod, backend="sdpa")
        assert_close_to_reference(out, ref[0], naive.output)
        return
    got = selfattn.attention(q, k, v, mask_mod=mod, backend=backend, return_lse=True)
    _check(got.output, got.lse, ref, naive, torch.float64)


def _grads(backend, q, k, v, **kwargs):
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    out = selfattn.attention(q, k, v, backend=backend, **kwargs)
    weight = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)
    return torch.autograd.grad((out * weight).sum(), (q, k, v))


@pytest.mark.parametrize("name", ["document", "prefix-lm", "dilated", "per-head-and-item", "empty-rows"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_through_a_mask_mod(native_built, backend, name):
    B, Hq, Hkv, Lq, Lk, D = SHAPES["gqa-odd"]
    q, k, v = make_inputs(B, Hq, Hkv, Lq, Lk, D, dtype=torch.float64)
    dense = torch.from_numpy(_drawn(name, B, Hq, Lq, Lk).copy())
    want = _grads("naive", q, k, v, mask=dense)
    got = _grads(backend, q, k, v, mask_mod=MASKS[name][0])
    for label, g, w in zip("qkv", got, want, strict=True):
        assert max_error(g, w) <= TOL["float64_grad"], f"d{label}"


@pytest.mark.parametrize("tiles", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("isa", cpu.ISA_NAMES)
def test_native_on_each_answer_of_the_probe(native_built, isa, dtype, tiles):
    """Every path of the native kernel the probe's answer picks (half GEMM, its own tiles, few-row loops), forward
    and backward, with a mask_mod that differs by head and batch item, against float64 by the tolerance rule."""
    name = "per-head-and-item"
    for shape in ("gqa-odd", "decode-stacked"):
        B, Hq, Hkv, Lq, Lk, D = SHAPES[shape]
        q, k, v = make_inputs(B, Hq, Hkv, Lq, Lk, D, dtype=dtype)
        ref = reference_of(q, k, v, mask=torch.from_numpy(_drawn(name, B, Hq, Lq, Lk).copy()))
        naive = selfattn.attention(q, k, v, mask_mod=MASKS[name][0], backend="naive", return_lse=True)
        with cpu.forced(isa):
            backend = NativeBackend(tiles=tiles)
            got = backend.forward(build_request(q, k, v, mask_mod=MASKS[name][0], return_lse=True))
            _check(got.output, got.lse, ref, naive, dtype)
            q64, k64, v64 = (t.double() for t in (q, k, v))
            want = _grads("naive", q64, k64, v64, mask=torch.from_numpy(_drawn(name, B, Hq, Lq, Lk).copy()))
            low = _grads("naive", q, k, v, mask_mod=MASKS[name][0])
            qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
            out = backend.forward(build_request(qg, kg, vg, mask_mod=MASKS[name][0])).output
            weight = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)
            got_grads = torch.autograd.grad((out * weight).sum(), (qg, kg, vg))
        for label, g, w, n in zip("qkv", got_grads, want, low, strict=True):
            scale = max(1.0, float(w.abs().max()))
            err, tol = max_error(g, w) / scale, tolerance(dtype, max_error(n, w) / scale)
            assert err <= tol, f"d{label}: {err:.3g} > {tol:.3g} ({isa}, {dtype}, tiles={tiles}, {shape})"


def test_native_never_reads_a_block_the_map_hides(native_built):
    """Chunks of exactly one block: query block i sees key block i only. An infinite value in key block 1 reaches
    query block 1 alone; had the kernel multiplied any other block's P (0 there) by it, 0 · inf = NaN would show."""
    q, k, v = make_inputs(1, 2, 2, 512, 512, 16, dtype=torch.float32)
    v = v.clone()
    v[:, :, CHUNK + 5] = float("inf")
    for backend in (NativeBackend(), NativeBackend(tiles=False), TiledBackend(128, 128)):
        out = backend.forward(build_request(q, k, v, mask_mod=MASKS["chunked"][0])).output
        rows = torch.arange(512)
        seen = (rows // CHUNK) == 1
        assert torch.isfinite(out[:, :, ~seen]).all(), backend
        assert not torch.isfinite(out[:, :, seen]).all(), backend


SCORE_MODS = {
    # name: (score_mod, the spec's arguments for it (Hq, Lq, Lk) → dict)
    "relative-bias": (
        lambda s, b, h, q, kv: s + 0.05 * ((h + 1) * torch.clamp(q - kv, -8, 8)).to(s.dtype),
        lambda Hq, Lq, Lk: dict(
            mask=torch.from_numpy(
                0.05 * (np.arange(Hq)[:, None, None] + 1) * np.clip(np.arange(Lq)[:, None] - np.arange(Lk), -8, 8)
            )
        ),
    ),
    "softcap": (lambda s, b, h, q, kv: 3.0 * torch.tanh(s / 3.0), lambda Hq, Lq, Lk: dict(softcap=3.0)),
    "alibi": (
        lambda s, b, h, q, kv: s - torch.exp2(-8.0 * (h + 1).to(s.dtype) / 4) * (q - kv).abs().to(s.dtype),
        lambda Hq, Lq, Lk: dict(alibi=torch.tensor([2.0 ** (-8.0 * (h + 1) / 4) for h in range(Hq)])),
    ),
}


@pytest.mark.parametrize("name", SCORE_MODS)
@pytest.mark.parametrize("backend", MOD_BACKENDS)
def test_a_score_mod_is_its_spec(backend, name):
    """A score_mod alone and with a mask_mod, forward (lse too) and gradients, against the spec's form of it."""
    B, Hq, Hkv, L, D = 2, 4, 2, 300, 16
    q, k, v = make_inputs(B, Hq, Hkv, L, L, D, dtype=torch.float64)
    mod, spec = SCORE_MODS[name]
    for mask in (None, "document"):
        kwargs = {} if mask is None else {"mask_mod": MASKS[mask][0]}
        spec_kwargs = spec(Hq, L, L)
        if mask is not None:
            drawn = torch.from_numpy(_drawn(mask, B, Hq, L, L).copy())
            extra = spec_kwargs.get("mask")
            spec_kwargs["mask"] = drawn if extra is None else extra.masked_fill(~drawn, float("-inf"))
        ref = reference_of(q, k, v, **spec_kwargs)
        naive = selfattn.attention(q, k, v, score_mod=mod, backend="naive", return_lse=True, **kwargs)
        got = selfattn.attention(q, k, v, score_mod=mod, backend=backend, return_lse=True, **kwargs)
        _check(got.output, got.lse, ref, naive, torch.float64)
        want = _grads("naive", q, k, v, **spec_kwargs)
        grads = _grads(backend, q, k, v, score_mod=mod, **kwargs)
        for label, g, w in zip("qkv", grads, want, strict=True):
            assert max_error(g, w) <= TOL["float64_grad"], f"d{label} ({mask})"


def test_tiled_applies_a_score_mod_per_tile_in_float32():
    """Small tiles (every score_mod call a tile of broadcast index tensors), GQA, float32, by the tolerance rule."""
    q, k, v = make_inputs(1, 4, 2, 333, 333, 16, dtype=torch.float32)
    mod, spec = SCORE_MODS["relative-bias"]
    ref = reference_of(q, k, v, **spec(4, 333, 333))
    naive = selfattn.attention(q, k, v, score_mod=mod, backend="naive", return_lse=True)
    got = TiledBackend(64, 32).forward(build_request(q, k, v, score_mod=mod, return_lse=True))
    _check(got.output, got.lse, ref, naive, torch.float32)


def test_a_block_mask_made_once_serves_every_call(native_built):
    """`masks.block_mask` ahead (B and H None: one map for all), passed as block_mask=; the map's blocks are the
    NumPy drawing's; attention(mask_mod=) keeps the one it makes (the same object the next call)."""
    q, k, v = make_inputs(2, 2, 2, 300, 300, 8, dtype=torch.float64)
    mod = MASKS["document"][0]
    bm = masks.block_mask(mod, None, None, 300, 300)
    drawn = _drawn("document", 1, 1, 300, 300)[0, 0]
    padded = np.zeros((384, 384), dtype=bool)
    padded[:300, :300] = drawn
    seen = padded.reshape(3, 128, 3, 128).sum(axis=(1, 3))
    sizes = np.minimum(128, 300 - np.arange(3) * 128)
    full = seen == sizes[:, None] * sizes[None, :]
    want = np.where(seen == 0, masks.EMPTY, np.where(full, masks.FULL, masks.PARTIAL))
    assert (bm.kinds[0, 0].numpy() == want).all()
    assert np.array_equal(bm.dense()[0, 0].numpy(), drawn)
    ref = reference_of(q, k, v, mask=torch.from_numpy(drawn.copy()))
    for backend in BACKENDS:
        out = selfattn.attention(q, k, v, block_mask=bm, backend=backend)
        assert max_error(out, ref[0]) <= TOL["float64_rel"], backend
    r1, r2 = (build_request(q, k, v, mask_mod=mod) for _ in range(2))
    assert r1.rule.block_mask is r2.rule.block_mask


def test_a_mask_mod_holding_a_changed_tensor_is_evaluated_anew():
    """The cache keys on the tensors a mask_mod's closure holds and their versions: ids changed in place are seen."""
    q, k, v = make_inputs(1, 1, 1, 200, 200, 8, dtype=torch.float64)
    ids = torch.zeros(200, dtype=torch.int64)

    def same_doc(b, h, qi, kv):
        return ids[qi] == ids[kv]

    before = selfattn.attention(q, k, v, mask_mod=same_doc, backend="native")
    ids[100:] = 1
    after = selfattn.attention(q, k, v, mask_mod=same_doc, backend="native")
    want = reference_of(q, k, v, mask=(ids[:, None] == ids[None, :]))[0]
    assert max_error(after, want) <= TOL["float64_rel"]
    assert max_error(before, reference_of(q, k, v)[0]) <= TOL["float64_rel"]


def test_the_cache_is_bounded(monkeypatch):
    """Past its budget the least recently used block mask is dropped."""
    cache = masks._BlockMaskCache(limit=1)
    monkeypatch.setattr(masks, "BLOCK_MASKS", cache)
    made = masks.cached_block_mask(MASKS["document"][0], 1, 1, 300, 300, "cpu")
    assert made.nbytes > 1 and cache.bytes == 0  # larger than the whole budget: not kept
    cache.limit = made.nbytes * 2
    for name in ("document", "prefix-lm", "dilated"):
        masks.cached_block_mask(MASKS[name][0], 1, 1, 300, 300, "cpu")
    assert cache.bytes <= cache.limit and len(cache.kept) < 3


def test_a_mask_mod_written_for_vmap_is_evaluated_as_flex_does():
    """A mod that stacks its indices raises on broadcast index tensors of different shapes: it is evaluated under
    vmap instead, on 0-d indices, as FlexAttention's create_mask does."""

    def even_max(b, h, qi, kv):
        return torch.stack([qi, kv]).max(dim=0).values % 2 == 0

    bm = masks.block_mask(even_max, 1, 1, 300, 200)
    drawn = np.maximum(np.arange(300)[:, None], np.arange(200)[None, :]) % 2 == 0
    assert np.array_equal(bm.dense()[0, 0].numpy(), drawn)


@pytest.mark.parametrize("backend", ["native", "sdpa"])
def test_a_score_mod_is_refused_by_name(native_built, backend):
    q, k, v = make_inputs(1, 1, 1, 8, 8, 4)
    with pytest.raises(ValueError, match=f"backend '{backend}' cannot serve this request: .*it has no score_mod"):
        selfattn.attention(q, k, v, score_mod=SCORE_MODS["softcap"][0], backend=backend)
    assert selfattn.attention(q, k, v, score_mod=SCORE_MODS["softcap"][0]).shape == q.shape  # auto takes another


def test_tiled_refuses_a_score_mod_holding_a_tensor_that_requires_grad():
    """Its backward takes the gradient through score_mod to q, k, v only: a learnt bias would get none. Refused by
    name; auto takes naive, which differentiates it."""
    q, k, v = (t.requires_grad_(True) for t in make_inputs(1, 2, 2, 20, 20, 4))
    bias = torch.zeros(2, dtype=torch.float64, requires_grad=True)

    def learnt(s, b, h, qi, kv):
        return s + bias[h]

    with pytest.raises(ValueError, match="its score_mod holds a tensor that requires grad.*use backend='naive'"):
        selfattn.attention(q, k, v, score_mod=learnt, backend="tiled")
    out = selfattn.attention(q, k, v, score_mod=learnt)
    (grad,) = torch.autograd.grad(out.sum(), bias)
    assert grad.shape == (2,)


def test_errors_name_the_bad_value():
    q, k, v = make_inputs(1, 2, 2, 20, 30, 4)
    with pytest.raises(TypeError, match="mask_mod must be callable .* got int"):
        selfattn.attention(q, k, v, mask_mod=3)
    with pytest.raises(TypeError, match="must return a bool tensor .* got a int64 tensor of shape"):
        selfattn.attention(q, k, v, mask_mod=lambda b, h, qi, kv: qi - kv)
    with pytest.raises(ValueError, match=r"returned shape \(1, 1, 21, 30\).*\(1, 2, 20, 30\)"):
        selfattn.attention(q, k, v, mask_mod=lambda b, h, qi, kv: torch.ones(1, 1, 21, 30, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask_mod .* failed on index tensors .*boom"):
        selfattn.attention(q, k, v, mask_mod=lambda b, h, qi, kv: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(TypeError, match="block_mask must be a selfattn.masks.BlockMask .* got Tensor"):
        selfattn.attention(q, k, v, block_mask=torch.ones(20, 30, dtype=torch.bool))
    mod = MASKS["prefix-lm"][0]
    other = masks.block_mask(mod, None, None, 30, 30)
    with pytest.raises(ValueError, match=r"block_mask was made for .* \(1, 1, 30, 30\).*\(1, 2, 20, 30\)"):
        selfattn.attention(q, k, v, block_mask=other)
    with pytest.raises(ValueError, match="block_mask was made from mask_mod .* not the mask_mod given"):
        selfattn.attention(q, k, v, mask_mod=MASKS["document"][0], block_mask=masks.block_mask(mod, 1, 2, 20, 30))
    with pytest.raises(TypeError, match="score_mod must be callable .* got str"):
        selfattn.attention(q, k, v, score_mod="tanh")
    with pytest.raises(TypeError, match="score_mod .* must return a floating tensor .* got dtype torch.bool"):
        selfattn.attention(q, k, v, score_mod=lambda s, b, h, qi, kv: s > 0, backend="naive")
    with pytest.raises(ValueError, match=r"score_mod .* returned shape \(3,\)"):
        selfattn.attention(q, k, v, score_mod=lambda s, b, h, qi, kv: torch.zeros(3), backend="tiled")


def test_one_head_reads_its_own_head_of_both_mods():
    """Request.one_head (the explainer's per-head calls) keeps each mod's head: head h alone equals head h of the
    whole call."""
    q, k, v = make_inputs(1, 4, 2, 200, 200, 8)
    mod = MASKS["per-head-and-item"][0]
    score = SCORE_MODS["relative-bias"][0]
    r = build_request(q, k, v, mask_mod=mod, score_mod=score)
    whole = selfattn.kernels.choose(r, "naive").forward(r).output
    for h in range(4):
        one = r.one_head(h)
        out = selfattn.kernels.choose(one, "tiled").forward(one).output
        assert max_error(out[:, 0], whole[:, h]) <= TOL["float64_rel"], h


def test_explain_shows_the_refusals_and_the_mods():
    q, k, v = make_inputs(1, 2, 2, 300, 300, 8, dtype=torch.float32)
    e = selfattn.kernels.explain(dict(q=q, k=k, v=v, mask_mod=MASKS["document"][0], score_mod=SCORE_MODS["softcap"][0]))
    assert "it has no score_mod" in " ".join(e["backends"]["native"]["reasons"])
    assert e["request"]["score_mod"] == "<lambda>" and e["request"]["block_mask"] == [1, 2, 300, 300]
    assert "score_mod=<lambda>" in selfattn.kernels.dispatch.render(e)


@pytest.mark.slow
def test_flex_takes_both_natively():
    """FlexAttention (compiled: ~15 s on a 2-core CPU) with the user's mask_mod and score_mod as they are."""
    q, k, v = make_inputs(1, 2, 2, 256, 256, 16, dtype=torch.float32)
    mod, spec = SCORE_MODS["softcap"]
    r = build_request(q, k, v, mask_mod=MASKS["document"][0], score_mod=mod)
    why = selfattn.kernels.BACKENDS["flex"].not_supported_reasons(r)
    if why:
        pytest.skip(f"flex refuses here: {why}")
    out = selfattn.attention(q, k, v, mask_mod=MASKS["document"][0], score_mod=mod, backend="flex")
    drawn = torch.from_numpy(_drawn("document", 1, 2, 256, 256).copy())
    ref = reference_of(q, k, v, mask=drawn, **spec(2, 256, 256))
    naive = selfattn.attention(q, k, v, mask_mod=MASKS["document"][0], score_mod=mod, backend="naive")
    assert_close_to_reference(out, ref[0], naive)


def test_a_block_mask_made_ahead_compiles_in_one_graph(native_built):
    """torch.compile(fullgraph=True) through native with block_mask= (made outside the graph): one graph, the same
    numbers as the eager call. (mask_mod= evaluates inside the call, which breaks a graph: the docstring says so.)"""
    q, k, v = make_inputs(1, 2, 2, 200, 200, 16, dtype=torch.float32)
    bm = masks.block_mask(MASKS["sliding"][0], None, None, 200, 200)
    compiled = torch.compile(
        lambda a, b, c: selfattn.attention(a, b, c, block_mask=bm, backend="native"), fullgraph=True
    )
    eager = selfattn.attention(q, k, v, block_mask=bm, backend="native")
    assert max_error(compiled(q, k, v), eager) <= TOL["float32"]
