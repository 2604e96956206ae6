import numpy as np
import pytest
import torch

from selfattn import KVCache, MultiHeadSelfAttention, SelfAttention, reference

from .tolerances import TOL


def test_self_attention_is_the_tutorial_head():
    torch.manual_seed(0)
    head = SelfAttention(128).double()
    x = torch.randn(10, 128, dtype=torch.float64)
    out = head(x)
    assert out.shape == (10, 128)  # 10×128 in, 10×128 out
    t = reference.self_attention(
        x.numpy(),
        head.w_q.weight.detach().T.numpy(),
        head.w_k.weight.detach().T.numpy(),
        head.w_v.weight.detach().T.numpy(),
    )
    np.testing.assert_allclose(out.detach().numpy(), t.output, atol=TOL["float64"])
    assert head(x[None].repeat(3, 1, 1)).shape == (3, 10, 128)


def test_self_attention_d_k_and_non_causal():
    head = SelfAttention(16, d_k=4, causal=False).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    assert head.w_q.weight.shape == (4, 16) and head(x).shape == x.shape
    t = reference.self_attention(
        x[1].numpy(),
        head.w_q.weight.detach().T.numpy(),
        head.w_k.weight.detach().T.numpy(),
        head.w_v.weight.detach().T.numpy(),
        causal=False,
    )
    np.testing.assert_allclose(head(x)[1].detach().numpy(), t.output, atol=TOL["float64"])


