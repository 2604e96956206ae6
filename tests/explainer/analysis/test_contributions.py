"""Value-weighted attention ‖α_ij · v_j W_O^h‖ (`Explanation.contributions`) recomputed independently.

The reference runs each model with plain modules and hooks, nothing of selfattn's capture: transformers models in
eager attention with `output_attentions=True` (the weights), a forward hook on the value projection's output (v per
key/value head; GPT-2: the V third of c_attn, a Conv1D) and the output projection's weight read from the module
(o_proj, c_proj transposed, BERT's attention.output.dense); our DecoderLM with hooks on q/k/v_proj and the weights
computed in float64 by the tutorial's formula. Tiny random Llama (GQA: 4 query heads on 2), GPT-2, Gemma-3 and
BERT; the tiny DecoderLM with GQA.
"""

from __future__ import annotations

import math

import pytest
import torch
import transformers

from selfattn.explainer.analysis import contributions as contrib
from selfattn.explainer.api import from_loaded
from selfattn.explainer.pipeline import Session, Spec
from tests.explainer.tiny import tiny_explainer
from tests.hf.models import _COMMON, build, tokenizer
from tests.tolerances import TOL

TEXT = "a blue monster walks into the forest"
ATOL = TOL["float32_hf_stages"]


def _gemma3(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.Gemma3TextConfig(**_COMMON, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=16)
    return transformers.Gemma3ForCausalLM(config).eval()


def _model(kind: str) -> torch.nn.Module:
    model = _gemma3() if kind == "gemma3" else build(kind)
    model.set_attn_implementation("eager")
    return model


def _layers(model, kind):
    """[(attention module, value projection, W_O (d_model, H·Dv), is GPT-2)] per layer."""
    if kind == "gpt2":
        return [(b.attn, b.attn.c_attn, b.attn.c_proj.weight.T, True) for b in model.transformer.h]
    if kind == "bert":
        return [
            (b.attention.self, b.attention.self.value, b.attention.output.dense.weight, False)
            for b in model.encoder.layer
        ]
    return [(b.self_attn, b.self_attn.v_proj, b.self_attn.o_proj.weight, False) for b in model.model.layers]


def _reference(model, kind, ids):
    """[(H, L, L) float64 ‖α_ij v_j W_O^h‖] per layer, from eager weights and hooked values."""
    cfg = model.config
    H = cfg.num_attention_heads
    Hkv = getattr(cfg, "num_key_value_heads", None) or H
    layers = _layers(model, kind)
    values: list[torch.Tensor] = []
    handles = [proj.register_forward_hook(lambda m, a, out: values.append(out.detach())) for _, proj, _, _ in layers]
    try:
        with torch.no_grad():
            out = model(ids[None], output_attentions=True)
    finally:
        for h in handles:
            h.remove()
    refs = []
    for (_, _, w_o, gpt2), v, attn in zip(layers, values, out.attentions, strict=True):
        v = v[0].double()
        if gpt2:
            v = v[:, 2 * cfg.n_embd :]  # c_attn's output is [q | k | v]
        Dv = v.shape[-1] // Hkv
        v = v.unflatten(-1, (Hkv, Dv)).transpose(0, 1)  # (Hkv, L, Dv)
        heads = []
        for h in range(H):
            w_h = w_o.detach().double()[:, h * Dv : (h + 1) * Dv]  # (d_model, Dv)
            n = (v[h // (H // Hkv)] @ w_h.T).norm(dim=-1)  # (L,)
            heads.append(attn[0, h].double() * n[None, :])
        refs.append(torch.stack(heads))
    return refs


def _scale(ref: torch.Tensor) -> float:
    """ATOL is float32's error on numbers of size 1: larger contributions get it relative to their largest."""
    return max(1.0, float(ref.abs().max()))


def _close(ours: torch.Tensor, ref: torch.Tensor) -> bool:
    return float((ours - ref).abs().max()) <= ATOL * _scale(ref)


@pytest.mark.parametrize("kind", ["llama", "gpt2", "gemma3", "bert"])
def test_transformers_contributions_match_hooks(kind):
    model = _model(kind)
    tok = tokenizer()
    ids = torch.tensor(tok(TEXT)["input_ids"])
    refs = _reference(model, kind, ids)
    e = Session(from_loaded(model, tok)).explain(Spec(TEXT))
    assert len(e.tokens) == len(ids)
    for layer, ref in enumerate(refs):
        for head in range(ref.shape[0]):
            ours = e.contributions(layer, head)
            assert ours.dtype == torch.float64 and ours.shape == ref[head].shape
            assert _close(ours, ref[head]), (kind, layer, head)
            scale = _scale(ref[head])
            # the norms matter: the contributions are not the weights times one number
            weights = e.weights(layer, head)
            ratio = ours[weights > ATOL] / weights[weights > ATOL]
            assert float(ratio.max() - ratio.min()) > ATOL * scale


def test_decoder_contributions_match_hooks():
    ex = tiny_explainer(n_heads=4, n_kv_heads=2)
    model = ex.model
    tokens, ids, _ = ex.tokenize("一只蓝色怪兽走进森林")
    got: dict[tuple[int, str], torch.Tensor] = {}
    handles = [
        getattr(b.attn, name).register_forward_hook(lambda m, a, out, key=(i, name): got.__setitem__(key, out.detach()))
        for i, b in enumerate(model.blocks)
        for name in ("q_proj", "k_proj", "v_proj")
    ]
    try:
        with torch.no_grad():
            model(ids[None])
    finally:
        for h in handles:
            h.remove()
    e = Session(ex).explain(Spec("一只蓝色怪兽走进森林"))
    L = len(ids)
    for i, block in enumerate(model.blocks):
        a = block.attn
        H, Hkv, D = a.n_heads, a.n_kv_heads, a.head_dim
        q, k, v = (
            got[(i, n)][0].double().unflatten(-1, (-1, D)).transpose(0, 1) for n in ("q_proj", "k_proj", "v_proj")
        )
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        for h in range(H):
            kv = h // (H // Hkv)
            s = (q[h] @ k[kv].T / math.sqrt(D)).masked_fill(~causal, float("-inf"))
            n = (v[kv] @ a.out_proj.weight.detach().double()[:, h * D : (h + 1) * D].T).norm(dim=-1)
            ref = torch.softmax(s, dim=-1) * n[None, :]
            assert _close(e.contributions(i, h), ref), (i, h)


def test_first_token_share_and_shares():
    """shares: each row of C over its sum; first_token_share: the mean weight and the mean share on key 0 (rows ≥ 1)."""
    w = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.8, 0.1, 0.1]], dtype=torch.float64)
    n = torch.tensor([0.1, 1.0, 2.0], dtype=torch.float64)
    c = w * n
    s = contrib.shares(c)
    assert torch.allclose(s.sum(-1), torch.ones(3, dtype=torch.float64), atol=TOL["float64"], rtol=0)
    weight, share = contrib.first_token_share(w, c)
    assert abs(weight - (0.5 + 0.8) / 2) < TOL["float64"]
    assert abs(share - (0.05 / 0.55 + 0.08 / 0.38) / 2) < TOL["float64"]
    assert contrib.shares(torch.zeros(1, 3)).abs().sum() == 0


def test_no_output_projection_is_refused_by_name():
    e = Session(tiny_explainer()).explain(Spec("一只蓝色怪兽"))
    layer = e.trace.layers[0]
    bare = type(layer)(**{f: getattr(layer, f) for f in layer.__dataclass_fields__} | {"out_proj": None})
    assert not contrib.available(bare)
    with pytest.raises(ValueError, match="output projection"):
        contrib.norms(bare, 0)
