"""Attribution patching (Nanda 2023; Syed, Rager & Conmy 2023): the first-order estimate of activation patching,
every head and every (layer, position) of the residual stream from three passes instead of one per patch.

Exact patching (`patching.patch_heads`, `patching.patch_residual`) reruns the corrupted prompt once per head
(per layer and position) with that activation taken from the clean run. Attribution patching replaces each rerun
by the linear term of its Taylor expansion around the corrupted run:

    LD(corrupted with a ← a_clean) − LD_corrupted  ≈  (a_clean − a_corrupted) · ∂LD/∂a |corrupted

summed over the activation's positions and dimensions, where LD = logit(target) − logit(foil) at the last
position. The passes: the clean and the corrupted prompt as one batch of two in one forward pass that keeps its
graph (the clean row gives the clean activations and LD_clean, the corrupted row the point the gradient is taken
at), one backward from the corrupted row's LD to every activation at once (and, before, a run of one token that
counts the layers). Only the last position's logits are computed where the model allows it (`logits_to_keep`).
The estimate is then divided by LD_clean − LD_corrupted, so it is in the unit of `Patching.recovered` ("share of
the logit difference recovered") and sits beside it.

The activations, as exact patching replaces them:
- a head's **z**: what attention returns for that query head, (L, Dv) — the weighted sum of the values, *before*
  the heads are joined and multiplied by W_O (TransformerLens' `hook_z`);
- a layer's **residual** at one position: the block's output there, (d_model,).

The gradient is the derivative of LD through the whole model (later heads, MLPs, norms): each activation gets
a zero tensor added on the way out (`a + δ`, δ = 0) and the gradient is taken with respect to δ
(`torch.autograd.grad`, so nothing accumulates in the model's parameters' `.grad`, and nothing is set on it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...functional import intercept
from ...kernels.base import Result
from .patching import _check_pair, _first, _last_logits, _ld, _on_blocks, _share, blocks_of

__all__ = ["Attribution", "attribute", "rank_agreement", "TOP_HEADS"]


@dataclass(frozen=True)
class Attribution:
    """Attribution patching clean → corrupted.

    clean_ld, corrupted_ld  logit differences target − foil at the last position (float64)
    heads     (n_layers, n_heads) each head's estimated share of LD_clean − LD_corrupted recovered
    residual  (n_layers, L) each layer's residual at each position, the same
    heads_ld, residual_ld   the same estimates in logits (before the division)
    """

    clean_ld: float
    corrupted_ld: float
    heads: torch.Tensor
    residual: torch.Tensor
    heads_ld: torch.Tensor
    residual_ld: torch.Tensor


def attribute(model: torch.nn.Module, clean: torch.Tensor, corrupted: torch.Tensor, target: int, foil: int):
    """Every head's and every residual position's attribution (the module's doc): one forward of the clean and the
    corrupted prompt together with its graph, one backward.

    clean, corrupted  (1, L) token ids of the same length;  target, foil  token ids
    Returns `Attribution`."""
    _check_pair(clean, corrupted)
    blocks = blocks_of(model, _n_layers(model, clean))
    z: list[torch.Tensor] = []  # per layer z (2, H, L, Dv): row 0 clean, row 1 corrupted
    z_deltas: list[torch.Tensor] = []  # per layer δ on z, the same shape
    residuals: list[torch.Tensor] = []  # per layer the block output (2, L, d_model)
    resid_deltas: list[torch.Tensor] = []

    def on_z(request, compute):
        result = compute(request)
        delta = torch.zeros_like(result.output, requires_grad=True)
        z.append(result.output.detach())
        z_deltas.append(delta)
        return Result(result.output + delta, result.weights, result.lse)

    def on_block(layer, output):
        hidden = _first(output)
        delta = torch.zeros_like(hidden, requires_grad=True)
        residuals.append(hidden.detach())
        resid_deltas.append(delta)
        hidden = hidden + delta
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    with torch.enable_grad(), _on_blocks(blocks, on_block), intercept(on_z):
        lds = _ld(_last_logits(model, torch.cat([clean, corrupted])), target, foil)  # (2,) clean, corrupted
    if len(z) != len(blocks) or len(residuals) != len(blocks):
        raise ValueError(
            f"{type(model).__name__} made {len(z)} attention calls and {len(residuals)} block calls on a run of its "
            f"{len(blocks)} layers"
        )
    grads = torch.autograd.grad(lds[1], z_deltas + resid_deltas, allow_unused=True)  # ∂LD_corrupted / ∂·
    heads_ld = torch.stack(
        [_dot(a, g, dims=(-2, -1)) for a, g in zip(z, grads[: len(z)], strict=True)]
    )  # (n_layers, H): summed over positions and the head's dims
    residual_ld = torch.stack(
        [_dot(a, g, dims=(-1,)) for a, g in zip(residuals, grads[len(z) :], strict=True)]
    )  # (n_layers, L)
    clean_ld, corrupted_ld = float(lds[0].detach()), float(lds[1].detach())
    return Attribution(
        clean_ld,
        corrupted_ld,
        _share(heads_ld + corrupted_ld, clean_ld, corrupted_ld),
        _share(residual_ld + corrupted_ld, clean_ld, corrupted_ld),
        heads_ld,
        residual_ld,
    )


def _n_layers(model, ids: torch.Tensor) -> int:
    """How many attention calls the model makes: one run of the first token (the last position's logits only)."""
    calls = 0

    def count(request, compute):
        nonlocal calls
        calls += 1
        return compute(request)

    with torch.no_grad(), intercept(count):
        _last_logits(model, ids[:, :1])
    if not calls:
        raise ValueError(f"{type(model).__name__} made no selfattn.attention call: nothing to attribute")
    return calls


def _dot(both: torch.Tensor, grad: torch.Tensor | None, *, dims: tuple[int, ...]) -> torch.Tensor:
    """Σ over `dims` of (clean − corrupted) · the corrupted row's gradient, in float64: `both` (2, …) holds the clean
    row then the corrupted one; a gradient None (the activation does not reach LD) gives zeros."""
    diff = (both[0] - both[1]).double()
    if grad is None:
        return torch.zeros(diff.sum(dim=dims).shape, dtype=torch.float64)
    return (diff * grad[1].double()).sum(dim=dims)


TOP_HEADS = 10
"""How many heads (the largest by exact patching) the rank agreement is measured on."""


def rank_agreement(exact: torch.Tensor, estimate: torch.Tensor, top: int = TOP_HEADS) -> dict:
    """How well `estimate` ranks the heads `exact` ranks first: on the `top` heads with the largest exact value
    (n_layers, n_heads → flattened), the Spearman correlation of the two values (the Pearson correlation of their
    ranks; ties broken by position), and how many of those heads are also among the estimate's `top`.

    Returns {top, spearman, shared}; spearman None with fewer than two heads."""
    if exact.shape != estimate.shape:
        raise ValueError(f"exact has shape {tuple(exact.shape)} but estimate {tuple(estimate.shape)}")
    e, a = exact.reshape(-1).double(), estimate.reshape(-1).double()
    top = min(top, e.numel())
    chosen = torch.argsort(e, descending=True, stable=True)[:top]
    ranks = [torch.argsort(torch.argsort(x[chosen], stable=True), stable=True).double() for x in (e, a)]
    centred = [r - r.mean() for r in ranks]
    norm = float(centred[0].norm() * centred[1].norm())
    spearman = None if norm == 0 else float((centred[0] * centred[1]).sum()) / norm
    theirs = set(torch.argsort(a, descending=True, stable=True)[:top].tolist())
    return {"top": top, "spearman": spearman, "shared": len(theirs & set(chosen.tolist()))}
