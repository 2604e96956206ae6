"""Ablation and activation patching through the capture point, against plain PyTorch forward hooks on
a transformers model running its own "eager" attention (no selfattn code on the reference side)."""

import copy

import pytest
import torch

import selfattn.hf
from selfattn.explainer.capture import patching
from tests.tolerances import TOL


@pytest.fixture(scope="module")
def llamas():
    """The same tiny Llama twice: attention by selfattn, and transformers' own eager attention."""
    from transformers import LlamaConfig, LlamaForCausalLM

    selfattn.hf.register()
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=61,
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    ours = LlamaForCausalLM(cfg).eval()
    eager = LlamaForCausalLM(copy.deepcopy(cfg)).eval()  # one config each: the implementation is set on it
    eager.load_state_dict(ours.state_dict())
    ours.set_attn_implementation("selfattn")
    eager.set_attn_implementation("eager")
    return ours, eager


def _recorded(model, ids, hook):
    """(logits, per layer what hook(layer, keep) keeps) of one plain eager forward; the hooks removed after."""
    got: list = []
    hooks = [hook(layer, lambda t: got.append(t.detach().clone())) for layer in model.model.layers]
    try:
        with torch.no_grad():
            logits = model(ids).logits
    finally:
        for h in hooks:
            h.remove()
    return logits, got


def _eager_head_inputs(model, ids):
    """Per layer, the input of o_proj (B, L, Hq·Dv): the heads' outputs side by side."""
    return _recorded(
        model, ids, lambda layer, keep: layer.self_attn.o_proj.register_forward_pre_hook(lambda m, a: keep(a[0]))
    )


def _eager_patched_ld(model, ids, layer, head, clean_in, target, foil, Dv):
    def swap(m, a):
        x = a[0].clone()
        x[..., head * Dv : (head + 1) * Dv] = clean_in[..., head * Dv : (head + 1) * Dv]
        return (x,)

    o_proj = model.model.layers[layer].self_attn.o_proj
    return _ld_with(model, ids, o_proj.register_forward_pre_hook(swap), target, foil)


def _ld_with(model, ids, hook, target, foil) -> float:
    """The logit difference target − foil at the last position of one plain forward with `hook` on, then off."""
    try:
        with torch.no_grad():
            logits = model(ids).logits
    finally:
        hook.remove()
    return float(logits[0, -1, target] - logits[0, -1, foil])


def test_head_patching_equals_plain_hooks(llamas):
    ours, eager = llamas
    clean = torch.tensor([[5, 9, 17, 3, 22, 9, 41, 7]])
    corrupted = torch.tensor([[5, 9, 17, 3, 22, 30, 41, 7]])
    target, foil = 11, 12
    got = patching.patch_heads(ours, clean, corrupted, target, foil)

    clean_logits, clean_in = _eager_head_inputs(eager, clean)
    corr_logits, _ = _eager_head_inputs(eager, corrupted)
    ld_clean = float(clean_logits[0, -1, target] - clean_logits[0, -1, foil])
    ld_corr = float(corr_logits[0, -1, target] - corr_logits[0, -1, foil])
    assert got.clean_ld == pytest.approx(ld_clean, abs=TOL["float32_logits"]) and got.corrupted_ld == pytest.approx(
        ld_corr, abs=TOL["float32_logits"]
    )
    Dv = ours.config.hidden_size // ours.config.num_attention_heads
    want = torch.tensor(
        [
            [
                (_eager_patched_ld(eager, corrupted, l, h, clean_in[l], target, foil, Dv) - ld_corr)
                / (ld_clean - ld_corr)
                for h in range(4)
            ]
            for l in range(3)
        ],
        dtype=torch.float64,
    )
    assert got.recovered.shape == (3, 4)
    torch.testing.assert_close(got.recovered, want, atol=TOL["float32_logit_ratio"], rtol=0)


def test_residual_patching_at_the_last_layer_restores_the_clean_answer(llamas):
    ours, _ = llamas
    clean = torch.tensor([[5, 9, 17, 3, 22, 9]])
    corrupted = torch.tensor([[5, 9, 4, 3, 22, 9]])
    got = patching.patch_residual(ours, clean, corrupted, 11, 12)
    assert got.recovered.shape == (3, 6)
    # the last layer's residual at the last position is all the prediction reads: recovered exactly
    assert float(got.recovered[-1, -1]) == pytest.approx(1.0, abs=TOL["same_ratio"])
    # positions before the corrupted one carry the same values in both runs: nothing to recover there
    assert torch.allclose(got.recovered[0, :2], torch.zeros(2, dtype=torch.float64), atol=TOL["float32_logit_ratio"])


