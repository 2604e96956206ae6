"""transformers models that need the new score features run with attn_implementation="selfattn" equal to
"eager": gpt-oss (attention sinks, `s_aux`), ModernBERT (two-sided sliding windows) and a packed batch on
Llama (position_ids that restart → segments). Tiny random configurations, built offline."""

from __future__ import annotations

import pytest
import torch
import transformers

import selfattn
import selfattn.hf
from tests.hf.models import VOCAB, build, gpt_oss_config
from tests.tolerances import TOL, max_error

selfattn.hf.register()


def _tiny(config, cls, attn):
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():
        for p in model.parameters():  # peaked attention and visible sinks
            if p.dim() == 1 and p.shape[0] == config.num_attention_heads:
                p.normal_(0.0, 2.0)
    model.set_attn_implementation(attn)
    return model


def _gpt_oss(attn):
    config = gpt_oss_config()
    return _tiny(config, transformers.GptOssForCausalLM, attn)


def _modernbert(attn):
    config = transformers.ModernBertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        local_attention=4,
        global_attn_every_n_layers=2,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        cls_token_id=1,
        sep_token_id=2,
    )
    return _tiny(config, transformers.ModernBertModel, attn)


def _ids(batch=2, length=11, seed=0):
    return torch.randint(4, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def _calls(model, *args, **kwargs):
    """The model's output and the selfattn requests its attention layers made."""
    seen = []

    def record(request, compute):
        seen.append(request)
        return compute(request)

    with torch.no_grad(), selfattn.intercept(record):
        out = model(*args, **kwargs)
    return out, seen


def test_gpt_oss_sinks_equal_eager():
    eager, ours = _gpt_oss("eager"), _gpt_oss("selfattn")
    ids = _ids()
    with torch.no_grad():
        want = eager(ids).logits
    got, requests = _calls(ours, ids)
    assert max_error(got.logits, want) <= TOL["hf_selfattn_vs_eager"]
    assert requests and all(r.rule.sinks is not None and r.mask is None for r in requests)


def test_modernbert_two_sided_windows_equal_eager():
    eager, ours = _modernbert("eager"), _modernbert("selfattn")
    ids = _ids(length=13)
    attention_mask = torch.ones_like(ids)
    attention_mask[1, -3:] = 0  # padding too
    with torch.no_grad():
        want = eager(ids, attention_mask=attention_mask).last_hidden_state
    got, requests = _calls(ours, ids, attention_mask=attention_mask)
    real = attention_mask.bool()  # a padding query that sees no key: eager spreads it uniformly, selfattn gives 0
    assert max_error(got.last_hidden_state[real], want[real]) <= TOL["hf_selfattn_vs_eager"]
    assert (2, 2) in [r.window for r in requests]  # local_attention 4: |i − j| <= 2, as a rule, not a mask


@pytest.mark.parametrize("kind", ["llama"])
def test_a_packed_batch_runs_on_segments_equal_to_eager(kind):
    """Three sequences packed into one row (position_ids restart, no cache: transformers' packed path): the
    block-diagonal mask becomes segments; with a cache transformers does not pack, and neither does selfattn."""
    eager, ours = build(kind, "eager"), build(kind, "selfattn")
    ids = _ids(batch=1, length=12)
    position_ids = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4]])
    with torch.no_grad():
        want = eager(ids, position_ids=position_ids, use_cache=False).logits
        cached = eager(ids, position_ids=position_ids).logits
    got, requests = _calls(ours, ids, position_ids=position_ids, use_cache=False)
    assert max_error(got.logits, want) <= TOL["hf_selfattn_vs_eager"]
    assert requests and all(r.rule.segments is not None and r.mask is None for r in requests)
    assert requests[0].rule.segments.tolist() == [[0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2]]
    got, requests = _calls(ours, ids, position_ids=position_ids)
    assert max_error(got.logits, cached) <= TOL["hf_selfattn_vs_eager"]
    assert all(r.rule.segments is None for r in requests)
