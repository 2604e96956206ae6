"""Trace capture: run a model once and keep, for every attention call, what the tutorial names.

    capture(model, input_ids, tokens, intervention) -> ModelTrace
    capture_batch(model, [(input_ids, tokens, model_kwargs), …], intervention) -> [ModelTrace, …]

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

import contextlib
import contextvars
import dataclasses
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

import torch

from ...functional import intercept
from ...kernels.base import Result
from ...masks import visibility
from ...modules import MultiHeadSelfAttention, SelfAttention
from ...request import Request, check_window
from ...scores import PER_HEAD
from ..interventions import Intervention
from ..trace_types import HeadChange, LayerTrace, Measure, ModelTrace
from .digest import DIGEST_WEIGHTS_BYTES, Digest, digest, row_nats

if TYPE_CHECKING:
    pass

__all__ = ["Unbatchable", "capture", "capture_batch"]

PAD_ID = 0
"""The id the shorter inputs of a batch are padded with (on the right): never read by a real position."""


class Unbatchable(ValueError):
    """A model `capture_batch` cannot cut per input: an attention call not over the whole padded batch (another
    batch size or length), or a module's tensor that is not batch-first. Each input can still be captured alone."""


UNREAD = {"digest": None, "measured": None}
"""What a call read of its weights when it did not ask for them (too large: `summary.scan` recomputes them)."""
MEASURED_DTYPES = (torch.float32, torch.float64)
"""Weights measured at the capture point: a half-precision call's are too coarse for numbers stated to 0.01 %."""


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
    rows = [_one_input(i, item) for i, item in enumerate(inputs)]
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
    kwargs = _joined_kwargs([kw for _, _, kw in rows], lengths)
    return _run(model, batch, [tokens for _, tokens, _ in rows], lengths, intervention, kwargs, each)


def _checked_intervention(intervention) -> Intervention:
    intervention = Intervention() if intervention is None else intervention
    if not isinstance(intervention, Intervention):
        raise TypeError(f"intervention must be an Intervention, got {type(intervention).__name__}")
    return intervention


def _one_input(i: int, item) -> tuple[torch.Tensor, list[str], dict]:
    """Input `i` of a batch as ((L,) ids, its L token strings, its model kwargs), checked."""
    if not isinstance(item, (tuple, list)) or len(item) != 3:
        raise TypeError(f"input {i} must be (input_ids, tokens, model_kwargs), got {type(item).__name__}")
    ids, tokens, kwargs = item
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"input {i}'s input_ids must be a torch.Tensor, got {type(ids).__name__}")
    if ids.dim() == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.dim() != 1 or ids.shape[0] == 0:
        raise ValueError(f"input {i}'s input_ids must have shape (L,) or (1, L) with L >= 1, got {tuple(ids.shape)}")
    if isinstance(tokens, str) or len(tokens) != ids.shape[0]:
        raise ValueError(f"input {i} has {len(tokens)} token strings for {ids.shape[0]} token ids")
    if not isinstance(kwargs, Mapping):
        raise TypeError(f"input {i}'s model_kwargs must be a mapping, got {type(kwargs).__name__}")
    return ids, list(tokens), dict(kwargs)


