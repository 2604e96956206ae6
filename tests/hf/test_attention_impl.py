"""attn_implementation="selfattn" computes what "eager" computes, on every architecture served."""

import pytest
import torch
import transformers

import selfattn.hf
from tests.hf.models import CONFIGS, DECODERS, VOCAB, build
from tests.tolerances import TOL, max_error

L = 9

selfattn.hf.register()


def _pair(kind):
    return build(kind, "eager"), build(kind, "selfattn")


def _ids(seed=0, batch=2):
    return torch.randint(4, VOCAB, (batch, L), generator=torch.Generator().manual_seed(seed))


def _main(out):
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_prefill_and_attentions_equal_eager(kind):
    eager, ours = _pair(kind)
    ids = _ids()
    with torch.no_grad():
        a, b = eager(ids, output_attentions=True), ours(ids, output_attentions=True)
    assert max_error(_main(b), _main(a)) <= TOL["hf_selfattn_vs_eager"]
    assert len(b.attentions) == len(a.attentions) == 2
    for wa, wb in zip(a.attentions, b.attentions, strict=False):
        assert wb.shape == wa.shape and max_error(wb, wa) <= TOL["hf_selfattn_vs_eager"]


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_padding_in_a_batch_equals_eager(kind):
    eager, ours = _pair(kind)
    ids = _ids(1)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding (decoders) / masked keys (BERT)
    with torch.no_grad():
        a, b = _main(eager(ids, attention_mask=mask)), _main(ours(ids, attention_mask=mask))
    real = mask.bool()  # padded rows are not compared: nobody reads them
    assert max_error(b[real], a[real]) <= TOL["hf_selfattn_vs_eager"]


@pytest.mark.parametrize("kind", DECODERS)
def test_cached_decoding_token_by_token_equals_eager(kind):
    """Lq = 1 against a growing cache (Lk = 1, 2, …): bottom-right causal, and the sliding window cache."""
    eager, ours = _pair(kind)
    ids = _ids(2, batch=1)
    with torch.no_grad():
        full = eager(ids).logits
        cache, steps = None, []
        for i in range(L):
            out = ours(ids[:, i : i + 1], cache=cache, use_cache=True)
            cache = out.past_key_values
            steps.append(out.logits)
    assert max_error(torch.cat(steps, 1), full) <= TOL["hf_selfattn_vs_eager"]


@pytest.mark.parametrize("kind", ["llama", "gemma2"])
def test_chunked_prefill_with_a_cache_equals_eager(kind):
    """Lq = 4 new tokens after 5 cached ones: Lq < Lk with a materialised mask."""
    eager, ours = _pair(kind)
    ids = _ids(3, batch=1)
    with torch.no_grad():
        full = eager(ids).logits
        first = ours(ids[:, :5], use_cache=True)
        rest = ours(ids[:, 5:], cache=first.past_key_values, use_cache=True)
    assert max_error(torch.cat([first.logits, rest.logits], 1), full) <= TOL["hf_selfattn_vs_eager"]


def test_semantics_it_cannot_honour_are_refused():
    model = build("llama", "selfattn")
    attn = model.model.layers[0].self_attn
    q = torch.randn(1, 4, 3, 8)
    k = v = torch.randn(1, 2, 3, 8)
    with pytest.raises(ValueError, match="cannot honour 'head_mask'"):
        selfattn.hf.attention_forward(attn, q, k, v, None, head_mask=torch.ones(4))
    out, weights = selfattn.hf.attention_forward(attn, q, k, v, None, position_ids=torch.arange(3), s_aux=None)
    assert out.shape == (1, 3, 4, 8) and weights is None


def test_register_is_idempotent_and_reaches_every_layer():
    assert selfattn.hf.register() == selfattn.hf.register() == "selfattn"
    model = build("qwen2", "selfattn")
    calls = []

    def count(request, compute):
        calls.append(request.q.shape)
        return compute(request)

    with selfattn.intercept(count), torch.no_grad():
        model(_ids(batch=1))
    assert calls == [(1, 4, L, 8)] * 2  # GQA K/V arrive un-repeated: the request has Hq=4, Hkv=2
    assert isinstance(model.config, transformers.PretrainedConfig)
