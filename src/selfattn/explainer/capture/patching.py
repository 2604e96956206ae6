"""Head ablation and activation patching, at the one capture point (`selfattn.intercept`).

A *head's output* is what attention returns for that query head, (L, Dv) — the weighted sum of the
values, before the heads are joined and projected. Every model whose attention goes through
`selfattn.attention` (our modules; transformers models with attn_implementation="selfattn") can have it
replaced on the way out, without touching a module:

- **ablation**: a head's output set to zero, or to its mean over the positions of this text or of a reference set
  of texts; scored by the next-token distribution, the loss and, given a target and a foil, the logit difference
  target − foil at the last position (as patching scores);
- **activation patching** (Wang et al. 2022, "Interpretability in the Wild"): run a *clean* prompt and
  a *corrupted* one of the same token length; rerun the corrupted prompt with one head's output taken
  from the clean run; the **share of the logit difference recovered** is

      recovered = (LD_patched − LD_corrupted) / (LD_clean − LD_corrupted)
      LD = logit(target) − logit(foil) at the last position

  1 means that head alone restores the clean answer, 0 that it does nothing. The same for each
  layer's residual stream at each position (the layer's output replaced from the clean run).

Layers are counted in the order of their attention calls, from 0, as everywhere in selfattn.
Everything a call records or replaces is its own: head outputs travel through `selfattn.intercept` (a
context variable), and the residual's block hooks (`_on_blocks`) are installed for one call, act only in
the context that installed them and are removed on exit, so requests served at once on one model (the
server's threads) give the numbers they give alone.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from ...functional import intercept
from ...kernels.base import Result
from ...limits import batch_rows
from ..interventions import ablation_value

__all__ = [
    "head_outputs",
    "run_patched",
    "ablate",
    "reference_means",
    "patch_heads",
    "patch_residual",
    "Patching",
    "blocks_of",
]


def _logits(out) -> torch.Tensor:
    return out if isinstance(out, torch.Tensor) else out.logits


def head_outputs(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One clean run: (logits (B, L, V), per layer the attention output (B, Hq, L, Dv))."""
    outputs: list[torch.Tensor] = []

    def record(request, compute):
        result = compute(request)
        outputs.append(result.output.detach().clone())
        return result

    with torch.no_grad(), intercept(record):
        logits = _logits(model(ids))
    if not outputs:
        raise ValueError(f"{type(model).__name__} made no selfattn.attention call: nothing to patch")
    return logits, outputs


def run_patched(
    model: torch.nn.Module, ids: torch.Tensor, patches: dict[tuple[int, int], torch.Tensor]
) -> torch.Tensor:
    """Logits of `model(ids)` with head outputs replaced: patches[(layer, head)] = (B|1, L, Dv) or (L, Dv)."""
    layer = 0

    def patch(request, compute):
        nonlocal layer
        result = compute(request)
        here = {h: t for (l, h), t in patches.items() if l == layer}
        layer += 1
        if not here:
            return result
        out = result.output.clone()
        for h, t in here.items():
            if not 0 <= h < out.shape[1]:
                raise ValueError(f"head must be in [0, {out.shape[1] - 1}], got {h}")
            out[:, h] = t.to(out.dtype)
        return Result(out, result.weights, result.lse)

    with torch.no_grad(), intercept(patch):
        logits = _logits(model(ids))
    if patches and max(l for l, _ in patches) >= layer:
        raise ValueError(f"layer must be in [0, {layer - 1}], got {max(l for l, _ in patches)}")
    return logits


