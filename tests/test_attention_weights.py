"""attention_weights(q, k, lse, rows=...): exact rows of weights from a fused kernel's saved lse."""

import pytest
import torch

import selfattn

from .helpers import make_inputs
from .tolerances import TOL, max_error

FEATURES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(causal=True, window=5),
    "bool-mask": dict(mask="bool", causal=True),
    "additive-mask": dict(mask="additive"),
    "softcap-scale": dict(softcap=1.5, scale=0.4),
}


def inputs(B=2, Hq=4, Hkv=2, Lq=23, Lk=31, D=8, dtype=torch.float64, seed=0):
    return make_inputs(B, Hq, Hkv, Lq, Lk, D, dtype=dtype, seed=seed)


def resolve(feature, Lq, Lk):
    f = dict(FEATURES[feature])
    g = torch.Generator().manual_seed(1)
    if f.get("mask") == "bool":
        f["mask"] = torch.rand(1, 4, Lq, Lk, generator=g) > 0.3
        f["mask"][:, :, 3] = False  # a row that sees nothing
    elif f.get("mask") == "additive":
        f["mask"] = torch.randn(Lq, Lk, generator=g, dtype=torch.float64)
    return f


@pytest.mark.parametrize("lse_from", ["tiled", "naive"])
@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_rows_equal_the_naive_weights(feature, lse_from):
    q, k, v = inputs()
    f = resolve(feature, 23, 31)
    lse = selfattn.attention(q, k, v, return_lse=True, backend=lse_from, **f).lse
    naive = selfattn.attention(q, k, v, return_weights=True, backend="naive", **f).weights
    rows = [0, 3, 7, 22]
    got = selfattn.attention_weights(q, k, lse, rows=rows, **f)
    assert got.shape == (2, 4, 4, 31) and got.dtype == torch.float64
    assert max_error(got, naive[:, :, rows]) < TOL["float64"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_low_precision_inputs_give_float32_weights(dtype):
    q, k, v = inputs(dtype=dtype)
    lse = selfattn.attention(q, k, v, causal=True, return_lse=True, backend="tiled").lse
    naive = selfattn.attention(q, k, v, causal=True, return_weights=True, backend="naive").weights
    got = selfattn.attention_weights(q, k, lse, rows=slice(None), causal=True)
    assert got.dtype == torch.float32
    assert max_error(got, naive) < TOL["float32"]


@pytest.mark.parametrize(
    "rows, want",
    [
        (None, list(range(23))),
        (5, [5]),
        (-1, [22]),
        ([0, -1, 4], [0, 22, 4]),
        ((2, 2), [2, 2]),
        (slice(3, 12, 4), [3, 7, 11]),
        (torch.tensor([1, 20]), [1, 20]),
        (range(3), [0, 1, 2]),
    ],
)
def test_row_forms(rows, want):
    q, k, v = inputs()
    res = selfattn.attention(q, k, v, causal=True, return_weights=True, return_lse=True, backend="naive")
    got = selfattn.attention_weights(q, k, res.lse, rows=rows, causal=True)
    assert max_error(got, res.weights[:, :, want]) < TOL["float64"]


def test_a_row_that_sees_nothing_is_zero_and_rows_sum_to_one():
    q, k, v = inputs(Lq=40, Lk=20)
    lse = selfattn.attention(q, k, v, causal=True, return_lse=True, backend="tiled").lse
    w = selfattn.attention_weights(q, k, lse, rows=[0, 19, 20, 39], causal=True)  # Lq > Lk: rows < 20 see nothing
    assert (w[:, :, :2] == 0).all()
    assert torch.allclose(w[:, :, 2:].sum(-1), torch.ones(2, 4, 2, dtype=torch.float64), atol=TOL["float64"])


def test_long_input_without_the_full_matrix():
    # 8192² weights of 8 heads would be 2 GiB; two rows are 512 KiB
    q, k, v = inputs(B=1, Hq=8, Hkv=2, Lq=8192, Lk=8192, D=16, dtype=torch.float32)
    out = selfattn.attention(q, k, v, causal=True, window=1000, return_lse=True, backend="tiled")
    w = selfattn.attention_weights(q, k, out.lse, rows=[5000, -1], causal=True, window=1000)
    assert w.shape == (1, 8, 2, 8192)
    assert torch.allclose(w.sum(-1), torch.ones(1, 8, 2), atol=TOL["float32"])
    assert (w[..., : 5000 - 999][:, :, 0] == 0).all() and (w[:, :, 0, 5001:] == 0).all()
    # weights · V of a row is that row's output
    row = torch.einsum("bhk,bhkd->bhd", w[:, :, 1], v.repeat_interleave(4, dim=1))
    assert max_error(row, out.output[:, :, -1]) < TOL["float32"]


def test_errors_name_the_values():
    q, k, v = inputs()
    lse = selfattn.attention(q, k, v, return_lse=True).lse
    with pytest.raises(ValueError, match=r"row 23 is out of range for Lq=23 query rows \(valid: -23 to 22\)"):
        selfattn.attention_weights(q, k, lse, rows=[0, 23])
    with pytest.raises(ValueError, match="row -24 is out of range"):
        selfattn.attention_weights(q, k, lse, rows=-24)
    with pytest.raises(TypeError, match=r"rows\[0\] must be an int, got float 1.5"):
        selfattn.attention_weights(q, k, lse, rows=[1.5])
    with pytest.raises(TypeError, match="1-D and integer"):
        selfattn.attention_weights(q, k, lse, rows=torch.tensor([[1]]))
    with pytest.raises(TypeError, match="rows must be None, an int"):
        selfattn.attention_weights(q, k, lse, rows=object())
    with pytest.raises(ValueError, match=r"lse has shape \(2, 4, 22\) but q and k need \(B, Hq, Lq\) = \(2, 4, 23\)"):
        selfattn.attention_weights(q, k, lse[:, :, 1:])
    with pytest.raises(TypeError, match="lse must be a torch.Tensor"):
        selfattn.attention_weights(q, k, lse.tolist())
    with pytest.raises(ValueError, match="k has D=4 but q has D=8"):  # the same validation as attention()
        selfattn.attention_weights(q, k[..., :4], lse)
    with pytest.raises(ValueError, match="window must be >= 1, got 0"):
        selfattn.attention_weights(q, k, lse, window=0)


def test_weights_from_lse_is_the_one_formula():
    from selfattn.weights import weights_from_lse

    inf = float("inf")
    s = torch.tensor([[0.5, -inf, 1.5], [-inf, -inf, -inf]], dtype=torch.float64)
    lse = torch.logsumexp(s, dim=-1)  # second row sees nothing: −inf
    w = weights_from_lse(s, lse)
    assert torch.equal(w[1], torch.zeros(3, dtype=torch.float64)) and w[0, 1] == 0
    assert abs(w[0].sum().item() - 1) < TOL["float64_few_ops"]
    base2 = weights_from_lse(s * 1.4426950408889634, lse * 1.4426950408889634, base2=True)
    assert max_error(base2, w) < TOL["float64"]
    scratch = s.clone()
    assert weights_from_lse(scratch, lse, inplace=True) is scratch and torch.equal(scratch, w)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_an_lse_holding_nan_or_plus_inf_is_refused(bad):
    """A NaN or +inf log-sum-exp gave NaN or all-zero weights without a word (issue 11's hostile run)."""
    q, k, v = make_inputs(1, 2, 2, 4, 4, 3)
    lse = selfattn.attention(q, k, v, causal=True, return_lse=True, backend="naive").lse
    lse[0, 1, 2] = bad
    with pytest.raises(ValueError, match=r"lse holds NaN or \+inf"):
        selfattn.attention_weights(q, k, lse, causal=True)
    lse[0, 1, 2] = float("-inf")  # −inf is a row that sees nothing: accepted
    assert selfattn.attention_weights(q, k, lse, rows=2, causal=True)[0, 1].abs().sum() == 0
