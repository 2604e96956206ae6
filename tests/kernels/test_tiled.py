"""Backend "tiled" against the float64 reference: every feature, awkward lengths, every block size,
gradients against the naive backend's autograd, poisoned padding, fully-masked rows, block skipping."""

import numpy as np
import pytest
import torch

import selfattn
from selfattn.functional import build_request
from selfattn.kernels import tiled
from selfattn.kernels.naive import NaiveBackend
from selfattn.kernels.tiled import BLOCK_SIZES, TiledBackend

from ..helpers import make_inputs, reference_of
from ..tolerances import TOL, assert_close_to_reference, max_error

SMALL = TiledBackend(block_q=16, block_k=16)
"""Small blocks, so that lengths like 113 span many full, partial and ragged blocks."""

# (Lq, Lk): 1, 3, 15, 113, 1023 do not divide any block size; Lq ≠ Lk both ways
LENGTHS = [(1, 1), (3, 3), (15, 15), (113, 113), (1023, 1023), (15, 40), (40, 15), (1, 113), (113, 1)]

RULES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(window=5),
    "causal-window": dict(causal=True, window=17),
}


inputs = make_inputs


def run(backend, q, k, v, **kwargs):
    return backend.forward(build_request(q, k, v, return_lse=True, **kwargs))


def assert_lse_equal(lse, ref_lse, tol):
    got = lse.double().numpy()
    finite = np.isfinite(ref_lse)
    assert (np.isneginf(got) == ~finite).all(), "lse must be −inf exactly where a row sees nothing"
    assert np.abs(got[finite] - ref_lse[finite]).max(initial=0.0) <= tol


@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("lengths", LENGTHS, ids=lambda t: f"{t[0]}x{t[1]}")
def test_forward_and_lse_match_reference_at_awkward_lengths(lengths, rule):
    Lq, Lk = lengths
    heads = (1, 1) if Lq * Lk > 10_000 else (4, 2)   # GQA wherever it stays cheap
    q, k, v = inputs(1, *heads, Lq, Lk, 7, 5)         # odd head dims
    res = run(SMALL, q, k, v, **RULES[rule])
    ref_out, _, ref_lse = reference_of(q, k, v, **RULES[rule])
    assert_close_to_reference(res.output, ref_out)
    assert_lse_equal(res.lse, ref_lse, TOL["float64"])


@pytest.mark.parametrize("block_q", BLOCK_SIZES)
@pytest.mark.parametrize("block_k", BLOCK_SIZES)
def test_every_supported_block_size(block_q, block_k):
    q, k, v = inputs(2, 4, 2, 113, 150, 8, 8)
    kwargs = dict(causal=True, window=70)
    res = run(TiledBackend(block_q, block_k), q, k, v, **kwargs)
    ref_out, _, ref_lse = reference_of(q, k, v, **kwargs)
    assert_close_to_reference(res.output, ref_out)
    assert_lse_equal(res.lse, ref_lse, TOL["float64"])


def test_block_sizes_are_checked():
    with pytest.raises(ValueError, match=r"block_q=48 is not a supported block size; choose one of \(16"):
        TiledBackend(block_q=48)
    with pytest.raises(ValueError, match="block_k=0"):
        TiledBackend(block_k=0)


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
    }


@pytest.mark.parametrize("mask_kind", sorted(_masks(2, 4, 3, 3)))
@pytest.mark.parametrize("rule", ["plain", "causal-window"])
def test_user_masks_are_applied_block_by_block(mask_kind, rule):
    B, Hq, Hkv, Lq, Lk = 2, 4, 2, 45, 37
    q, k, v = inputs(B, Hq, Hkv, Lq, Lk, 8, 8)
    mask = _masks(B, Hq, Lq, Lk)[mask_kind]
    res = run(SMALL, q, k, v, mask=mask, **RULES[rule])
    ref_out, _, ref_lse = reference_of(q, k, v, mask=mask, **RULES[rule])
    assert_close_to_reference(res.output, ref_out)
    assert_lse_equal(res.lse, ref_lse, TOL["float64"])


@pytest.mark.parametrize("kwargs", [dict(scale=0.3), dict(softcap=2.0), dict(softcap=0.5, scale=2.0, causal=True)],
                         ids=["scale", "softcap", "softcap-scale-causal"])