def ablate(
    model: torch.nn.Module,
    ids: torch.Tensor,
    heads: Iterable[tuple[int, int]],
    mode: str = "zero",
    *,
    target: int | None = None,
    foil: int | None = None,
    reference: list[torch.Tensor] | None = None,
) -> dict:
    """The next-token distribution and loss with `heads` ablated, against the model as it is.

    mode       "zero": each head's output set to zero; "mean": to its mean over the positions of `ids`, or with
               `reference` (ids (L_r,) of other texts) its mean over every position of those texts
               (`reference_means`: one batched pass)
    target, foil  token ids: the logit difference target − foil at the last position, before and after (both or none)
    Returns {"before", "after"}: each {"logits" (V,) at the last position, "loss" (mean next-token
    cross-entropy over the text, nats), "ld" (the logit difference, float64; None without target and foil)},
    and "kl_bits": KL(before ‖ after) of the last position."""
    ablation_value(torch.zeros(1, 1), mode)  # the mode refused before the model runs
    if (target is None) != (foil is None):
        raise ValueError("target and foil go together: give both tokens of the logit difference, or neither")
    if reference is not None and mode != "mean":
        raise ValueError(f"a reference set goes with the mean ablation (mode 'mean'), not {mode!r}")
    heads = list(heads)
    logits, outs = head_outputs(model, ids)
    means = None if reference is None else reference_means(model, reference)
    patches = {}
    for l, h in heads:
        if not 0 <= l < len(outs):
            raise ValueError(f"layer must be in [0, {len(outs) - 1}], got {l}")
        o = outs[l][:, h]
        value = ablation_value(o, mode) if means is None else means[l][h][None, None]  # (B|1, 1, Dv)
        patches[(l, h)] = value.to(o.dtype).expand_as(o)
    after = run_patched(model, ids, patches)
    p, q = logits[0, -1].double().log_softmax(-1), after[0, -1].double().log_softmax(-1)
    kl = float((p.exp() * (p - q)).sum() / torch.log(torch.tensor(2.0, dtype=torch.float64)))

    def ld(x: torch.Tensor) -> float | None:
        return None if target is None or foil is None else float(_ld(x, target, foil)[0])

    return {
        "before": {"logits": logits[0, -1], "loss": _loss(logits, ids), "ld": ld(logits)},
        "after": {"logits": after[0, -1], "loss": _loss(after, ids), "ld": ld(after)},
        "kl_bits": kl,
    }


