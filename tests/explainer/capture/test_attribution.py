"""Attribution patching (`capture.attribution`) is the first-order term of exact patching: on tiny float64 Llama
and GPT-2 models, each head's estimate equals the derivative of LD along the patch direction, measured by a
central difference with plain transformers hooks (a pre-hook adding ε·(z_clean − z_corrupted) to one head's
slice of the output projection's input; a forward hook adding it to one block's output at one position), and
the clean / corrupted logit differences equal the models' own."""

from __future__ import annotations

import pytest
import torch

import selfattn.hf
from selfattn.explainer.capture.attribution import attribute
from tests.hf import models
from tests.tolerances import TOL

STEP = {"gpt2": 1e-5, "llama": 1e-3}
"""Central-difference steps: transformers' Llama computes its RMSNorm in float32 even in a float64 model, so its
LD carries float32 rounding (about 1e-8) that a smaller step would magnify."""
CLOSE = {"gpt2": TOL["float64_central_difference"], "llama": TOL["float64_model_float32_norm_difference"]}
TARGET, FOIL = 5, 9
CLEAN = [2, 17, 33, 8, 41, 17, 60, 12]
CORRUPTED = [2, 17, 33, 8, 52, 17, 60, 12]  # position 4 differs


def _parts(model, kind: str):
    """(per layer the output projection that reads the joined heads, per layer the block, head width)."""
    if kind == "gpt2":
        blocks = model.transformer.h
        return [b.attn.c_proj for b in blocks], blocks, model.config.n_embd // model.config.n_head
    blocks = model.model.layers
    return [b.self_attn.o_proj for b in blocks], blocks, model.config.head_dim


def _ld(model, ids, hooks=()) -> float:
    handles = [m.register_forward_pre_hook(f) if pre else m.register_forward_hook(f) for m, f, pre in hooks]
    try:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits
    finally:
        for h in handles:
            h.remove()
    return float(logits[0, -1, TARGET] - logits[0, -1, FOIL])


def _joined_heads(model, kind: str, ids) -> list[torch.Tensor]:
    """Per layer the output projection's input (L, H·Dv), read by plain pre-hooks."""
    projections, _, _ = _parts(model, kind)
    seen: list[torch.Tensor] = []
    hooks = [(p, lambda m, args: seen.append(args[0][0].clone()), True) for p in projections]
    _ld(model, ids, hooks)
    return seen


def _block_outputs(model, kind: str, ids) -> list[torch.Tensor]:
    _, blocks, _ = _parts(model, kind)
    seen: list[torch.Tensor] = []
    hooks = [(b, lambda m, a, o: seen.append((o[0] if isinstance(o, tuple) else o)[0].clone()), False) for b in blocks]
    _ld(model, ids, hooks)
    return seen


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def tiny(request):
    selfattn.hf.register()
    model = models.build(request.param, attn="selfattn").double()
    return request.param, model


def test_head_estimates_are_the_derivative_along_the_patch(tiny):
    kind, model = tiny
    got = attribute(model, torch.tensor([CLEAN]), torch.tensor([CORRUPTED]), TARGET, FOIL)
    assert got.clean_ld == pytest.approx(_ld(model, CLEAN), abs=TOL["float64_model_loss"])
    assert got.corrupted_ld == pytest.approx(_ld(model, CORRUPTED), abs=TOL["float64_model_loss"])
    projections, _, dv = _parts(model, kind)
    clean, corrupted = _joined_heads(model, kind, CLEAN), _joined_heads(model, kind, CORRUPTED)
    n_heads = clean[0].shape[-1] // dv
    assert got.heads_ld.shape == (len(projections), n_heads)
    for layer, projection in enumerate(projections):
        for head in range(n_heads):
            cut = slice(head * dv, (head + 1) * dv)
            delta = torch.zeros_like(clean[layer])
            delta[:, cut] = clean[layer][:, cut] - corrupted[layer][:, cut]

            def add(eps, delta=delta):
                return lambda m, args: (args[0] + eps * delta,)

            up = _ld(model, CORRUPTED, [(projection, add(STEP[kind]), True)])
            down = _ld(model, CORRUPTED, [(projection, add(-STEP[kind]), True)])
            derivative = (up - down) / (2 * STEP[kind])
            assert float(got.heads_ld[layer, head]) == pytest.approx(derivative, abs=CLOSE[kind]), (layer, head)
    gap = got.clean_ld - got.corrupted_ld
    assert torch.allclose(got.heads, got.heads_ld / gap, atol=TOL["float64"])


def test_residual_estimates_are_the_derivative_along_the_patch(tiny):
    kind, model = tiny
    got = attribute(model, torch.tensor([CLEAN]), torch.tensor([CORRUPTED]), TARGET, FOIL)
    _, blocks, _ = _parts(model, kind)
    clean, corrupted = _block_outputs(model, kind, CLEAN), _block_outputs(model, kind, CORRUPTED)
    assert got.residual_ld.shape == (len(blocks), len(CLEAN))
    for layer, block in enumerate(blocks):
        for position in range(len(CLEAN)):
            delta = torch.zeros_like(clean[layer])
            delta[position] = clean[layer][position] - corrupted[layer][position]

            def add(eps, delta=delta):
                def hook(m, a, o):
                    return (o[0] + eps * delta, *o[1:]) if isinstance(o, tuple) else o + eps * delta

                return hook

            derivative = (
                _ld(model, CORRUPTED, [(block, add(STEP[kind]), False)])
                - _ld(model, CORRUPTED, [(block, add(-STEP[kind]), False)])
            ) / (2 * STEP[kind])
            assert float(got.residual_ld[layer, position]) == pytest.approx(derivative, abs=CLOSE[kind]), (
                layer,
                position,
            )
    assert torch.count_nonzero(got.residual_ld[:, :4]) == 0  # before the changed token nothing differs
    assert torch.count_nonzero(got.heads_ld) > 0


def test_leaves_no_gradient_on_the_model(tiny):
    _, model = tiny
    attribute(model, torch.tensor([CLEAN]), torch.tensor([CORRUPTED]), TARGET, FOIL)
    assert all(p.grad is None for p in model.parameters())


def test_refuses_prompts_of_different_lengths(tiny):
    _, model = tiny
    with pytest.raises(ValueError, match="same token length"):
        attribute(model, torch.tensor([CLEAN]), torch.tensor([CORRUPTED[:-1]]), TARGET, FOIL)