def _joined_kwargs(each: list[dict], lengths: list[int]) -> dict:
    """The model keywords of a batch: per-position tensors ((L,) or (1, L)) padded with 0 and stacked (B, L_max);
    every other keyword the same for every input (one forward pass takes one value)."""
    longest = max(lengths)
    names = list(each[0])
    out: dict = {}
    for i, kw in enumerate(each):
        if sorted(kw) != sorted(names):
            raise ValueError(f"input {i}'s model keywords {sorted(kw)} are not input 0's {sorted(names)}")
    for name in names:
        values = [kw[name] for kw in each]
        if not any(isinstance(v, torch.Tensor) for v in values):
            if any(v != values[0] for v in values[1:]):
                raise ValueError(f"model keyword {name!r} differs between the inputs: one forward pass takes one value")
            out[name] = values[0]
            continue
        rows = []
        for i, (v, n) in enumerate(zip(values, lengths, strict=True)):
            row = v[0] if isinstance(v, torch.Tensor) and v.dim() == 2 and v.shape[0] == 1 else v
            if not isinstance(row, torch.Tensor) or row.dim() != 1 or row.shape[0] != n:
                shape = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
                raise ValueError(
                    f"model keyword {name!r} of input {i} is {shape}: a batch pads only per-position tensors, "
                    f"(L,) or (1, L) with L = {n} (its ids)"
                )
            rows.append(torch.nn.functional.pad(row, (0, longest - n), value=0))
        out[name] = torch.stack(rows)
    return out


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
    recorder = _Recorder(intervention, lengths, measures)
    token = _ACTIVE.set(recorder)
    try:
        with _stack_hooks(model, recorder), torch.no_grad(), intercept(recorder.intercept):
            out = model(ids, **model_kwargs)
    finally:
        _ACTIVE.reset(token)
    if not recorder.calls:
        raise ValueError(f"{type(model).__name__} made no selfattn.attention call: nothing to explain")
    if intervention.layer is not None and intervention.layer >= len(recorder.calls):
        raise ValueError(f"intervention layer must be in [0, {len(recorder.calls) - 1}], got {intervention.layer}")
    decoder = any(c["causal_before"] for c in recorder.calls)
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


# --- the recorder: an interceptor, and hooks that keep the stack of running modules ------------

_ACTIVE: contextvars.ContextVar[_Recorder | None] = contextvars.ContextVar("selfattn_explain_recorder", default=None)


class _Recorder:
    """One capture: the attention calls in order, and the modules running around them.

    lengths   None: one input (each call recorded as it is, batch item 0); else each batch item's own length
              (`capture_batch`): every call is split into one request per item, cut to its length
    measures  one `Measure` or None per batch item (one input: [measure])"""

    def __init__(
        self,
        intervention: Intervention,
        lengths: list[int] | None = None,
        measures: Sequence[Measure | None] | None = None,
    ):
        self.intervention = intervention
        self.lengths = lengths
        self.measures = list(measures) if measures is not None else [None] * (1 if lengths is None else len(lengths))
        self.calls: list[dict] = []
        self.stack: list[tuple[torch.nn.Module, torch.Tensor | None]] = []

    def enter(self, module, args, kwargs) -> None:
        self.stack.append((module, _first_tensor(args, kwargs)))

    def leave(self, module, output) -> None:
        if not self.stack or self.stack[-1][0] is not module:
            return
        self.stack.pop()
        out = output[0] if isinstance(output, (tuple, list)) else output
        for call in reversed(self.calls):
            if call["caller"] is module and "attn_out" not in call:
                call["attn_out"] = out
            elif call["holder"] is module and "output" not in call:
                call["output"] = out

    def intercept(self, request: Request, compute) -> Result:
        layer = len(self.calls)
        if self.lengths is None:
            items = [self._one(request, layer, compute, self.measures[0])]
            result = items[0][1]
        else:
            cut = _items(request, self.lengths, layer)
            items = [self._one(r, layer, compute, m) for r, m in zip(cut, self.measures, strict=True)]
            result = _joined(request, [res for _, res in items], self.lengths)
        caller, x = self.stack[-1] if self.stack else (None, None)
        holder = self.stack[-2][0] if len(self.stack) > 1 else None
        self.calls.append(
            {
                "items": [record for record, _ in items],
                "x": x,
                "caller": caller,
                "holder": holder,
                "causal_before": request.causal,
            }
        )
        return result._replace(
            lse=result.lse if request.return_lse else None,
            weights=result.weights if request.return_weights else None,
        )

    def _one(self, request: Request, layer: int, compute, measure: Measure | None) -> tuple[dict, Result]:
        """(the record of one input's call: its kept request, head change, result without weights, digest; the
        result the model gets, with weights only where it asked) — the request recorded, intervened on and
        computed as that input alone."""
        square = request.Lq == request.Lk
        base = dataclasses.replace(
            request.with_rule(mask=_bool_mask(request.mask, request.q.dtype)),
            return_lse=True,
            return_weights=request.return_weights or (square and request.weights_bytes <= DIGEST_WEIGHTS_BYTES),
        )
        iv = self.intervention
        applies = bool(iv) and iv.applies_to(layer)  # a scope with nothing to apply changes nothing
        changed = iv.apply(base) if applies else base
        if applies and iv.head is not None and iv.head < base.Hq:
            result = _compute_one_head_apart(base, changed, iv.head, compute)
            kept, head_change = base, (iv.head, changed)
        else:
            result = compute(changed)
            kept, head_change = changed, None
        record = {
            "request": kept,
            "head_change": head_change,
            "result": result._replace(weights=None),  # the weights are read now, never kept
            **(_read(result, kept, head_change, measure) if base.return_weights else UNREAD),
        }
        # the weights go now unless the model asked for them: a batch holds one input's at a time, as alone
        return record, result if request.return_weights else result._replace(weights=None)


