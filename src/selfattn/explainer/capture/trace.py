"""Trace capture: run a model once and keep, for every attention call, what the tutorial names.

    capture(model, input_ids, tokens, intervention) -> ModelTrace
    capture_batch(model, [(input_ids, tokens, model_kwargs), …], intervention) -> [ModelTrace, …]

This module is the capture API and the assembly of each input's ModelTrace; the recorder (the interceptor and the
module hooks, its records a `Call` per attention call) is `capture.recorder`, the padding and cutting of a batch
`capture.batching`, the types `trace_types`.

The one capture point is the `selfattn.attention` call: inside `selfattn.intercept(...)` every
call — from our own `MultiHeadSelfAttention`, or from a transformers model whose attention
implementation is "selfattn" (`selfattn.hf`) — hands its validated request to the recorder:
Q, K (after RoPE, where the model rotates them), V, the scale, the visibility (causal rule,
sliding window, padding, packed segments), the softcap, ALiBi slopes, attention sinks, and the result's
log-sum-exp (which includes the sink) and output. The N×N stages
(scores, scaled, masked, weights) are *not* stored: `LayerTrace.stages(head, rows)` recomputes
them for the rows asked for, exactly, from Q, K and the lse — so a 1,000-token input costs
O(L·D) memory per head, not O(L²).

Around the call, the residual stream is read from whichever modules are running: the module
that made the call (its input is X, what W_Q multiplies; its output the attention output after
W_O) and the module holding it (a block: its output). These are found from the stack of running
modules, so no module class is special: forward hooks on every submodule keep it, installed for one
capture and removed when it ends (raised or not), so the model is left with the hooks it was given.

An `Intervention` (`interventions`: a registry of entries, each `apply(request, values) -> Request`)
changes the computation itself, not only the picture: the recorder rewrites the request inside the
interceptor (no ÷√d_k, no causal rule, a softmax temperature, a blocked link …), for every layer or one,
every head or one, so the next-token prediction changes too. Nothing is set on the model, so one
model can be explained from several threads at once (each thread has its own interceptor).

A batch (`capture_batch`: a text's control and contrast sentences) runs as ONE forward pass, each input right-padded
to the longest, so its positions stay 0 … n−1 (learned positions, RoPE) and a causal row never reaches the
padding. Each attention call is then split at the interceptor into one request per input, cut to that input's
own length (its q, k, v, its rows and keys of the mask, its segments, its window clamped to its length), and
computed, recorded and intervened on exactly as that input alone would be; the outputs are joined back into
the padded batch (padded rows: output 0, lse −inf, as a row that sees nothing) for the rest of the model. So a
padded key is never seen, whatever the causal rule, the model's own mask or the intervention (no_causal, a
mean ablation's mean over the input's own positions), and each ModelTrace holds that input's tensors only:
its length, its visibility, lse, digest, x / attn_out / output and logits. What may differ from the input run
alone is what the model computes batched outside attention (its projections and MLPs as GEMMs of another
shape): float rounding, nothing else — unless a model mixes positions outside attention in both directions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ...functional import intercept
from ...modules import MultiHeadSelfAttention, SelfAttention
from ...request import Request
from ...scores import PER_HEAD
from ..interventions import Intervention
from ..trace_types import HeadChange, LayerTrace, Measure, ModelTrace
from .batching import PAD_ID, Unbatchable, joined_kwargs, one_input, rows_of
from .recorder import ACTIVE, Call, Recorder, stack_hooks, visible_of

__all__ = ["Unbatchable", "capture", "capture_batch"]


def capture(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    tokens: list[str],
    intervention: Intervention | None = None,
    *,
    measure: Measure | None = None,
    **model_kwargs,
) -> ModelTrace:
    """Run `model(input_ids, **model_kwargs)` once and record every `selfattn.attention` call.

    input_ids  (L,) or (1, L) token ids; `tokens` their strings (same length)
    measure    called with each call's own weights where it returned them (`Measure`): the weights exist once,
               here, so what is read of them costs no second computation (None: nothing measured)
    model_kwargs  passed through (for example `attention_mask` of an encoder)
    """
    intervention = _checked_intervention(intervention)
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.Tensor, got {type(input_ids).__name__}")
    ids = input_ids if input_ids.dim() == 2 else input_ids[None]
    if ids.shape[0] != 1:
        raise ValueError(
            f"capture explains one input at a time, got a batch of {ids.shape[0]} (capture_batch runs several)"
        )
    if len(tokens) != ids.shape[1]:
        raise ValueError(f"{len(tokens)} token strings for {ids.shape[1]} token ids")
    return _run(model, ids, [list(tokens)], None, intervention, model_kwargs, [measure])[0]


def capture_batch(
    model: torch.nn.Module,
    inputs: Sequence[tuple[torch.Tensor, Sequence[str], Mapping[str, object]]],
    intervention: Intervention | None = None,
    *,
    measures: Sequence[Measure | None] | None = None,
) -> list[ModelTrace]:
    """Run several inputs in ONE forward pass and return one ModelTrace per input, each that input's alone (the
    module's doc: right padding, every attention call split per input at the interceptor).

    inputs        [(input_ids (L,) or (1, L), token strings (L), model kwargs), …]: what `capture` takes for
                  each; the kwargs' tensors of shape (L,) or (1, L) (an encoder's `attention_mask`) are padded
                  with 0 (a hidden key) and stacked, any other keyword must be the same for every input
    intervention  applied to every input, as `capture` applies it to one
    measures      one `Measure` (or None) per input, each called on that input's own weights (`capture`'s `measure`)
    One input is `capture` itself. `Unbatchable` (a ValueError) where the model's calls cannot be cut per input.
    """
    intervention = _checked_intervention(intervention)
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
        raise TypeError(f"inputs must be a sequence of (input_ids, tokens, model_kwargs), got {type(inputs).__name__}")
    if not inputs:
        raise ValueError("capture_batch needs at least one input, got none")
    rows = [one_input(i, item) for i, item in enumerate(inputs)]
    each: list[Measure | None] = [None] * len(rows) if measures is None else list(measures)
    if len(each) != len(rows):
        raise ValueError(f"measures must give one measure (or None) per input: {len(each)} for {len(rows)} inputs")
    if len(rows) == 1:
        ids, tokens, kwargs = rows[0]
        return [capture(model, ids, tokens, intervention, measure=each[0], **kwargs)]
    lengths = [len(ids) for ids, _, _ in rows]
    longest = max(lengths)
    batch = torch.full((len(rows), longest), PAD_ID, dtype=rows[0][0].dtype, device=rows[0][0].device)
    for b, (ids, _, _) in enumerate(rows):
        batch[b, : len(ids)] = ids
    kwargs = joined_kwargs([kw for _, _, kw in rows], lengths)
    return _run(model, batch, [tokens for _, tokens, _ in rows], lengths, intervention, kwargs, each)


def _checked_intervention(intervention) -> Intervention:
    intervention = Intervention() if intervention is None else intervention
    if not isinstance(intervention, Intervention):
        raise TypeError(f"intervention must be an Intervention, got {type(intervention).__name__}")
    return intervention


def _run(
    model: torch.nn.Module,
    ids: torch.Tensor,
    tokens: list[list[str]],
    lengths: list[int] | None,
    intervention: Intervention,
    model_kwargs: dict,
    measures: list[Measure | None],
) -> list[ModelTrace]:
    """One forward pass of `ids` (B, L) and a ModelTrace per batch item: item 0 as the calls hold it (lengths None:
    one input, `capture`), or each item cut to its length (`capture_batch`); measures: one per item."""
    if not _calls_selfattn(model):
        raise ValueError(
            f"{type(model).__name__} has no MultiHeadSelfAttention layer to explain (nor a "
            f"transformers attention set to 'selfattn': selfattn.hf.register())"
        )
    recorder = Recorder(intervention, lengths, measures)
    token = ACTIVE.set(recorder)
    try:
        with stack_hooks(model, recorder), torch.no_grad(), intercept(recorder.intercept):
            out = model(ids, **model_kwargs)
    finally:
        ACTIVE.reset(token)
    if not recorder.calls:
        raise ValueError(f"{type(model).__name__} made no selfattn.attention call: nothing to explain")
    if intervention.layer is not None and intervention.layer >= len(recorder.calls):
        raise ValueError(f"intervention layer must be in [0, {len(recorder.calls) - 1}], got {intervention.layer}")
    decoder = any(c.causal_before for c in recorder.calls)
    batch = None if lengths is None else (len(lengths), max(lengths))
    logits = _logits(out) if decoder else None
    traces = []
    for b, strings in enumerate(tokens):
        layers = [_layer(c, b, batch) for c in recorder.calls]
        if intervention.head is not None and intervention.head >= layers[0].n_heads:
            raise ValueError(f"intervention head must be in [0, {layers[0].n_heads - 1}], got {intervention.head}")
        n = len(strings)
        traces.append(
            ModelTrace(
                tokens=list(strings),
                token_ids=ids[0] if batch is None else ids[b, :n].clone(),
                layers=layers,
                intervention=intervention,
                logits=None if logits is None else (logits[0] if batch is None else logits[b, :n].clone()),
            )
        )
    return traces


def _calls_selfattn(model) -> bool:
    if not isinstance(model, torch.nn.Module):
        return False
    if getattr(getattr(model, "config", None), "_attn_implementation", None) == "selfattn":
        return True
    return any(isinstance(m, (MultiHeadSelfAttention, SelfAttention)) for m in model.modules())


def _layer(call: Call, b: int = 0, batch: tuple[int, int] | None = None) -> LayerTrace:
    """Item `b`'s LayerTrace of one recorded call; batch (B, L_max) of a batched capture, None for one input."""
    item = call.items[b]
    r: Request = item.request
    res = item.result
    L = r.Lq
    assert res.lse is not None  # every traced call is computed with return_lse=True
    changed = {}
    if item.head_change is not None:
        head, c = item.head_change
        changed[head] = HeadChange(scale=c.scale, softcap=c.softcap, causal=c.causal, visible=visible_of(c, head))
    merged = res.output[0].transpose(0, 1).flatten(1)  # (L, Hq·Dv): the heads side by side
    attn_out = rows_of(call.attn_out, L, b, batch) if call.attn_out is not None else merged
    output = rows_of(call.output, L, b, batch) if call.output is not None else attn_out
    x = rows_of(call.x, L, b, batch) if call.x is not None else merged
    return LayerTrace(
        x=x,
        q=r.q[0],
        k=r.k[0],
        v=r.v[0],
        visible=visible_of(r),
        causal=r.causal,
        scale=r.scale,
        lse=res.lse[0],
        attn_out=attn_out,
        output=output,
        softcap=r.softcap,
        window=r.window,
        changed=changed,
        digest=item.digest,
        measured=item.measured,
        features={name: t.detach()[: r.Hq].clone() for name, t in r.rule.features().items() if name in PER_HEAD},
        out_proj=out_projection(call.caller, call.holder, r.Hq * r.Dv),
    )