@pytest.mark.parametrize("n_heads, n_kv_heads", [(4, None), (4, 2), (4, 1)])
def test_multi_head_matches_reference_per_head(n_heads, n_kv_heads):
    torch.manual_seed(1)
    mha = MultiHeadSelfAttention(32, n_heads, n_kv_heads).double().eval()
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    q, k, v = mha.project(x)
    G = n_heads // (n_kv_heads or n_heads)
    heads = []
    for h in range(n_heads):
        heads.append(
            reference.attention(
                q[:, h : h + 1].detach().numpy(),
                k[:, h // G : h // G + 1].detach().numpy(),
                v[:, h // G : h // G + 1].detach().numpy(),
                causal=True,
            )[0]
        )
    o = torch.from_numpy(np.concatenate(heads, axis=1))
    assert torch.allclose(mha(x), mha.merge(o), atol=TOL["float64"])


def test_multi_head_padding_mask_and_shapes():
    mha = MultiHeadSelfAttention(24, 3, causal=False, head_dim=5)
    x = torch.randn(2, 6, 24)
    pad = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    pad[1, ..., 4:] = False
    out = mha(x, mask=pad)
    assert out.shape == x.shape
    x2 = x.clone()
    x2[1, 4:] = 1e3  # padded positions must not influence the others
    assert torch.allclose(mha(x2, mask=pad)[1, :4], out[1, :4], atol=TOL["float32"])
    assert mha(x[0]).shape == (6, 24)


@pytest.mark.parametrize("n_kv_heads", [None, 1])
def test_kv_cache_decoding_equals_full_pass(n_kv_heads):
    torch.manual_seed(2)
    mha = MultiHeadSelfAttention(32, 4, n_kv_heads).eval()
    x = torch.randn(2, 40, 32)
    with torch.no_grad():
        full = mha(x)
        cache = KVCache()
        prefix = mha(x[:, :5], cache=cache)
        steps = [mha(x[:, i : i + 1], cache=cache) for i in range(5, 40)]
    assert len(cache) == 40 and cache.keys.shape == (2, n_kv_heads or 4, 40, 8)
    torch.testing.assert_close(torch.cat([prefix, *steps], 1), full, atol=TOL["float32"], rtol=TOL["float32"])


def test_kv_cache_refuses_mismatched_appends():
    cache = KVCache()
    cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match=r"\(1, 2, 4\).*\(1, 3, 4\)"):
        cache.append(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
    cache.reset()
    assert len(cache) == 0 and cache.keys is None


def test_dropout_only_in_training():
    mha = MultiHeadSelfAttention(16, 2, dropout=0.5)
    x = torch.randn(1, 8, 16)
    mha.eval()
    assert torch.equal(mha(x), mha(x))
    mha.train()
    torch.manual_seed(0)
    a = mha(x)
    assert not torch.allclose(a, mha(x))


@pytest.mark.parametrize(
    "make, err, match",
    [
        (lambda: SelfAttention(0), ValueError, "d_model must be >= 1, got 0"),
        (lambda: SelfAttention(8, d_k=2.0), TypeError, "d_k must be an int, got float 2.0"),
        (lambda: SelfAttention(8, causal=1), TypeError, "causal must be a bool"),
        (lambda: MultiHeadSelfAttention(10, 4), ValueError, "d_model=10 is not divisible by n_heads=4"),
        (lambda: MultiHeadSelfAttention(16, 4, 3), ValueError, "n_heads=4 is not a multiple of n_kv_heads=3"),
        (lambda: MultiHeadSelfAttention(16, 4, dropout=1.5), ValueError, "dropout must be < 1, got 1.5"),
        (
            lambda: SelfAttention(8)(torch.zeros(3, 7)),
            ValueError,
            "x has d_model=7 but the module was built for d_model=8",
        ),
        (lambda: SelfAttention(8)(torch.zeros(8)), ValueError, r"got shape \(8,\)"),
        (
            lambda: MultiHeadSelfAttention(8, 2)(torch.zeros(1, 3, 8), cache=[]),
            TypeError,
            "cache must be a KVCache, got list",
        ),
    ],
)
def test_bad_module_arguments_are_named(make, err, match):
    with pytest.raises(err, match=match):
        make()


def test_a_refused_call_does_not_grow_the_cache():
    mha = MultiHeadSelfAttention(16, 4).eval()
    cache = KVCache()
    with torch.no_grad():
        mha(torch.randn(1, 5, 16), cache=cache)
        with pytest.raises(ValueError, match="does not broadcast"):
            mha(torch.randn(1, 3, 16), cache=cache, mask=torch.ones(3, 3, dtype=torch.bool))  # needs Lk = 8
        assert len(cache) == 5
        refusing = MultiHeadSelfAttention(16, 4, dropout=0.5, backend="tiled").train()
        with pytest.raises(ValueError, match="no dropout"):  # refused by the backend
            refusing(torch.randn(1, 3, 16), cache=cache)
        assert len(cache) == 5
        mha(torch.randn(1, 3, 16), cache=cache, mask=torch.ones(3, 8, dtype=torch.bool))
    assert len(cache) == 8


@pytest.mark.parametrize(
    "k, v, match",
    [
        (torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 5), r"values of \(B, Hkv, D\) = \(1, 2, 4\).*\(1, 2, 5\)"),
        (torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 2, 4), r"k and v must agree on \(B, Hkv, Ln\)"),
        (torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4, dtype=torch.float64), "k and v must agree.*float64"),
        (torch.zeros(1, 2, 1, 4), torch.zeros(2, 1, 4), "v must be 4-D"),
    ],
)
def test_kv_cache_names_mismatched_values(k, v, match):
    cache = KVCache()
    cache.append(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match=match):
        cache.append(k, v)
    assert len(cache) == 3


@pytest.mark.parametrize("module", [SelfAttention(8), MultiHeadSelfAttention(8, 2)], ids=["single", "multi"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16], ids=str)
def test_input_dtype_other_than_the_weights_is_named(module, dtype):
    with pytest.raises(TypeError, match=f"x has dtype {dtype} but the module's weights are torch.float32"):
        module(torch.zeros(3, 8, dtype=dtype))


class _RecordingRing:
    """Stands in for `selfattn.distributed.ContextParallel` in one process: records what the module passes and
    runs plain attention over the given rows (the real ring is tested in real processes, tests/distributed)."""

    def __init__(self):
        self.calls = []

    def attention(self, q, k, v, *, causal, scale, backend):
        from selfattn import attention

        self.calls.append(dict(shapes=(tuple(q.shape), tuple(k.shape)), causal=causal, scale=scale, backend=backend))
        return attention(q, k, v, causal=causal, scale=scale, backend=backend)