def _read(result: Result, kept: Request, head_change, measure: Measure | None) -> dict:
    """{"digest", "measured"} of one input's call from its own weights (batch item 0 of its request): the digest,
    and `measure` of every head by the call's one rule — None without `measure`, for half-precision weights
    (`MEASURED_DTYPES`) and when a head was changed apart (its own rule: measured later). Each row's entropy is
    computed once for both."""
    assert result.weights is not None  # called only where the request asked for the weights
    weights = result.weights[0]  # (H, L, L)
    measured = measure is not None and head_change is None and weights.dtype in MEASURED_DTYPES
    nats = row_nats(weights.float()) if measured else None
    out: dict[str, object] = {"digest": _digest_of(result, kept, head_change, nats), "measured": None}
    if measured:
        assert measure is not None and nats is not None
        out["measured"] = measure(weights, _visible(kept), kept.causal, nats)
    return out


def _items(request: Request, lengths: list[int], layer: int) -> list[Request]:
    """The call `request` of a padded batch as one request per batch item, each cut to the item's own length."""
    B, longest = len(lengths), max(lengths)
    if (request.B, request.Lq, request.Lk) != (B, longest, longest):
        raise Unbatchable(
            f"a batched capture needs every attention call over the whole padded batch (B={B}, Lq = Lk = "
            f"{longest}); call {layer} has B={request.B}, Lq={request.Lq}, Lk={request.Lk}"
        )
    return [_item(request, b, n) for b, n in enumerate(lengths)]


def _item(r: Request, b: int, n: int) -> Request:
    """Batch item `b` of `r`, its first `n` positions: what the call is for that input alone. The mask keeps its
    rows and keys (dropped when it then hides nothing: the padding was all it hid), a per-position feature
    (segments) its positions, a per-head one stays; the window is clamped to n as a lone call's is."""
    rule = r.rule
    changes: dict = {"window": check_window(rule.window, n, n)}
    mask = rule.mask
    if mask is not None:
        mask = mask[b : b + 1] if mask.shape[0] > 1 else mask
        mask = mask[:, :, :n] if mask.shape[2] > 1 else mask
        mask = mask[..., :n] if mask.shape[3] > 1 else mask
        changes["mask"] = None if mask.dtype == torch.bool and bool(mask.all()) else mask
    for name, value in rule.features().items():
        if value.dim() >= 2 and value.shape[0] == r.B:  # one row per batch item (segments: (B, L))
            value = value[b : b + 1]
            changes[name] = value[..., :n] if value.shape[-1] == r.Lk else value
    return dataclasses.replace(
        r,
        q=r.q[b : b + 1, :, :n].contiguous(),
        k=r.k[b : b + 1, :, :n].contiguous(),
        v=r.v[b : b + 1, :, :n].contiguous(),
        rule=rule.replace(**changes),
    )


