"""The stepper's formulas are the model's own: each shown formula recomputed from the exported tensors.

On tiny random Gemma-3 (RMSNorm, q/k norms, no bias, query_pre_attn_scalar), Llama (RMSNorm, no bias, GQA),
GPT-2 (LayerNorm, one fused projection with bias, learned positions) and BERT (post-LayerNorm, biases):
X → Q, K, V by the formula the page prints (bias only where it says so, q_norm / k_norm only where it says
so, RoPE only where it says so, with transformers' own rotary embedding and `apply_rotary_pos_emb`) equals
the exported Q, K, V; and X is the exported residual stream normalised by the norm the page names (RMSNorm:
each column of X is the RMS-normalised residual times one gain; LayerNorm: an affine map of the
mean-and-variance-normalised residual). Biases are made random first, so a missing "+ b" cannot pass.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

from selfattn.explainer.api import from_loaded
from tests.explainer.documents import both
from tests.hf.models import _COMMON, CONFIGS, build, tokenizer
from tests.tolerances import TOL

TEXT = "a blue monster walks into the forest"
ATOL = TOL["float32_hf_stages"]


def _gemma3() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.Gemma3TextConfig(**_COMMON, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=16)
    return transformers.Gemma3ForCausalLM(config).eval()


def _model(kind: str) -> torch.nn.Module:
    model = _gemma3() if kind == "gemma3" else build(kind)
    with torch.no_grad():
        for name, p in model.named_parameters():  # random biases: a formula without "+ b" must then fail
            if name.endswith("bias"):
                p.normal_(0, 0.5)
    return model


KINDS = ["gemma3", "llama", "gpt2", "bert"]
assert {"llama", "gpt2", "bert"} <= set(CONFIGS)


@pytest.fixture(scope="module")
def explained():
    out = {}
    for kind in KINDS:
        model = _model(kind)
        ex = from_loaded(model, tokenizer())
        e, doc = both(ex, TEXT, layers=None)
        out[kind] = (model, doc, e.trace.layers[0])  # the page's document and the exported layer 0 as captured
    return out


def _attention(model, kind):
    if kind == "gpt2":
        return model.transformer.h[0].attn
    if kind == "bert":
        return model.encoder.layer[0].attention.self
    return model.model.layers[0].self_attn


def _projections(model, kind, X):
    """(X·W_Q, X·W_K, X·W_V) and (b_Q, b_K, b_V) of layer 0, as the modules hold them."""
    attn = _attention(model, kind)
    if kind == "gpt2":
        w, b = attn.c_attn.weight, attn.c_attn.bias  # Conv1D: X @ W + b, W (d, 3d)
        d = X.shape[-1]
        return [X @ w[:, i * d : (i + 1) * d] for i in range(3)], [b[i * d : (i + 1) * d] for i in range(3)]
    names = ("query", "key", "value") if kind == "bert" else ("q_proj", "k_proj", "v_proj")
    mods = [getattr(attn, n) for n in names]
    return [X @ m.weight.T for m in mods], [m.bias for m in mods]


def _rope(model, kind, q, k):
    """transformers' own rotary embedding of layer 0 applied to (1, H, L, D) q and k."""
    L = q.shape[2]
    position_ids = torch.arange(L)[None]
    if kind == "gemma3":
        from transformers.models.gemma3.modeling_gemma3 import apply_rotary_pos_emb

        layer_type = model.config.layer_types[0]
        cos, sin = model.model.rotary_emb(q, position_ids, layer_type)
    else:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        cos, sin = model.model.rotary_emb(q, position_ids)
    return apply_rotary_pos_emb(q, k, cos, sin)