@pytest.mark.parametrize("n_kv_heads, causal", [(None, True), (1, False)])
def test_context_parallel_sends_the_attention_call_to_the_ring(n_kv_heads, causal):
    mha = MultiHeadSelfAttention(16, 4, n_kv_heads, causal=causal).double().eval()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    ring = _RecordingRing()
    assert torch.allclose(mha(x, context_parallel=ring), mha(x), atol=TOL["float64"])
    assert torch.allclose(mha(x[0], context_parallel=ring), mha(x[0]), atol=TOL["float64"])  # (L, d_model) too
    Hkv = n_kv_heads or 4
    assert ring.calls[0] == dict(
        shapes=((2, 4, 6, 4), (2, Hkv, 6, 4)), causal=causal, scale=mha.scale, backend="auto"
    )  # GQA K/V handed over un-expanded


def test_context_parallel_refuses_mask_cache_dropout_by_name():
    from selfattn.distributed import ContextParallel

    cp = ContextParallel(seq_len=12)  # refused before anything is sent: no process group needed
    mha = MultiHeadSelfAttention(8, 2).eval()
    x = torch.randn(1, 6, 8)
    with pytest.raises(ValueError, match="does not support a mask"):
        mha(x, mask=torch.ones(6, 6, dtype=torch.bool), context_parallel=cp)
    cache = KVCache()
    with pytest.raises(ValueError, match="does not support a KV cache"):
        mha(x, cache=cache, context_parallel=cp)
    assert len(cache) == 0
    dropping = MultiHeadSelfAttention(8, 2, dropout=0.1).train()
    with pytest.raises(ValueError, match=r"attention dropout \(dropout=0.1, training\)"):
        dropping(x, context_parallel=cp)
    with pytest.raises(TypeError, match="context_parallel must be a selfattn.distributed.ContextParallel, got str"):
        mha(x, context_parallel="ring")
    with pytest.raises(RuntimeError, match="torch.distributed is not initialised"):
        mha(x, context_parallel=cp)  # a valid call, but this process has no group


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(layout="striped"), ValueError, "unknown layout 'striped'"),
        (dict(seq_len=0), ValueError, "seq_len must be >= 1, got 0"),
        (dict(seq_len=2.5), TypeError, "seq_len"),
    ],
)
def test_context_parallel_arguments_are_named(kwargs, err, match):
    from selfattn.distributed import ContextParallel

    with pytest.raises(err, match=match):
        ContextParallel(**kwargs)


@pytest.mark.parametrize(
    "build, match",
    [
        (
            lambda: SelfAttention(1 << 20),
            r"SelfAttention\(d_model=1048576, d_k=1048576\) describes about [\d,]+ parameters",
        ),
        (lambda: SelfAttention(10**30), "over the limit of 100,000,000,000"),
        (lambda: MultiHeadSelfAttention(10**6, 1), r"MultiHeadSelfAttention\(d_model=1000000, n_heads=1"),
        (lambda: MultiHeadSelfAttention(8, 2, head_dim=1 << 30), "head_dim=1073741824"),
    ],
)
def test_a_module_too_big_for_memory_is_refused_before_any_weight(build, match):
    """issue 11's hostile run: these raised torch's "can't allocate memory" (or an overflow) from deep inside."""
    with pytest.raises(ValueError, match=match):
        build()


@pytest.mark.parametrize("make", [lambda x: x.to_sparse(), lambda x: torch.nested.nested_tensor([x, x])])
def test_a_sparse_or_nested_input_is_named(make):
    mha = MultiHeadSelfAttention(8, 2)
    with pytest.raises(TypeError, match=r"x (has layout|is a nested tensor)"):
        mha(make(torch.randn(3, 8)))
