"""The logit lens: after the last layer it is the model's own prediction (checked against the model's
logits); at every layer it is unembed(final_norm(residual)), recomputed here with plain forward hooks."""

import pytest
import torch

from selfattn.explainer.capture import lens
from selfattn.model import load_default
from tests.tolerances import TOL


def _block_outputs(model, blocks, ids):
    """Each block's output at the last position, taken with plain forward hooks, and the logits."""
    got = []
    hooks = [
        b.register_forward_hook(lambda m, a, o: got.append((o[0] if isinstance(o, tuple) else o)[0, -1]))
        for b in blocks
    ]
    try:
        with torch.no_grad():
            out = model(ids)
    finally:
        for h in hooks:
            h.remove()
    logits = out if isinstance(out, torch.Tensor) else out.logits
    return torch.stack(got), logits[0, -1]


def test_default_model_last_layer_is_its_prediction():
    model, tokenizer, _ = load_default()
    ids = torch.tensor([tokenizer.encode("一只蓝色怪兽走进")])
    residuals, logits = _block_outputs(model, model.blocks, ids)
    layers = lens.logit_lens(model, residuals, top_k=3)
    assert len(layers) == len(model.blocks)
    want = logits.double().softmax(-1).topk(3)
    assert layers[-1]["ids"] == want.indices.tolist()
    assert layers[-1]["probs"] == pytest.approx(want.values.tolist(), abs=TOL["float32_probability"])
    # an earlier layer: unembed(final_norm(h)) by hand
    by_hand = model.lm_head(model.ln_f(residuals[0])).double().softmax(-1).topk(3)
    assert layers[0]["ids"] == by_hand.indices.tolist()


def test_transformers_llama_last_layer_is_its_prediction():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 97, (1, 9))
    residuals, logits = _block_outputs(model, model.model.layers, ids)
    layers = lens.logit_lens(model, residuals, top_k=4)
    want = logits.double().softmax(-1).topk(4)
    assert layers[-1]["ids"] == want.indices.tolist()
    assert layers[-1]["probs"] == pytest.approx(want.values.tolist(), abs=TOL["float32_probability"])


def test_an_encoder_has_no_lens():
    from transformers import BertConfig, BertModel

    model = BertModel(
        BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    )
    with pytest.raises(ValueError, match="no unembedding"):
        lens.readout(model)
    with pytest.raises(ValueError, match="n_layers, d_model"):
        lens.logit_lens(model, torch.zeros(3))
