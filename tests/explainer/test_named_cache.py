"""`Explanation.cache` (`named_cache.NamedCache`): every name's tensor equals what plain transformers hooks read
from the same weights run by transformers' own eager attention (tiny Llama with RoPE and GQA, tiny GPT-2):
forward hooks on the projections, the attention module and the decoder layers, `output_attentions=True` for
the pattern, each head alone through the output projection for hook_result, transformers' own
`apply_rotary_pos_emb` for Llama's rotated queries and keys."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import selfattn
from selfattn.explainer.named_cache import ATTENTION_HOOKS, BLOCK_HOOKS, NamedCache, act_name
from tests.hf import models
from tests.tolerances import TOL

TEXT = "a blue monster walks into the forest"
CLOSE = TOL["float32_hf_stages"]


def _reference(kind: str, ids: torch.Tensor) -> list[dict]:
    """Per layer {input, q, k, v, pattern, z, attn_out, resid_post} from plain hooks on an eager copy."""
    model = models.build(kind, attn="eager", seed=0)
    blocks = model.transformer.h if kind == "gpt2" else model.model.layers
    seen: list[dict] = [{} for _ in blocks]
    handles = []
    for l, block in enumerate(blocks):
        attn = block.attn if kind == "gpt2" else block.self_attn

        def pre(m, args, kwargs, l=l):
            seen[l]["input"] = (args[0] if args else kwargs["hidden_states"])[0].detach().clone()

        def out(m, a, o, l=l, key="attn_out"):
            seen[l][key] = (o[0] if isinstance(o, tuple) else o)[0].detach().clone()

        def proj(m, a, o, l=l, key=None):
            seen[l][key] = o[0].detach().clone()

        def joined(m, args, l=l):
            seen[l]["joined"] = args[0][0].detach().clone()

        handles.append(attn.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(attn.register_forward_hook(out))
        handles.append(block.register_forward_hook(lambda m, a, o, l=l: out(m, a, o, l, "resid_post")))
        if kind == "gpt2":
            handles.append(attn.c_attn.register_forward_hook(lambda m, a, o, l=l: proj(m, a, o, l, "qkv")))
            handles.append(attn.c_proj.register_forward_pre_hook(joined))
        else:
            for name in ("q", "k", "v"):
                handles.append(
                    getattr(attn, f"{name}_proj").register_forward_hook(
                        lambda m, a, o, l=l, n=name: proj(m, a, o, l, n)
                    )
                )
            handles.append(attn.o_proj.register_forward_pre_hook(joined))
    try:
        with torch.no_grad():
            got = model(ids[None], output_attentions=True, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    config = model.config
    n_heads = config.n_head if kind == "gpt2" else config.num_attention_heads
    L = ids.shape[0]
    for l, s in enumerate(seen):
        if kind == "gpt2":
            d = config.n_embd
            q, k, v = s.pop("qkv").split(d, dim=-1)
            D = d // n_heads
            s["q"], s["k"], s["v"] = (t.reshape(L, n_heads, D) for t in (q, k, v))
        else:
            from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

            D = config.head_dim
            q = s["q"].reshape(L, n_heads, D)
            k = s["k"].reshape(L, -1, D)
            s["v"] = s["v"].reshape(L, -1, D)
            cos, sin = model.model.rotary_emb(q[None], torch.arange(L)[None])
            rq, rk = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
            s["q"], s["k"] = rq[0].transpose(0, 1), rk[0].transpose(0, 1)
        joined = s.pop("joined")  # (L, H·D)
        s["z"] = joined.reshape(L, n_heads, D)
        w_o = blocks[l].attn.c_proj if kind == "gpt2" else blocks[l].self_attn.o_proj
        with torch.no_grad():  # head h alone through W_O, its bias taken off: (L, H, d)
            heads = []
            for h in range(n_heads):
                alone = torch.zeros_like(joined)
                alone[:, h * D : (h + 1) * D] = joined[:, h * D : (h + 1) * D]
                heads.append(w_o(alone) - w_o(torch.zeros_like(joined)))
            s["result"] = torch.stack(heads, dim=1)
        s["pattern"] = got.attentions[l][0]
        s["scale"] = 1 / math.sqrt(D)
    return seen


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_every_name_is_what_plain_hooks_read(kind):
    e = selfattn.explain(TEXT, (models.build(kind, seed=0), models.tokenizer()))
    cache = e.cache
    ref = _reference(kind, e.tokens.ids)
    held = [layer.out_proj is not None for layer in e.trace.layers]
    assert all(held)  # both models' output projections are found by the capture
    assert len(cache) == len(list(cache.keys())) == len(ref) * (len(ATTENTION_HOOKS) + len(BLOCK_HOOKS))
    L = len(e.tokens)
    for l, r in enumerate(ref):
        for short in ("input", "q", "k", "v", "z", "result", "pattern", "attn_out", "resid_post"):
            mine = cache[act_name(short, l)]
            assert mine.shape == r[short].shape, (short, l)
            assert torch.allclose(mine.double(), r[short].double(), atol=CLOSE), (short, l)
            assert torch.equal(cache[short, l], mine)
        # the scores before the softmax: Q Kᵀ · scale from the hooks' q and k, −inf above the diagonal
        q, k = r["q"].double().transpose(0, 1), r["k"].double().transpose(0, 1)
        k = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)
        scores = (q @ k.transpose(-1, -2)) * r["scale"]
        hidden = torch.ones(L, L, dtype=torch.bool).triu(1)
        mine = cache["attn_scores", l]
        assert mine.shape == scores.shape
        assert torch.isneginf(mine[:, hidden]).all() and torch.isfinite(mine[:, ~hidden]).all()
        assert torch.allclose(mine[:, ~hidden], scores[:, ~hidden], atol=CLOSE)
    assert cache["v", 0].shape[1] == (2 if kind == "llama" else 4)  # Llama: 4 query heads on 2 key/value heads


def test_unknown_names_are_refused_naming_the_forms():
    e = selfattn.explain(TEXT, (models.build("gpt2", seed=0), models.tokenizer()))
    cache = e.cache
    assert "blocks.1.attn.hook_pattern" in cache and ("resid_post", 0) in cache
    for bad in ("blocks.0.attn.hook_rezult", "blocks.9.attn.hook_q", "pattern", ("pattern", "0"), 3):
        assert bad not in cache
        with pytest.raises(KeyError, match="no activation named|layer must be|named by a str"):
            cache[bad]


def test_hook_result_is_absent_where_the_capture_holds_no_output_projection():
    e = selfattn.explain(TEXT, (models.build("llama", seed=0), models.tokenizer()))
    first = dataclasses.replace(e.trace.layers[0], out_proj=None)
    cache = NamedCache(dataclasses.replace(e.trace, layers=[first, *e.trace.layers[1:]]))
    assert "blocks.0.attn.hook_result" not in cache and "blocks.1.attn.hook_result" in cache
    assert len(cache) == len(list(cache)) == len(list(e.cache)) - 1
    with pytest.raises(KeyError, match="no output projection W_O for layer 0"):
        cache["result", 0]
