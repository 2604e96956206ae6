"""selfattn.compat: FlashAttention's, SDPA's and xFormers' calls, each against its anchor's own semantics.

SDPA is checked against `torch.nn.functional.scaled_dot_product_attention` itself. FlashAttention and xFormers do
not run on this CPU: their calls are checked against a float64 computation written here from their documented
rules (`dense`, with visibility drawn by the anchor's own formula), independent of selfattn's masks and scores.
"""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
import torch
import torch.nn.functional as F

import selfattn
from selfattn import compat
from selfattn.functional import FOREIGN_KEYWORDS
from tests.tolerances import TOL

F64 = torch.float64
TIGHT = TOL["float64"]


def rand(*shape: int, seed: int = 0, dtype=F64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def close(a: torch.Tensor, b: torch.Tensor, tol: float = TIGHT) -> None:
    assert a.shape == b.shape, f"shape {tuple(a.shape)} != {tuple(b.shape)}"
    a64, b64 = a.double(), b.double()
    same_inf = torch.isinf(a64) & torch.isinf(b64) & (a64.sign() == b64.sign())
    err = (a64 - b64).abs().masked_fill(same_inf, 0).max().item() if a.numel() else 0.0
    assert err <= tol, f"max error {err:.3g} > {tol:.3g}"


def dense(q, k, v, visible=None, *, scale=None, softcap=0.0, bias=None, slopes=None):
    """The anchors' attention written out in float64, (B, H, Lq, D) layout, GQA by repeating heads.

    visible (…, Lq, Lk) bool, bias (…, Lq, Lk) additive, slopes (B, H): −slope·|i + Lk − Lq − j| (FlashAttention's
    ALiBi). Returns (out, lse, weights); a row that sees nothing: out 0, weights 0, lse −inf."""
    q, k, v = q.double(), k.double(), v.double()
    H, Hkv, Lq, Lk = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
    s = q @ k.transpose(-1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        i, j = torch.arange(Lq, dtype=F64)[:, None], torch.arange(Lk, dtype=F64)[None, :]
        s = s - slopes.double()[..., None, None] * (i + Lk - Lq - j).abs()
    if bias is not None:
        s = s + bias.double()
    if visible is not None:
        s = s.masked_fill(~visible, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    w = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return w @ v, lse, w


def flash_visible(Lq, Lk, causal=False, window=(-1, -1)):
    """FlashAttention's rule as its docstring states it: query i (at p = i + Lk − Lq) sees keys
    p − left <= j <= p + right (−1: unbounded); causal: j <= p."""
    p = torch.arange(Lq)[:, None] + Lk - Lq
    j = torch.arange(Lk)[None, :]
    ok = torch.ones(Lq, Lk, dtype=torch.bool)
    left, right = window
    if left >= 0:
        ok &= j >= p - left
    if right >= 0:
        ok &= j <= p + right
    if causal:
        ok &= j <= p
    return ok


def blh(*ts):
    """(B, H, L, D) tensors in FlashAttention's / xFormers' (B, L, H, D) layout."""
    return tuple(t.transpose(1, 2) for t in ts)


# --- FlashAttention: flash_attn_func -------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_flash_layout_equals_sdpa_on_the_transposed_tensors(causal):
    q, k, v = rand(2, 7, 4, 16, seed=1), rand(2, 7, 4, 16, seed=2), rand(2, 7, 4, 16, seed=3)  # (B, L, H, D)
    out = compat.flash_attn_func(q, k, v, causal=causal)
    expected = F.scaled_dot_product_attention(*blh(q, k, v), is_causal=causal).transpose(1, 2)
    close(out, expected)


FLASH_CASES = {
    "causal Lq<Lk": dict(Lq=3, Lk=8, causal=True),
    "causal Lq>Lk (empty rows)": dict(Lq=8, Lk=3, causal=True),
    "window both sides": dict(Lq=9, Lk=9, window_size=(2, 1)),
    "window left, causal": dict(Lq=5, Lk=11, causal=True, window_size=(3, -1)),
    "window right only": dict(Lq=6, Lk=6, window_size=(-1, 0)),
    "softcap": dict(Lq=5, Lk=7, softcap=0.7, softmax_scale=3.0),
    "alibi (H,)": dict(Lq=4, Lk=9, causal=True, alibi="H"),
    "alibi (B, H)": dict(Lq=6, Lk=6, alibi="BH", softcap=2.0),
    "gqa": dict(Lq=5, Lk=5, Hkv=2, causal=True, window_size=(1, -1)),
}


@pytest.mark.parametrize("case", list(FLASH_CASES))
def test_flash_attn_func_follows_flash_semantics(case):
    c = dict(FLASH_CASES[case])
    B, H, Hkv, Lq, Lk, D = 2, 4, c.pop("Hkv", 4), c.pop("Lq"), c.pop("Lk"), 8
    q, k, v = rand(B, Lq, H, D, seed=4), rand(B, Lk, Hkv, D, seed=5), rand(B, Lk, Hkv, D, seed=6)
    alibi = c.pop("alibi", None)
    slopes = {None: None, "H": rand(H, seed=7).abs(), "BH": rand(B, H, seed=8).abs()}[alibi]
    causal, window = c.get("causal", False), c.get("window_size", (-1, -1))
    out, lse, weights = compat.flash_attn_func(q, k, v, alibi_slopes=slopes, return_attn_probs=True, **c)
    ref_slopes = None if slopes is None else slopes.expand(B, H)
    ref, ref_lse, ref_w = dense(
        *blh(q, k, v),
        flash_visible(Lq, Lk, causal, window),
        scale=c.get("softmax_scale"),
        softcap=c.get("softcap", 0.0),
        slopes=ref_slopes,
    )
    close(out, ref.transpose(1, 2))
    close(lse, ref_lse)
    close(weights, ref_w)
    close(compat.flash_attn_func(q, k, v, alibi_slopes=slopes, **c), out)  # without the probabilities: the same


def test_flash_attn_func_refuses_what_it_cannot_read():
    q = rand(1, 4, 2, 8)
    with pytest.raises(ValueError, match=r"q must be \(B, L, H, D\), got shape \(4, 2, 8\)"):
        compat.flash_attn_func(q[0], q, q)
    with pytest.raises(TypeError, match="window_size must be a pair .* got 3"):
        compat.flash_attn_func(q, q, q, window_size=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="deterministic must be True or False, got 'yes'"):
        compat.flash_attn_func(q, q, q, deterministic="yes")  # type: ignore[arg-type]


# --- FlashAttention: flash_attn_varlen_func ------------------------------------------------------------------


def _packed(lengths_q, lengths_k, H=4, Hkv=2, D=8, Dv=8):
    q = rand(sum(lengths_q), H, D, seed=10)
    k = rand(sum(lengths_k), Hkv, D, seed=11)
    v = rand(sum(lengths_k), Hkv, Dv, seed=12)
    cu = [
        torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32) for lens in (lengths_q, lengths_k)
    ]
    return q, k, v, cu[0], cu[1]


@pytest.mark.parametrize("causal, window", [(False, (-1, -1)), (True, (-1, -1)), (True, (2, -1)), (False, (1, 2))])
def test_varlen_with_one_cu_seqlens_equals_segments_and_each_sequence_alone(causal, window):
    lengths = [3, 1, 6, 4]
    q, k, v, cu, _ = _packed(lengths, lengths)
    out, lse, weights = compat.flash_attn_varlen_func(
        q, k, v, cu, cu, 6, 6, causal=causal, window_size=window, softcap=1.5, return_attn_probs=True
    )
    segments = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))[None]
    ours = selfattn.attention(
        q.transpose(0, 1)[None],
        k.transpose(0, 1)[None],
        v.transpose(0, 1)[None],
        segments=segments,
        causal=causal,
        window=None if window == (-1, -1) else window,
        softcap=1.5,
    )
    close(out, ours[0].transpose(0, 1))
    starts = cu.tolist()
    for s, (a, b) in enumerate(pairwise(starts)):  # each sequence alone, by the anchor's rule
        one = (t[a:b].transpose(0, 1)[None] for t in (q, k, v))
        ref, ref_lse, ref_w = dense(*one, flash_visible(b - a, b - a, causal, window), softcap=1.5)
        close(out[a:b], ref[0].transpose(0, 1))
        close(lse[:, a:b], ref_lse[0])
        close(weights[:, a:b, a:b], ref_w[0])
        hidden = torch.ones(weights.shape[-1], dtype=torch.bool)
        hidden[a:b] = False
        assert (weights[:, a:b][..., hidden] == 0).all(), f"sequence {s} gives weight to another sequence"