def _joined(request: Request, results: list[Result], lengths: list[int]) -> Result:
    """The items' results as the padded batch's: (B, Hq, L_max, Dv) outputs, (B, Hq, L_max) lse and, where the
    model asked for them, (B, Hq, L_max, L_max) weights; a padded row is a row that sees nothing (output 0,
    weights 0, lse −inf)."""
    first = results[0]
    B, Hq, longest = request.B, request.Hq, request.Lq
    output = first.output.new_zeros((B, Hq, longest, first.output.shape[-1]))
    assert first.lse is not None  # every item is computed with return_lse=True
    lse = first.lse.new_full((B, Hq, longest), float("-inf"))
    weights = None
    if request.return_weights and first.weights is not None:
        weights = first.weights.new_zeros((B, Hq, longest, longest))
    for b, (res, n) in enumerate(zip(results, lengths, strict=True)):
        assert res.lse is not None
        output[b, :, :n] = res.output[0]
        lse[b, :, :n] = res.lse[0]
        if weights is not None and res.weights is not None:
            weights[b, :, :n, :n] = res.weights[0]
    return Result(output, weights, lse)


def _compute_one_head_apart(base: Request, changed: Request, head: int, compute) -> Result:
    """All heads by `base`, then head `head` again by `changed`, spliced in."""
    full = compute(base)
    part = compute(changed.one_head(head))
    output, lse = full.output.clone(), full.lse.clone()
    output[:, head : head + 1], lse[:, head : head + 1] = part.output, part.lse
    weights = None
    if full.weights is not None:
        weights = full.weights.clone()
        weights[:, head : head + 1] = part.weights
    return Result(output, weights, lse)


@contextlib.contextmanager
def _stack_hooks(model: torch.nn.Module, recorder: _Recorder):
    """For one capture: hooks on every submodule that push and pop the running modules into `recorder`, removed
    when the capture ends (raised or not), so the model is left as it was given. A forward of the same model
    in another thread or capture calls these hooks too; they record only where `recorder` is the active one."""
    handles = []
    try:
        for module in model.modules():
            handles.append(module.register_forward_pre_hook(partial(_on_enter, recorder), with_kwargs=True))
            handles.append(module.register_forward_hook(partial(_on_leave, recorder)))
        yield
    finally:
        for handle in handles:
            handle.remove()


def _on_enter(recorder: _Recorder, module, args, kwargs):
    if _ACTIVE.get() is recorder:
        recorder.enter(module, args, kwargs)


def _on_leave(recorder: _Recorder, module, args, output):
    if _ACTIVE.get() is recorder:
        recorder.leave(module, output)


def _first_tensor(args, kwargs) -> torch.Tensor | None:
    for name in ("hidden_states", "x"):
        if isinstance(kwargs.get(name), torch.Tensor):
            return kwargs[name]
    return next((a for a in args if isinstance(a, torch.Tensor)), None)


def _calls_selfattn(model) -> bool:
    if not isinstance(model, torch.nn.Module):
        return False
    if getattr(getattr(model, "config", None), "_attn_implementation", None) == "selfattn":
        return True
    return any(isinstance(m, (MultiHeadSelfAttention, SelfAttention)) for m in model.modules())


def _bool_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """An additive 0 / −inf (or dtype-minimum) mask as bool, True = may look; bool and None as they are.
    A mask with other values carries biases the explainer's stages would not show: refused."""
    if mask is None or mask.dtype == torch.bool:
        return mask
    hidden = mask <= torch.finfo(mask.dtype).min / 2
    if bool((mask[~hidden] != 0).any()):
        raise ValueError(
            "the explainer reads visibility masks only (0 / -inf); this additive mask carries "
            "biases that its stages would not show"
        )
    return ~hidden