def test_zero_ablation_equals_plain_hooks(llamas):
    ours, eager = llamas
    ids = torch.tensor([[5, 9, 17, 3, 22, 9, 41]])
    got = patching.ablate(ours, ids, [(1, 2), (2, 0)], mode="zero")
    Dv = ours.config.hidden_size // ours.config.num_attention_heads

    def zero(head):
        def hook(m, a):
            x = a[0].clone()
            x[..., head * Dv : (head + 1) * Dv] = 0
            return (x,)

        return hook

    hooks = [
        eager.model.layers[1].self_attn.o_proj.register_forward_pre_hook(zero(2)),
        eager.model.layers[2].self_attn.o_proj.register_forward_pre_hook(zero(0)),
    ]
    try:
        with torch.no_grad():
            want = eager(ids).logits[0, -1]
    finally:
        for h in hooks:
            h.remove()
    torch.testing.assert_close(got["after"]["logits"], want, atol=TOL["float32_logits"], rtol=0)
    assert got["kl_bits"] > 0


def test_bad_requests_are_named(llamas):
    ours, _ = llamas
    with pytest.raises(ValueError, match="same token length"):
        patching.patch_heads(ours, torch.tensor([[1, 2, 3]]), torch.tensor([[1, 2]]), 4, 5)
    with pytest.raises(ValueError, match="nothing to recover"):
        patching.patch_heads(ours, torch.tensor([[1, 2, 3]]), torch.tensor([[1, 2, 3]]), 4, 5)
    with pytest.raises(ValueError, match="ablation mode"):
        patching.ablate(ours, torch.tensor([[1, 2]]), [(0, 0)], mode="half")
    with pytest.raises(ValueError, match="layer must be"):
        patching.ablate(ours, torch.tensor([[1, 2]]), [(7, 0)])


def _eager_residual_ld(model, ids, layer, position, clean_hidden, target, foil):
    """LD of `ids` with decoder layer `layer`'s output at `position` set to the clean run's, by a plain hook."""

    def swap(m, a, out):
        hidden = (out[0] if isinstance(out, tuple) else out).clone()
        hidden[:, position] = clean_hidden[:, position]
        return (hidden, *out[1:]) if isinstance(out, tuple) else hidden

    return _ld_with(model, ids, model.model.layers[layer].register_forward_hook(swap), target, foil)


def _eager_residuals(model, ids):
    """Per layer, its output: the residual stream after it."""
    return _recorded(
        model,
        ids,
        lambda layer, keep: layer.register_forward_hook(lambda m, a, o: keep(o[0] if isinstance(o, tuple) else o)),
    )


def test_residual_patching_equals_plain_hooks_one_prompt_at_a_time(llamas):
    """Every (layer, position) of the batched passes against one eager forward each, with a plain hook; the
    positions before the changed token are skipped (share exactly 0), as the hooks find them (≈ 0)."""
    ours, eager = llamas
    clean = torch.tensor([[5, 9, 17, 3, 22, 9, 41]])
    corrupted = torch.tensor([[5, 9, 17, 30, 22, 9, 41]])
    target, foil = 11, 12
    got = patching.patch_residual(ours, clean, corrupted, target, foil)
    clean_logits, hidden = _eager_residuals(eager, clean)
    corr_logits, _ = _eager_residuals(eager, corrupted)
    ld_clean = float(clean_logits[0, -1, target] - clean_logits[0, -1, foil])
    ld_corr = float(corr_logits[0, -1, target] - corr_logits[0, -1, foil])
    want = torch.tensor(
        [
            [
                (_eager_residual_ld(eager, corrupted, l, p, hidden[l], target, foil) - ld_corr) / (ld_clean - ld_corr)
                for p in range(clean.shape[1])
            ]
            for l in range(3)
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(got.recovered, want, atol=TOL["float32_logits"], rtol=0)
    assert torch.equal(got.recovered[:, :3], torch.zeros(3, 3, dtype=torch.float64))  # not run: exactly 0


@pytest.mark.parametrize("rows", [1, 5])
def test_batches_of_any_size_give_the_numbers_of_one_batch(llamas, monkeypatch, rows):
    """Batches cut by the memory budget (here 1 or 5 prompts: across layers) give what one batch gives."""
    ours, _ = llamas
    clean = torch.tensor([[5, 9, 17, 3, 22, 9, 41, 7]])
    corrupted = torch.tensor([[5, 9, 17, 3, 22, 30, 41, 7]])
    whole_heads = patching.patch_heads(ours, clean, corrupted, 11, 12).recovered
    whole_residual = patching.patch_residual(ours, clean, corrupted, 11, 12).recovered
    monkeypatch.setattr(patching, "batch_rows", lambda row_bytes: rows)
    torch.testing.assert_close(
        patching.patch_heads(ours, clean, corrupted, 11, 12).recovered, whole_heads, atol=TOL["float32_logits"], rtol=0
    )
    torch.testing.assert_close(
        patching.patch_residual(ours, clean, corrupted, 11, 12).recovered,
        whole_residual,
        atol=TOL["float32_logits"],
        rtol=0,
    )