def test_varlen_with_other_key_lengths_attends_each_sequence_alone():
    lengths_q, lengths_k = [2, 5, 0, 3], [6, 2, 3, 3]
    q, k, v, cu_q, cu_k = _packed(lengths_q, lengths_k)
    slopes = rand(4, 4, seed=13).abs()  # one row per sequence
    out, lse, weights = compat.flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, 5, 6, causal=True, alibi_slopes=slopes, return_attn_probs=True
    )
    assert weights.shape == (4, q.shape[0], k.shape[0])
    sq, sk = cu_q.tolist(), cu_k.tolist()
    for s in range(len(lengths_q)):
        (q0, q1), (k0, k1) = sq[s : s + 2], sk[s : s + 2]
        one = (q[q0:q1].transpose(0, 1)[None], k[k0:k1].transpose(0, 1)[None], v[k0:k1].transpose(0, 1)[None])
        ref, ref_lse, ref_w = dense(*one, flash_visible(q1 - q0, k1 - k0, causal=True), slopes=slopes[s : s + 1])
        close(out[q0:q1], ref[0].transpose(0, 1))
        close(lse[:, q0:q1], ref_lse[0])
        close(weights[:, q0:q1, k0:k1], ref_w[0])
    empty = slice(2, 5)  # sequence 1: 5 queries over 2 keys, bottom-right: its first 3 queries see nothing
    assert torch.isneginf(lse[:, empty]).all() and (out[empty] == 0).all() and (weights[:, empty] == 0).all()
    seen = torch.isfinite(lse)
    assert int(seen.sum()) == 4 * (q.shape[0] - 3)
    assert weights.sum(dim=-1)[seen].sub(1).abs().max() <= TIGHT
    close(compat.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 6, causal=True, alibi_slopes=slopes), out)