OUT_PROJECTIONS = ("o_proj", "out_proj", "c_proj", "dense", "output.dense")
"""Where the output projection W_O sits: on the module that made the attention call (Llama, Qwen, Gemma: o_proj;
ours: out_proj; GPT-2: c_proj, a Conv1D), or on the module holding it (BERT: attention.output.dense)."""


def out_projection(caller, holder, width: int) -> torch.Tensor | None:
    """(d_model, width) the weight of the first `OUT_PROJECTIONS` module on `caller`, then on `holder`, that takes
    `width` = H·Dv inputs (the heads side by side): a Linear's weight as it is, a Conv1D's (GPT-2: x @ W, W (width,
    d_model)) transposed; detached, not copied. None where neither holds one."""
    for module in (caller, holder):
        for path in OUT_PROJECTIONS if module is not None else ():
            proj = module
            for part in path.split("."):
                proj = getattr(proj, part, None)
            weight = getattr(proj, "weight", None)
            if not isinstance(proj, torch.nn.Module) or not isinstance(weight, torch.Tensor) or weight.dim() != 2:
                continue
            conv1d = isinstance(getattr(proj, "nf", None), int)  # transformers' Conv1D: weight (nx, nf)
            w = weight.detach().T if conv1d else weight.detach()
            if w.shape[1] == width:
                return w
    return None


def _logits(out) -> torch.Tensor:
    """(B, L, vocab) from a model's output: our DecoderLM's tensor or transformers' `.logits`."""
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    raise ValueError(f"the model returned {type(out).__name__}, with no logits to predict from")
