"""`attention_maps`: the weights the probe reads, recorded at the attention call of an ordinary forward pass
(issue 16: DecoderLM.attention_weights re-implemented the forward pass for the probe)."""

from __future__ import annotations

import math

import pytest
import torch

import selfattn
from selfattn.functional import use_backend
from selfattn.model.decoder import DecoderConfig, DecoderLM
from selfattn.model.tutorial_probe import attention_maps
from tests.tolerances import TOL

V = 37


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return DecoderLM(DecoderConfig(vocab_size=V, d_model=24, n_layers=2, n_heads=3, max_len=20)).double().eval()


def _by_hand(model: DecoderLM, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Plain PyTorch, float64: each block written out, its weights softmax(q·kᵀ/√D, causal)."""
    B, L = ids.shape
    H, D = model.config.n_heads, model.config.d_model // model.config.n_heads
    x = model.tok_emb(ids) + model.pos_emb(torch.arange(L))
    future = torch.ones(L, L, dtype=torch.bool).triu(1)
    maps = []
    for block in model.blocks:
        h = block.ln_1(x)
        q, k, v = (
            proj(h).view(B, L, H, D).transpose(1, 2)
            for proj in (block.attn.q_proj, block.attn.k_proj, block.attn.v_proj)
        )
        scores = (q @ k.transpose(-1, -2) / math.sqrt(D)).masked_fill(future, float("-inf"))
        w = torch.softmax(scores, dim=-1)  # (B, H, L, L)
        maps.append(w)
        x = x + block.attn.out_proj((w @ v).transpose(1, 2).reshape(B, L, H * D))
        x = x + block.mlp(block.ln_2(x))
    return model.lm_head(model.ln_f(x)), maps


@torch.no_grad()
def test_the_maps_are_the_weights_of_the_forward_pass(model):
    ids = torch.randint(0, V, (2, 7), generator=torch.Generator().manual_seed(1))
    logits, maps = attention_maps(model, ids)
    want_logits, want_maps = _by_hand(model, ids)
    assert len(maps) == 2 and maps[0].shape == (2, 3, 7, 7)
    for got, want in zip(maps, want_maps, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=TOL["float64"])
        assert torch.all(got.triu(1) == 0)
    torch.testing.assert_close(logits, want_logits, rtol=0, atol=TOL["float64"])
    torch.testing.assert_close(logits, model(ids), rtol=0, atol=TOL["float64"])


@torch.no_grad()
def test_one_row_drops_b_and_nothing_stays_intercepted(model):
    ids = torch.randint(0, V, (6,), generator=torch.Generator().manual_seed(2))
    logits, maps = attention_maps(model, ids)
    assert logits.shape == (6, V) and maps[1].shape == (3, 6, 6)
    torch.testing.assert_close(maps[1], _by_hand(model, ids[None])[1][1][0], rtol=0, atol=TOL["float64"])
    q = torch.randn(1, 1, 3, 4, dtype=torch.float64)
    assert selfattn.attention(q, q, q).shape == (1, 1, 3, 4)  # a plain call after the probe: no weights asked


@torch.no_grad()
def test_the_maps_come_whatever_backend_training_chose(model):
    """Training runs under use_backend("sdpa"), which builds no weights; the probe still gets them."""
    ids = torch.randint(0, V, (1, 5), generator=torch.Generator().manual_seed(3))
    with use_backend("sdpa"):
        _, maps = attention_maps(model, ids)
    torch.testing.assert_close(maps[0], _by_hand(model, ids)[1][0], rtol=0, atol=TOL["float64"])