@pytest.mark.parametrize("lengths_k", [[3, 1, 6], [5, 2, 2]], ids=["one cu_seqlens", "other key lengths"])
def test_varlen_gradients_equal_each_sequence_alone(lengths_k):
    """Both paths (segments, and one call per sequence written into one output) carry the gradient."""
    lengths_q = [3, 1, 6]
    q, k, v, cu_q, cu_k = _packed(lengths_q, lengths_k)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = compat.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), causal=True)
    grads = torch.autograd.grad((out * out).sum(), (q, k, v))
    sq, sk = cu_q.tolist(), cu_k.tolist()
    ref = []
    for s in range(len(lengths_q)):
        (q0, q1), (k0, k1) = sq[s : s + 2], sk[s : s + 2]
        one = (q[q0:q1].transpose(0, 1)[None], k[k0:k1].transpose(0, 1)[None], v[k0:k1].transpose(0, 1)[None])
        ref.append(dense(*one, flash_visible(q1 - q0, k1 - k0, causal=True))[0][0].transpose(0, 1))
    ref_out = torch.cat(ref)
    ref_grads = torch.autograd.grad((ref_out * ref_out).sum(), (q, k, v))
    for got, expected in zip(grads, ref_grads, strict=True):
        close(got, expected, TOL["float64_grad"])


BAD_CU = {
    "float": (torch.tensor([0.0, 3.0]), TypeError, "cu_seqlens_q must be int32 or int64, got torch.float32"),
    "2-D": (torch.tensor([[0, 3]]), ValueError, r"cu_seqlens_q must be 1-D .* got shape \(1, 2\)"),
    "start": (torch.tensor([1, 3]), ValueError, r"cu_seqlens_q must start at 0, got 1 \(cu_seqlens_q = \[1, 3\]\)"),
    "decreasing": (
        torch.tensor([0, 2, 1, 3]),
        ValueError,
        r"non-decreasing: cu_seqlens_q\[2\] = 1 < cu_seqlens_q\[1\] = 2",
    ),
    "end": (torch.tensor([0, 2]), ValueError, r"must end at the total length 3, got 2"),
}


@pytest.mark.parametrize("case", list(BAD_CU))
def test_varlen_checks_cu_seqlens_and_names_the_bad_value(case):
    cu, error, message = BAD_CU[case]
    q = rand(3, 2, 8)
    good = torch.tensor([0, 3], dtype=torch.int32)
    with pytest.raises(error, match=message):
        compat.flash_attn_varlen_func(q, q, q, cu, good, 3, 3)


