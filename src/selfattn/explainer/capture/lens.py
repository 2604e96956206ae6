"""The logit lens: what the model would predict if it stopped after each layer.

The residual stream after layer l, h_l (one position), is read out the way the last layer's is:

    logits_l = unembed(final_norm(h_l))          p_l = softmax(logits_l)

so after the last layer the lens is the model's own prediction, and earlier layers show how the
prediction forms (nostalgebraist, "interpreting GPT: the logit lens", 2020). `readout(model)` finds the
final norm and the unembedding of our `DecoderLM` (`ln_f`, `lm_head`) and of transformers' causal LMs
(`get_output_embeddings()` and the base model's `norm` / `ln_f` / `final_layernorm` / …); an encoder has
no unembedding and no lens.
"""

from __future__ import annotations

import torch

__all__ = ["readout", "logit_lens", "FINAL_NORM_NAMES"]

FINAL_NORM_NAMES = ("ln_f", "norm", "final_layernorm", "final_layer_norm", "norm_f", "final_norm")
"""Attribute names under which models keep the norm applied before the unembedding."""


def readout(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(final_norm, unembed) of a decoder; a ValueError naming the model when it has none."""
    unembed = getattr(model, "lm_head", None)
    get = getattr(model, "get_output_embeddings", None)
    if unembed is None and callable(get):
        unembed = get()
    if not isinstance(unembed, torch.nn.Module):
        raise ValueError(f"{type(model).__name__} has no unembedding (an encoder?): the logit lens needs one")
    for holder in (model, getattr(model, "base_model", None), getattr(model, "model", None)):
        if holder is None:
            continue
        for name in FINAL_NORM_NAMES:
            norm = getattr(holder, name, None)
            if isinstance(norm, torch.nn.Module) and not isinstance(norm, torch.nn.ModuleList):
                return norm, unembed
    raise ValueError(
        f"{type(model).__name__} has no final norm under any of {', '.join(FINAL_NORM_NAMES)}: "
        f"the logit lens cannot read its layers out"
    )


def logit_lens(model: torch.nn.Module, residuals: torch.Tensor, *, top_k: int = 5) -> list[dict]:
    """The top `top_k` next tokens after each layer.

    residuals  (n_layers, d_model): the residual stream after each layer at one position
    Returns one dict per layer: {"ids": [...], "probs": [...], "entropy_bits": float}, most probable first.
    """
    if not isinstance(residuals, torch.Tensor) or residuals.dim() != 2:
        raise ValueError(
            f"residuals must be a (n_layers, d_model) tensor, got {getattr(residuals, 'shape', residuals)}"
        )
    norm, unembed = readout(model)
    param = next(unembed.parameters())
    with torch.no_grad():
        logits = unembed(norm(residuals.to(param.dtype))).double()  # (n_layers, vocab)
    probs = logits.softmax(-1)
    top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    entropy = -(probs * probs.clamp_min(1e-300).log2()).sum(-1)
    return [
        {"ids": top.indices[l].tolist(), "probs": top.values[l].tolist(), "entropy_bits": float(entropy[l])}
        for l in range(probs.shape[0])
    ]