@pytest.mark.parametrize("kind", KINDS)
def test_q_k_v_are_the_shown_formula_of_the_exported_x(explained, kind):
    model, doc, layer = explained[kind]
    f = doc["model"]["formula"]
    H, Hkv, D = doc["model"]["n_heads"], doc["model"]["n_kv_heads"], doc["model"]["head_dim"]
    X = layer.x.float()
    L = X.shape[0]
    with torch.no_grad():
        lin, biases = _projections(model, kind, X)
        parts = []
        for name, y, b, n in zip("qkv", lin, biases, (H, Hkv, Hkv), strict=True):
            if f["bias"][name]:
                assert b is not None, f"the page says {name} has a bias; the module has none"
                y = y + b
            parts.append(y.view(L, n, D))
        q, k, v = parts
        attn = _attention(model, kind)
        if f["qk_norm"]:
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k, v = (t.transpose(0, 1)[None] for t in (q, k, v))  # (1, heads, L, D)
        if f["rope"] is not None:
            q, k = _rope(model, kind, q, k)
    want = {"q": q[0], "k": k[0], "v": v[0]}
    for h in range(layer.n_heads):
        kv = doc["model"]["kv_of_head"][h]
        for name, index in (("q", h), ("k", kv), ("v", kv)):
            got = getattr(layer, name)[index].numpy()
            np.testing.assert_allclose(got, want[name][index].numpy(), atol=ATOL, err_msg=f"{kind} {name} head {h}")
    text = f["text"]["qkv"]["en"]
    assert ("b_Q" in text) == f["bias"]["q"] and ("q_norm" in text) == f["qk_norm"]
    assert ("RoPE" in text) == (f["rope"] is not None)


EXPECTED = {  # what each model is known to be: the formula read must say so
    "gemma3": dict(norm="rms", bias=False, qk_norm=True, rope=True, scale=16**-0.5),
    "llama": dict(norm="rms", bias=False, qk_norm=False, rope=True, scale=8**-0.5),
    "gpt2": dict(norm="layer", bias=True, qk_norm=False, rope=False, scale=8**-0.5),
    "bert": dict(norm="layer", bias=True, qk_norm=False, rope=False, scale=8**-0.5),
}


@pytest.mark.parametrize("kind", KINDS)
def test_the_formula_names_the_models_own_parts(explained, kind):
    model, doc, _ = explained[kind]
    f, want = doc["model"]["formula"], EXPECTED[kind]
    assert (f["norm"], f["bias"]["q"], f["qk_norm"], f["rope"] is not None) == (
        want["norm"],
        want["bias"],
        want["qk_norm"],
        want["rope"],
    )
    assert doc["layers"][0]["scale"] == pytest.approx(want["scale"])
    zh, en = f["text"]["x"]["zh"], f["text"]["x"]["en"]
    assert ("RMSNorm" in en) == (want["norm"] == "rms") and ("LayerNorm" in zh) == (want["norm"] == "layer")


@pytest.mark.parametrize("kind", KINDS)
def test_x_is_the_residual_after_the_norm_named(explained, kind):
    """Layer 0's X from its input (the embeddings, as the model makes them) by the norm the page names."""
    model, doc, layer = explained[kind]
    f = doc["model"]["formula"]
    X = layer.x.double().numpy()
    ids = torch.tensor([doc["token_ids"]])
    with torch.no_grad():
        if kind == "gpt2":
            h = model.transformer.wte(ids) + model.transformer.wpe(torch.arange(ids.shape[1])[None])
        elif kind == "bert":
            h = model.embeddings.word_embeddings(ids) + model.embeddings.position_embeddings(
                torch.arange(ids.shape[1])[None]
            )
            h = h + model.embeddings.token_type_embeddings(torch.zeros_like(ids))
        else:
            h = model.model.embed_tokens(ids)
    h = h[0].double().numpy()
    c = model.config
    eps = getattr(c, "rms_norm_eps", None) or getattr(c, "layer_norm_epsilon", None) or c.layer_norm_eps
    if f["norm"] == "rms":
        r = h / np.sqrt((h**2).mean(-1, keepdims=True) + eps)
        gain = X / r  # one gain per column, the same in every row
        np.testing.assert_allclose(gain, np.broadcast_to(gain[:1], gain.shape), atol=TOL["float32_norm_fit"])
    else:
        n = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + eps)
        for d in range(X.shape[1]):  # X[:, d] = a_d · n[:, d] + c_d
            A = np.stack([n[:, d], np.ones(len(n))], 1)
            fit, *_ = np.linalg.lstsq(A, X[:, d], rcond=None)
            np.testing.assert_allclose(A @ fit, X[:, d], atol=TOL["float32_norm_fit"])
    assert f["post_norm"] == (kind == "bert")
