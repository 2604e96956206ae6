"""transformers' packed-sequence keywords (cu_seq_lens_q/k, max_length_q/k) through the "selfattn" implementation.

DataCollatorWithFlattening(return_flash_attn_kwargs=True) packs a batch into one row and hands the model the
boundaries; transformers passes them, through the model's **kwargs, to every attention call. The packed logits
must equal each sequence run alone with transformers' eager attention (float32: eager takes its softmax in
float32 whatever the model's dtype, so the bound is the one every selfattn-against-eager comparison uses).
"""

from __future__ import annotations

import pytest
import torch
import transformers

import selfattn.hf
from tests.hf.models import build
from tests.tolerances import TOL, max_error

LENGTHS = (5, 3, 7)


def _sequences() -> list[list[int]]:
    g = torch.Generator().manual_seed(3)
    return [torch.randint(4, 100, (n,), generator=g).tolist() for n in LENGTHS]


def _packed_batch() -> dict:
    collator = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True)
    batch = collator([{"input_ids": ids} for ids in _sequences()])
    batch.pop("labels")
    return dict(batch)


@pytest.mark.parametrize("use_cache", [True, False])
def test_packed_sequences_by_cu_seq_lens_equal_each_sequence_alone(use_cache):
    """With a cache, transformers draws no packed mask (only the boundaries tell the sequences apart); without
    one, its mask is block-diagonal too and the boundaries agree with it."""
    selfattn.hf.register()
    model = build("llama", "selfattn")
    batch = _packed_batch()
    assert batch["cu_seq_lens_q"].tolist() == [0, 5, 8, 15] and batch["max_length_q"] == 7
    with torch.no_grad():
        packed = model(**batch, use_cache=use_cache).logits[0]  # (15, vocab)
        model.set_attn_implementation("eager")
        alone = [model(torch.tensor([ids])).logits[0] for ids in _sequences()]
    assert max_error(packed, torch.cat(alone)) <= TOL["hf_selfattn_vs_eager"]


def test_without_the_boundaries_a_cached_pass_mixes_the_sequences():
    """The control: the same packed row with a cache and no cu_seq_lens is one long sequence (transformers skips
    the mask), so the boundaries above are what separates them."""
    selfattn.hf.register()
    model = build("llama", "selfattn")
    batch = _packed_batch()
    with torch.no_grad():
        mixed = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=True).logits[0]
        model.set_attn_implementation("eager")
        alone = torch.cat([model(torch.tensor([ids])).logits[0] for ids in _sequences()])
    assert max_error(mixed, alone) > TOL["must_differ_logits"]


def test_bad_boundaries_are_refused_by_value():
    model = build("llama", "selfattn")
    attn = model.model.layers[0].self_attn
    q, k = torch.randn(1, 4, 6, 8), torch.randn(1, 2, 6, 8)
    cu = torch.tensor([0, 2, 6], dtype=torch.int32)
    cases = [
        (dict(cu_seq_lens_q=cu), "only cu_seq_lens_q was given"),
        (dict(cu_seq_lens_q=cu, cu_seq_lens_k=torch.tensor([0, 3, 6])), r"cu_seq_lens_q \[0, 2, 6\] and cu_seq_lens_k"),
        (dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=3), r"max_length_q = 3 is below the longest .* \(4\)"),
        (dict(cu_seq_lens_q=cu[:2], cu_seq_lens_k=cu[:2]), "must end at the total length 6, got 2"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            selfattn.hf.attention_forward(attn, q, k, k, None, **kwargs)
    with pytest.raises(ValueError, match=r"one row of Lq = Lk tokens; got B = 2"):
        selfattn.hf.attention_forward(
            attn, q.expand(2, -1, -1, -1), k.expand(2, -1, -1, -1), k, None, cu_seq_lens_q=cu, cu_seq_lens_k=cu
        )