def test_varlen_checks_max_seqlen_and_the_number_of_sequences():
    q = rand(5, 2, 8)
    cu = torch.tensor([0, 2, 5], dtype=torch.int64)
    with pytest.raises(ValueError, match=r"max_seqlen_k = 2 is below the longest sequence of cu_seqlens_k \(3\)"):
        compat.flash_attn_varlen_func(q, q, q, cu, cu, 3, 2)
    with pytest.raises(ValueError, match="cu_seqlens_q holds 2 sequences and cu_seqlens_k 1"):
        compat.flash_attn_varlen_func(q, q, q, cu, torch.tensor([0, 5]), 3, 5)
    with pytest.raises(TypeError, match="max_seqlen_q must be an integer, got 3.0"):
        compat.flash_attn_varlen_func(q, q, q, cu, cu, 3.0, 3)  # type: ignore[arg-type]
    close(
        compat.flash_attn_varlen_func(q, q, q, cu, cu, torch.tensor(3), torch.tensor(3)),
        compat.flash_attn_varlen_func(q, q, q, cu, cu, 3, 3),
    )


# --- PyTorch SDPA ---------------------------------------------------------------------------------------------

SDPA_SHAPES = {
    # name: (q shape, k shape, v shape)
    "square": ((2, 4, 6, 8), (2, 4, 6, 8), (2, 4, 6, 5)),
    "Lq<Lk": ((2, 4, 3, 8), (2, 4, 7, 8), (2, 4, 7, 8)),
    "Lq>Lk": ((2, 4, 7, 8), (2, 4, 3, 8), (2, 4, 3, 8)),
    "mqa broadcast": ((2, 4, 5, 8), (2, 1, 9, 8), (2, 1, 9, 8)),
    "3-D": ((3, 5, 8), (3, 6, 8), (3, 6, 8)),
    "5-D batch broadcast": ((2, 3, 2, 4, 8), (1, 3, 2, 6, 8), (1, 3, 2, 6, 8)),
}
SDPA_MASKS = {
    "none": None,
    "bool (Lq, Lk)": ("bool", (-2, -1)),
    "bool (B, 1, Lq, Lk)": ("bool", "B1"),
    "float (1, Lk)": ("float", (-1,)),
    "float full": ("float", "full"),
}


def _sdpa_mask(kind, q, k):
    if kind is None:
        return None
    dtype, form = kind
    Lq, Lk = q.shape[-2], k.shape[-2]
    full = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + (Lq, Lk)
    if form == "full":
        shape = full
    elif form == "B1":
        shape = (full[0],) + (1,) * (len(full) - 3) + (Lq, Lk)
    else:
        shape = tuple(full[d] if d in form else 1 for d in range(-len(full), 0))[-2:] if form == (-2, -1) else (1, Lk)
    g = torch.Generator().manual_seed(20)
    if dtype == "bool":
        return torch.rand(shape, generator=g) > 0.3
    return torch.randn(shape, generator=g, dtype=q.dtype)


SDPA_GRID = [
    (shape, mask, is_causal)
    for shape in SDPA_SHAPES
    for mask in SDPA_MASKS
    for is_causal in (False, True)
    if not (is_causal and SDPA_MASKS[mask] is not None)  # refused: test_sdpa_refuses_what_sdpa_refuses
]


@pytest.mark.parametrize("shape, mask, is_causal", SDPA_GRID)
def test_sdpa_equals_torch_sdpa(shape, mask, is_causal):
    sq, sk, sv = SDPA_SHAPES[shape]
    q, k, v = rand(*sq, seed=21), rand(*sk, seed=22), rand(*sv, seed=23)
    m = _sdpa_mask(SDPA_MASKS[mask], q, k)
    out = compat.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=is_causal, scale=0.3)
    close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=is_causal, scale=0.3))


@pytest.mark.parametrize("Lq, Lk", [(6, 6), (3, 8), (8, 3)])
def test_sdpa_grouped_query_attention_equals_torch_sdpa(Lq, Lk):
    q, k, v = rand(2, 6, Lq, 8, seed=24), rand(2, 2, Lk, 8, seed=25), rand(2, 2, Lk, 4, seed=26)
    for causal in (False, True):
        out = compat.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True))
    m = torch.rand(Lq, Lk, generator=torch.Generator().manual_seed(27)) > 0.5
    close(
        compat.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True),
        F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True),
    )