def test_scale_and_softcap(kwargs):
    q, k, v = inputs(1, 2, 1, 33, 47, 16, 8)
    res = run(SMALL, q, k, v, **kwargs)
    ref_out, _, ref_lse = reference_of(q, k, v, **kwargs)
    assert_close_to_reference(res.output, ref_out)
    assert_lse_equal(res.lse, ref_lse, TOL["float64"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("rule", sorted(RULES))
def test_low_precision_within_twice_the_naive_error(dtype, rule):
    q, k, v = inputs(1, 4, 2, 113, 97, 32, 32, dtype=dtype, seed=2)
    res = run(SMALL, q, k, v, **RULES[rule])
    naive = run(NaiveBackend(), q, k, v, **RULES[rule])
    ref_out, _, ref_lse = reference_of(q, k, v, **RULES[rule])
    assert res.output.dtype == dtype and res.lse.dtype == torch.float32
    assert_close_to_reference(res.output, ref_out, naive.output, dtype=dtype)
    finite = np.isfinite(ref_lse)
    assert max_error(res.lse.double().numpy()[finite], ref_lse[finite]) <= \
        2 * max_error(naive.lse.double().numpy()[finite], ref_lse[finite]) + TOL["float32"]


@pytest.mark.parametrize("kwargs", [dict(causal=True), dict(causal=True, window=300), dict()], ids=str)
def test_default_blocks_past_one_block(kwargs):
    # the default 1024 × 256 blocks: two query blocks, the second ragged, five key blocks
    q, k, v = inputs(1, 4, 2, 1100, 1100, 16, 16, dtype=torch.float32)
    naive = NaiveBackend().forward(build_request(q, k, v, **kwargs))
    ref_out, _, _ = reference_of(q, k, v, **kwargs)
    assert_close_to_reference(selfattn.attention(q, k, v, backend="tiled", **kwargs), ref_out, naive.output)


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
    for backend in (SMALL, TiledBackend(64, 128), TiledBackend()):
        res = run(backend, pq, pk, pv, mask=mask, **RULES[rule])
        assert torch.isfinite(res.output).all()
        ref_out, _, _ = reference_of(q, k, v, mask=mask, **RULES[rule])
        assert_close_to_reference(res.output, ref_out)
    # and gradients of poisoned views stay finite and right
    pq, pk, pv = (t.requires_grad_() for t in (pq, pk, pv))
    out = run(SMALL, pq, pk, pv, **RULES[rule]).output
    grads = torch.autograd.grad(out.square().sum(), (pq, pk, pv))
    assert all(torch.isfinite(g).all() for g in grads)


def test_non_contiguous_inputs():
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in inputs(2, 4, 2, 50, 50, 8, 8))
    assert not q.is_contiguous()
    res = run(SMALL, q, k, v, causal=True)
    assert_close_to_reference(res.output, reference_of(q, k, v, causal=True)[0])


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


GRAD_CASES = {
    "causal": dict(causal=True),
    "causal-lq<lk": dict(causal=True, lengths=(19, 45)),
    "causal-lq>lk": dict(causal=True, lengths=(45, 19)),
    "window": dict(causal=True, window=9),
    "softcap": dict(softcap=1.5, scale=0.7),
    "bool-mask": dict(mask="bool", causal=True),
    "additive-mask": dict(mask="additive"),
}


@pytest.mark.parametrize("case", sorted(GRAD_CASES))
def test_gradients_match_naive_autograd(case):
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

    for got, want in zip(grads(SMALL), grads(NaiveBackend())):
        assert torch.isfinite(got).all()
        assert max_error(got, want) < TOL["float64"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_low_precision_gradients_match_naive(dtype):
    q, k, v = inputs(1, 4, 1, 70, 70, 16, 16, dtype=dtype, seed=8)
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(run(NaiveBackend(), *ref, causal=True, window=30).output.square().sum(), ref)
    for backend in (NaiveBackend(), SMALL):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        got = torch.autograd.grad(run(backend, *leaves, causal=True, window=30).output.float().square().sum(), leaves)
        if backend is not SMALL:
            naive = got
            continue
        for g, n, w in zip(got, naive, want):
            assert g.dtype == dtype
            assert_close_to_reference(g, w, n, dtype=dtype, what="gradient")


def test_gradcheck_float64():
    q, k, v = (t.requires_grad_() for t in inputs(1, 2, 1, 13, 17, 4, 3))
    mask = torch.rand(13, 17, generator=torch.Generator().manual_seed(1)) > 0.2

    def f(q, k, v):
        res = run(SMALL, q, k, v, causal=True, window=6, mask=mask, softcap=2.0)
        return res.output, torch.where(torch.isfinite(res.lse), res.lse, 0.0)
    assert torch.autograd.gradcheck(f, (q, k, v))


def test_refusals_say_why():
    # every reason at once, not only the first
    q, k, v = inputs(1, 1, 1, 4, 4, 8, 8)
    request = build_request(q, k, v, return_weights=True, dropout_p=0.1)
    reasons = TiledBackend().not_supported_reasons(request)
    assert len(reasons) == 2 and "weight matrix" in reasons[0] and "no dropout" in reasons[1]
    q, k, v = inputs(1, 1, 1, 4, 4, 8, 8)
    with pytest.raises(ValueError, match="never builds the weight matrix.*attention_weights"):
        selfattn.attention(q, k, v, return_weights=True, backend="tiled")
    with pytest.raises(ValueError, match="no dropout"):
        selfattn.attention(q, k, v, dropout_p=0.1, backend="tiled")
    mask = torch.zeros(4, 4, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ValueError, match="does not differentiate an additive mask"):
        selfattn.attention(q, k, v, mask=mask, backend="tiled")
    with torch.no_grad():
        assert selfattn.attention(q, k, v, mask=mask, backend="tiled").shape == q.shape


def _visited(plan):
    tiles = {"full": 0, "partial": 0, "pairs": 0}
    for q0 in range(0, plan.Lq, plan.block_q):
        full, partial = plan.key_blocks(q0, min(q0 + plan.block_q, plan.Lq))
        tiles["full"] += len(full)
        tiles["partial"] += len(partial)
        tiles["pairs"] += sum((q1 - q0) * (k1 - k0) for q0, q1, k0, k1 in full + partial)
    return tiles


def _plan(L, block_q=64, block_k=64, **kwargs):
    q = torch.zeros(1, 1, L, 4)
    return tiled.Plan.of(build_request(q, q, q, **kwargs), block_q, block_k)


def test_blocks_the_request_makes_invisible_are_skipped():
    # causal, 16 × 16 blocks: 120 below the diagonal, 16 on it, the 120 above never visited
    assert _visited(_plan(1024, causal=True)) == {"full": 120, "partial": 16, "pairs": 136 * 64 * 64}
    # a window of 128 = 2 blocks: per query block at most 3 tiles, so O(N·w), not O(N²)
    for L in (1024, 4096):
        tiles = _visited(_plan(L, causal=True, window=128))
        assert tiles["full"] + tiles["partial"] <= 3 * (L // 64)
    assert _visited(_plan(1024)) == {"full": 256, "partial": 0, "pairs": 1024 * 1024}


def test_tall_query_blocks_trim_the_rows_above_the_diagonal():
    # 256 × 64 blocks, causal: a tile holds only the rows that see its key block, so the work is
    # the visible triangle plus the masked halves of 64 × 64 diagonal squares, as with square blocks
    tiles = _visited(_plan(1024, block_q=256, causal=True))
    assert tiles["partial"] == 16 and tiles["pairs"] == 136 * 64 * 64
    assert tiles["pairs"] == tiled.Plan.work(_plan(1024, block_q=256, causal=True))[1]


def test_backward_visits_the_same_tiles():
    for kwargs in (dict(causal=True), dict(causal=True, window=100), dict(window=7)):
        for block_q in (64, 256):
            plan = _plan(700, block_q=block_q, **kwargs)
            forward, backward = set(), set()
            for q0 in range(0, 700, block_q):
                full, partial = plan.key_blocks(q0, min(q0 + block_q, 700))
                forward |= {(r, k0) for r0, r1, k0, _ in full + partial for r in range(r0, r1)}
            for k0 in range(0, 700, 64):
                full, partial = plan.query_blocks(k0, min(k0 + 64, 700))
                backward |= {(r, k0) for r0, r1, _, _ in full + partial for r in range(r0, r1)}
            assert forward == backward


def test_never_builds_an_lq_by_lk_matrix(monkeypatch):
    biggest = []

    def spy(real):
        def matmul(*args, **kwargs):
            out = real(*args, **kwargs)
            biggest.append(out.shape[-2] * out.shape[-1])
            return out
        return matmul
    for name in ("bmm", "baddbmm"):
        monkeypatch.setattr(torch, name, spy(getattr(torch, name)))
    q, k, v = (t.requires_grad_() for t in inputs(1, 2, 2, 1000, 1000, 8, 8, dtype=torch.float32))
    out = TiledBackend(64, 128).forward(build_request(q, k, v, causal=True)).output
    out.sum().backward()
    assert len(biggest) > 100 and max(biggest) <= 64 * 128
    biggest.clear()
    with torch.no_grad():
        TiledBackend().forward(build_request(q, k, v, causal=True))     # default blocks: 1024 × 256
    assert max(biggest) <= 1000 * 256


@pytest.mark.parametrize("hidden_by", ["causal", "bool-mask", "window"])
def test_a_nan_in_a_hidden_key_never_reaches_the_rows_that_cannot_see_it(hidden_by):
    # hidden scores are set to −inf, not summed with it: NaN + (−inf) would be NaN and poison the row
    Lq = Lk = 45
    q, k, v = inputs(1, 4, 2, Lq, Lk, 8, 8)
    poisoned = k.clone()
    poisoned[:, :, 30] = float("nan")
    kwargs = {"causal": dict(causal=True), "window": dict(causal=True, window=5),
              "bool-mask": dict(mask=torch.arange(Lk) != 30)}[hidden_by]
    rows = list(range(30)) + (list(range(35, Lq)) if hidden_by != "causal" else [])   # rows that never see key 30
    if hidden_by == "bool-mask":
        rows = list(range(Lq))
    for backend in (SMALL, TiledBackend()):
        got = run(backend, q, poisoned, v, **kwargs)
        want = run(backend, q, k, v, **kwargs)
        assert torch.isfinite(got.output[:, :, rows]).all() and torch.isfinite(got.lse[:, :, rows]).all()
        assert torch.equal(got.output[:, :, rows], want.output[:, :, rows])