def reference_means(model: torch.nn.Module, reference: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per layer each head's mean output over every position of the reference texts, (Hq, Dv) float64: ONE pass of
    them all, right-padded to the longest (a causal model's positions never read a later pad; the pads' own outputs
    are left out of the mean)."""
    rows = [torch.as_tensor(r).reshape(-1) for r in reference]
    if not rows or any(len(r) == 0 for r in rows):
        raise ValueError("the reference set must hold at least one text, each of at least one token")
    n = max(len(r) for r in rows)
    batch = torch.stack([torch.cat([r, r[-1:].expand(n - len(r))]) for r in rows])  # (R, n): pads repeat the last id
    kept = torch.stack([torch.arange(n) < len(r) for r in rows])  # (R, n) the texts' own positions
    _, outs = head_outputs(model, batch)
    w = kept.to(torch.float64)[:, None, :, None]  # (R, 1, n, 1)
    return [(o.double() * w).sum(dim=(0, 2)) / kept.sum() for o in outs]  # (Hq, Dv)


def _loss(logits: torch.Tensor, ids: torch.Tensor) -> float | None:
    if ids.shape[1] < 2:
        return None
    return float(torch.nn.functional.cross_entropy(logits[0, :-1].double(), ids[0, 1:]))


@dataclass(frozen=True)
class Patching:
    """The result of patching clean → corrupted.

    clean_ld, corrupted_ld  logit differences target − foil at the last position
    recovered               (n_layers, n_heads) share of the difference recovered by each head, or
                            (n_layers, L) by each layer's residual at each position
    """

    clean_ld: float
    corrupted_ld: float
    recovered: torch.Tensor


def _ld(logits: torch.Tensor, target: int, foil: int) -> torch.Tensor:
    return logits[:, -1, target].double() - logits[:, -1, foil].double()  # (B,)


def _check_pair(clean: torch.Tensor, corrupted: torch.Tensor) -> None:
    if clean.shape != corrupted.shape or clean.dim() != 2 or clean.shape[0] != 1:
        raise ValueError(
            f"clean and corrupted prompts must have the same token length (1, L): got {tuple(clean.shape)} and "
            f"{tuple(corrupted.shape)}"
        )


def _share(ld: torch.Tensor, clean_ld: float, corrupted_ld: float) -> torch.Tensor:
    gap = clean_ld - corrupted_ld
    if abs(gap) < 1e-9:
        raise ValueError(
            f"the clean and corrupted prompts give the same logit difference ({clean_ld:.4g}): nothing to recover"
        )
    return (ld - corrupted_ld) / gap


def patch_heads(model, clean: torch.Tensor, corrupted: torch.Tensor, target: int, foil: int) -> Patching:
    """Each head's output patched from the clean run into the corrupted one: one prompt per (layer, head), run in
    batches of many prompts (`_batches`)."""
    _check_pair(clean, corrupted)
    clean_logits, clean_outs = head_outputs(model, clean)
    corrupted_logits, _ = head_outputs(model, corrupted)
    clean_ld, corrupted_ld = float(_ld(clean_logits, target, foil)), float(_ld(corrupted_logits, target, foil))
    n_heads = clean_outs[0].shape[1]
    plan = [(l, h) for l in range(len(clean_outs)) for h in range(n_heads)]
    L, Dv = clean.shape[1], clean_outs[0].shape[-1]
    lds = torch.empty(len(plan), dtype=torch.float64)
    for rows in _batches(len(plan), _row_bytes(clean_logits, L, n_heads * Dv, n_heads)):
        chunk = plan[rows]
        where = _rows_by_layer(chunk)
        seen = 0

        def patch(request, compute, where=where):
            nonlocal seen
            result = compute(request)
            here = where.get(seen)
            seen += 1
            if here is None:
                return result
            out = result.output.clone()
            index, heads = here
            out[index, heads] = clean_outs[seen - 1][0, heads].to(out.dtype)  # row b takes its head's clean output
            return Result(out, result.weights, result.lse)

        with torch.no_grad(), intercept(patch):
            lds[rows] = _ld(_last_logits(model, corrupted.expand(len(chunk), -1)), target, foil)
    recovered = _share(lds.reshape(len(clean_outs), n_heads), clean_ld, corrupted_ld)
    return Patching(clean_ld, corrupted_ld, recovered)


ACTIVATION_WIDTHS = 16
"""Widths of the residual stream one prompt's pass holds at once per token, at most (the residual, its norm, Q, K,
V, the attention output and an MLP about 3× wider, with temporaries): what a batch is sized by."""


def _row_bytes(logits: torch.Tensor, L: int, width: int, n_heads: int) -> int:
    """Bytes one prompt of L tokens takes in a pass, about: its activations (`ACTIVATION_WIDTHS` × width per
    token), one head's L × L weights per head, and the last position's logits, in float32."""
    return 4 * (L * ACTIVATION_WIDTHS * width + 2 * n_heads * L * L + logits.shape[-1])


def _batches(n: int, row_bytes: int) -> list[slice]:
    """`n` prompts cut into batches of at most `limits.batch_rows(row_bytes)` (the memory budget)."""
    size = batch_rows(row_bytes)
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def _rows_by_layer(chunk: list[tuple[int, int]]) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """layer → (the batch rows that patch it, which head or position each patches)."""
    found: dict[int, tuple[list[int], list[int]]] = {}
    for row, (layer, at) in enumerate(chunk):
        rows, ats = found.setdefault(layer, ([], []))
        rows.append(row)
        ats.append(at)
    return {l: (torch.tensor(rows), torch.tensor(ats)) for l, (rows, ats) in found.items()}


def _last_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """The logits of the last position, (B, 1, V): a transformers model is asked for that row only
    (`logits_to_keep=1`: its vocabulary-wide head runs on one position instead of L)."""
    import inspect

    keep = "logits_to_keep" in inspect.signature(model.forward).parameters
    logits = _logits(model(ids, logits_to_keep=1) if keep else model(ids))
    return logits[:, -1:]


def blocks_of(model: torch.nn.Module, n_layers: int) -> torch.nn.ModuleList:
    """The model's list of `n_layers` layers (our `blocks`, transformers' `layers` / `h`): the first
    ModuleList of that length whose members are all of one class."""
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n_layers and len({type(m) for m in module}) == 1:
            return module
    raise ValueError(f"{type(model).__name__} has no list of {n_layers} layers to patch the residual stream of")


def patch_residual(model, clean: torch.Tensor, corrupted: torch.Tensor, target: int, foil: int) -> Patching:
    """Each layer's residual output at each position patched from the clean run: one prompt per (layer, position),
    run in batches of many prompts (`_batches`). Where the clean residual is the corrupted one bit for bit (the
    positions before the first changed token, in a causal model), the patch changes nothing: that prompt is the
    corrupted run, its share 0, and it is not run."""
    _check_pair(clean, corrupted)
    clean_logits, outs, stored = _with_residuals(model, clean)
    corrupted_logits, _, plain = _with_residuals(model, corrupted)
    clean_ld, corrupted_ld = float(_ld(clean_logits, target, foil)), float(_ld(corrupted_logits, target, foil))
    blocks = blocks_of(model, len(outs))
    L = clean.shape[1]
    plan = [(l, p) for l in range(len(blocks)) for p in range(L) if not torch.equal(stored[l][0, p], plain[l][0, p])]
    lds = torch.full((len(blocks) * L,), corrupted_ld, dtype=torch.float64)
    width = stored[0].shape[-1]
    for rows in _batches(len(plan), _row_bytes(clean_logits, L, width, outs[0].shape[1])):
        chunk = plan[rows]
        where = _rows_by_layer(chunk)

        def replace(l, o, where=where):
            here = where.get(l)
            if here is None:
                return None
            index, positions = here
            hidden = _first(o).clone()
            hidden[index, positions] = stored[l][0, positions].to(hidden.dtype)  # row b takes its position's
            return (hidden, *o[1:]) if isinstance(o, tuple) else hidden

        with _on_blocks(blocks, replace), torch.no_grad():
            got = _ld(_last_logits(model, corrupted.expand(len(chunk), -1)), target, foil)
        lds[torch.tensor([l * L + p for l, p in chunk])] = got
    return Patching(clean_ld, corrupted_ld, _share(lds.reshape(len(blocks), L), clean_ld, corrupted_ld))


def _with_residuals(model, ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """One run: (logits, per layer the attention output (`head_outputs`), per layer the block's output (1, L, D))."""
    residuals: list[torch.Tensor] = []
    n_layers = len(head_outputs(model, ids[:, :1])[1])  # how many layers: a one-token run
    with _on_blocks(blocks_of(model, n_layers), lambda l, o: residuals.append(_first(o).detach().clone())):
        logits, outs = head_outputs(model, ids)
    return logits, outs, residuals


_OWNER: contextvars.ContextVar[object | None] = contextvars.ContextVar("selfattn_block_hooks", default=None)
"""Whose block hooks run in this context (thread or task): the token of the innermost `_on_blocks`."""


@contextlib.contextmanager
def _on_blocks(blocks: torch.nn.ModuleList, on_output: Callable):
    """`on_output(layer, output)` on each block's output (its return, when not None, replaces the output), for
    this call only: the hooks are installed here and removed on exit, and they act only in the context that
    installed them, so a request served beside this one on the same model (another thread) runs untouched."""
    token = object()

    def hook(layer: int):
        def run(module, args, output):
            return on_output(layer, output) if _OWNER.get() is token else None

        return run

    handles = [block.register_forward_hook(hook(l)) for l, block in enumerate(blocks)]
    owner = _OWNER.set(token)
    try:
        yield
    finally:
        _OWNER.reset(owner)
        for h in handles:
            h.remove()


def _first(o):
    return o[0] if isinstance(o, tuple) else o