def test_sdpa_refuses_what_sdpa_refuses():
    q, k = rand(1, 4, 3, 8), rand(1, 2, 5, 8)
    mask = torch.ones(3, 5, dtype=torch.bool)
    refusals = [
        (dict(), ValueError, "query has 4 heads, key 2 and value 2; without enable_gqa"),
        (dict(attn_mask=mask.long(), enable_gqa=True), TypeError, "attn_mask must be bool or query's dtype"),
    ]
    q3, k3, v3 = rand(4, 3, 8), rand(4, 5, 8), rand(4, 5, 8)  # shapes that PyTorch's math kernel serves
    with pytest.raises(RuntimeError, match="attn_mask should not be set when is_causal=True"):
        F.scaled_dot_product_attention(q3, k3, v3, attn_mask=mask, is_causal=True)
    with pytest.raises(ValueError, match="attn_mask and is_causal=True together are refused"):
        compat.scaled_dot_product_attention(q3, k3, v3, attn_mask=mask, is_causal=True)
    for kwargs, error, message in refusals:
        with pytest.raises(RuntimeError):  # torch's own refusal of the same call
            F.scaled_dot_product_attention(q, k, k, **kwargs)
        with pytest.raises(error, match=message):
            compat.scaled_dot_product_attention(q, k, k, **kwargs)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, rand(1, 3, 5, 8), rand(1, 3, 5, 8), enable_gqa=True)
    with pytest.raises(ValueError, match=r"heads of key \(3\) and value \(3\) must divide the heads of query \(4\)"):
        compat.scaled_dot_product_attention(q, rand(1, 3, 5, 8), rand(1, 3, 5, 8), enable_gqa=True)


# --- xFormers ---------------------------------------------------------------------------------------------------


def _blocks(lengths_q, lengths_k, causal):
    """xFormers' block-diagonal mask as its materialize() draws it: −inf everywhere but the blocks, a causal block
    lower-triangular from its top-left corner."""
    visible = torch.zeros(sum(lengths_q), sum(lengths_k), dtype=torch.bool)
    q0 = k0 = 0
    for lq, lk in zip(lengths_q, lengths_k, strict=True):
        for i in range(lq):
            for j in range(lk):
                visible[q0 + i, k0 + j] = j <= i if causal else True
        q0, k0 = q0 + lq, k0 + lk
    return visible


def _top_left(Lq, Lk):
    return torch.tensor([[j <= i for j in range(Lk)] for i in range(Lq)])


XFORMERS_CASES = {
    "none": (2, 5, 7, lambda: None, lambda Lq, Lk: None),
    "LowerTriangularMask square": (2, 6, 6, compat.LowerTriangularMask, _top_left),
    "LowerTriangularMask Mq<Mk (top-left)": (2, 3, 7, compat.LowerTriangularMask, _top_left),
    "LowerTriangularMask Mq>Mk (top-left)": (2, 7, 3, compat.LowerTriangularMask, _top_left),
    "LowerTriangularFromBottomRightMask": (
        2,
        3,
        7,
        compat.LowerTriangularFromBottomRightMask,
        lambda Lq, Lk: flash_visible(Lq, Lk, causal=True),
    ),
    "BlockDiagonalMask": (
        1,
        9,
        9,
        lambda: compat.BlockDiagonalMask.from_seqlens([2, 4, 3]),
        lambda Lq, Lk: _blocks([2, 4, 3], [2, 4, 3], False),
    ),
    "BlockDiagonalMask q≠kv": (
        1,
        6,
        10,
        lambda: compat.BlockDiagonalMask.from_seqlens([2, 1, 3], [4, 4, 2]),
        lambda Lq, Lk: _blocks([2, 1, 3], [4, 4, 2], False),
    ),
    "BlockDiagonalCausalMask": (
        1,
        9,
        9,
        lambda: compat.BlockDiagonalMask.from_seqlens([2, 4, 3]).make_causal(),
        lambda Lq, Lk: _blocks([2, 4, 3], [2, 4, 3], True),
    ),
    "BlockDiagonalCausalMask q≠kv (top-left per block)": (
        1,
        7,
        8,
        lambda: compat.BlockDiagonalCausalMask([4, 3], [2, 6]),
        lambda Lq, Lk: _blocks([4, 3], [2, 6], True),
    ),
}