def _digest_of(result: Result, kept: Request, head_change, nats: torch.Tensor | None = None) -> Digest:
    """The Digest of batch item 0 from the weights the call returned, each head with the rule it was computed by."""
    visible = _visible(kept)[None]  # (1, L, L)
    if head_change is not None:
        head, changed = head_change
        visible = visible.expand(kept.Hq, -1, -1).clone()
        visible[head] = _visible(changed, head)
    assert result.weights is not None  # called only where the request asked for the weights
    weights = result.weights[0]  # (H, L, L)
    return digest(lambda start, stop: weights[:, start:stop], visible, kept.Lq, kept.Hq, nats=nats)


def _visible(r: Request, head: int = 0) -> torch.Tensor:
    """(Lq, Lk) bool of batch item 0, query head `head`: rule and mask together."""
    visible = visibility(r.Lq, r.Lk, causal=r.causal, window=r.window, device=r.q.device)
    apart = r.rule.apart()
    if apart is not None:
        visible = visible & ~apart[0, 0]
    if r.mask is not None:
        full = r.mask.expand(r.B, r.Hq, r.Lq, r.Lk)
        visible = visible & full[0, head if r.mask.dim() == 4 and r.mask.shape[1] > 1 else 0]
    return visible


def _layer(call: dict, b: int = 0, batch: tuple[int, int] | None = None) -> LayerTrace:
    """Item `b`'s LayerTrace of one recorded call; batch (B, L_max) of a batched capture, None for one input."""
    item = call["items"][b]
    r: Request = item["request"]
    res: Result = item["result"]
    L = r.Lq
    assert res.lse is not None  # every traced call is computed with return_lse=True
    changed = {}
    if item["head_change"] is not None:
        head, c = item["head_change"]
        changed[head] = HeadChange(scale=c.scale, softcap=c.softcap, causal=c.causal, visible=_visible(c, head))
    merged = res.output[0].transpose(0, 1).flatten(1)  # (L, Hq·Dv): the heads side by side
    attn_out = _rows_of(call["attn_out"], L, b, batch) if "attn_out" in call else merged
    output = _rows_of(call["output"], L, b, batch) if "output" in call else attn_out
    x = _rows_of(call["x"], L, b, batch) if call["x"] is not None else merged
    return LayerTrace(
        x=x,
        q=r.q[0],
        k=r.k[0],
        v=r.v[0],
        visible=_visible(r),
        causal=r.causal,
        scale=r.scale,
        lse=res.lse[0],
        attn_out=attn_out,
        output=output,
        softcap=r.softcap,
        window=r.window,
        changed=changed,
        digest=item["digest"],
        measured=item["measured"],
        features={name: t.detach()[: r.Hq].clone() for name, t in r.rule.features().items() if name in PER_HEAD},
        out_proj=out_projection(call["caller"], call["holder"], r.Hq * r.Dv),
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


def _rows_of(t: torch.Tensor, L: int, b: int = 0, batch: tuple[int, int] | None = None) -> torch.Tensor:
    """(L, width): the last L positions of batch item 0 (one input), or item b's first L of the padded batch
    (B, L_max) — after any positions the module holds before the batch's (its rows less L_max), a copy, so the
    item's trace holds its own rows only."""
    if batch is None:
        return t.reshape(-1, t.shape[-1])[-L:]
    B, longest = batch
    if t.dim() >= 3 and t.shape[0] != B or t.dim() == 2 and t.shape[0] % B or t.dim() < 2:
        raise Unbatchable(
            f"a module's tensor of shape {tuple(t.shape)} is not batch-first for a batch of {B}: cannot cut its rows"
        )
    rows = t.reshape(B, -1, t.shape[-1])[b]
    start = rows.shape[0] - longest
    if start < 0:
        raise Unbatchable(f"a module's tensor of shape {tuple(t.shape)} has fewer than {longest} positions per item")
    return rows[start : start + L].clone()


def _logits(out) -> torch.Tensor:
    """(B, L, vocab) from a model's output: our DecoderLM's tensor or transformers' `.logits`."""
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    raise ValueError(f"the model returned {type(out).__name__}, with no logits to predict from")