@pytest.mark.parametrize("case", list(XFORMERS_CASES))
def test_memory_efficient_attention_follows_xformers_semantics(case):
    B, Mq, Mk, bias, visible = XFORMERS_CASES[case]
    q, k, v = rand(B, Mq, 4, 8, seed=30), rand(B, Mk, 4, 8, seed=31), rand(B, Mk, 4, 6, seed=32)
    out = compat.memory_efficient_attention(q, k, v, attn_bias=bias(), scale=0.4)
    ref = dense(*blh(q, k, v), visible(Mq, Mk), scale=0.4)[0].transpose(1, 2)
    close(out, ref)


def test_memory_efficient_attention_adds_a_tensor_bias_and_reads_three_dims():
    q, k, v = rand(2, 5, 3, 8, seed=33), rand(2, 6, 3, 8, seed=34), rand(2, 6, 3, 8, seed=35)
    bias = rand(2, 3, 5, 6, seed=36)
    close(
        compat.memory_efficient_attention(q, k, v, attn_bias=bias), dense(*blh(q, k, v), bias=bias)[0].transpose(1, 2)
    )
    q3, k3, v3 = q[:, :, 0], k[:, :, 0], v[:, :, 0]  # (B, M, K): one head
    close(compat.memory_efficient_attention(q3, k3, v3), dense(q3[:, None], k3[:, None], v3[:, None])[0][:, 0])


@pytest.mark.parametrize("Mq, Mk", [(5, 5), (3, 6), (6, 3)])
def test_a_lower_triangular_mask_with_a_tensor_bias_adds_it_top_left(Mq, Mk):
    q, k, v = rand(2, Mq, 3, 8, seed=37), rand(2, Mk, 3, 8, seed=38), rand(2, Mk, 3, 8, seed=39)
    bias = rand(2, 3, Mq, Mk, seed=40)
    out = compat.memory_efficient_attention(q, k, v, attn_bias=compat.LowerTriangularMask().add_bias(bias))
    close(out, dense(*blh(q, k, v), _top_left(Mq, Mk), bias=bias)[0].transpose(1, 2))


def test_memory_efficient_attention_refuses_by_name():
    q = rand(2, 4, 2, 8)
    with pytest.raises(TypeError, match="attn_bias tensor is additive .* got torch.bool"):
        compat.memory_efficient_attention(q, q, q, attn_bias=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="attn_bias must be None, a float tensor or .* got str"):
        compat.memory_efficient_attention(q, q, q, attn_bias="causal")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"q_seqlen \[2, 2\] .* needs B = 1, Mq = 4, Mk = 4; got B = 2"):
        compat.memory_efficient_attention(q, q, q, attn_bias=compat.BlockDiagonalMask.from_seqlens([2, 2]))
    with pytest.raises(TypeError, match="add_bias takes an additive float tensor, got torch.bool"):
        compat.LowerTriangularMask().add_bias(torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"q_seqlen has 2 blocks and kv_seqlen 3"):
        compat.BlockDiagonalMask.from_seqlens([2, 2], [1, 1, 2])
    with pytest.raises(ValueError, match=r"q_seqlen must hold lengths >= 0, got \[2, -1\]"):
        compat.BlockDiagonalMask.from_seqlens([2, -1])


# --- other libraries' keywords on selfattn.attention ----------------------------------------------------------

NEW_FOREIGN = {
    "deterministic": "write nothing .*selfattn.compat.flash_attn_func",
    "return_attn_probs": "write return_weights=True, return_lse=True",
    "cu_seqlens_q": "write segments= .*selfattn.compat.flash_attn_varlen_func",
    "cu_seqlens_k": "write segments= .*selfattn.compat.flash_attn_varlen_func",
    "max_seqlen_q": "write nothing",
    "attn_bias": "write mask= .*selfattn.compat.memory_efficient_attention",
    "p": "write dropout_p=",
    "dropout": "write dropout_p=",
    "scaling": "write scale=",
    "cu_seq_lens_q": "write segments=",
    "key_padding_mask": r"write mask=~key_padding_mask\[:, None, None, :\]",
    "need_weights": "write return_weights=True",
}


@pytest.mark.parametrize("name", list(NEW_FOREIGN))
def test_other_libraries_keywords_name_the_selfattn_way(name):
    assert name in FOREIGN_KEYWORDS
    q = rand(1, 2, 3, 4)
    with pytest.raises(TypeError, match=rf"attention\(\) has no {name}= \(.*'s name\): {NEW_FOREIGN[name]}"):
        selfattn.attention(q, q, q, **{name: None})
