"""The recorder of one capture: an interceptor that records every `selfattn.attention` call of one forward pass (its
request as computed, the intervention applied, its result, what was read of its weights), and module hooks that keep
the stack of running modules around each call (its caller's input and output, its holder's output).

    Recorder(intervention, lengths, measures)   .intercept (the interceptor) · .calls [Call] · .enter / .leave
    Call      one attention call: its Record per input, x, caller, holder, causal_before, attn_out, output
    Record    one input's part of a call: the request kept, a head changed apart, the result (no weights), the digest
              and the measures read from its weights
    stack_hooks(model, recorder)   the hooks for one capture, removed when it ends
    ACTIVE    the recorder of the running capture (a context variable: hooks of another capture record nothing)
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch

from ...kernels.base import Result
from ...masks import visibility
from ...request import Request
from ..interventions import Intervention
from ..trace_types import Measure
from .batching import items, joined
from .digest import DIGEST_WEIGHTS_BYTES, Digest, digest, row_nats

__all__ = ["ACTIVE", "Call", "Record", "Recorder", "MEASURED_DTYPES", "bool_mask", "stack_hooks", "visible_of"]


@dataclass(frozen=True)
class Record:
    """One input's part of one attention call.

    request      the request as computed (the base one where a head was changed apart: `head_change`)
    head_change  (head, that head's changed request) or None
    result       the result without its weights (they are read at the call, never kept)
    digest       per-head numbers read from the weights (`capture.digest`), None where they were not asked
    measured     `Measure`'s result per head, None where nothing was measured"""

    request: Request
    head_change: tuple[int, Request] | None
    result: Result
    digest: Digest | None = None
    measured: list | None = None


@dataclass
class Call:
    """One attention call of the forward pass: a Record per input, and the modules around it — x the input of the
    module that made it (`caller`), attn_out that module's output, output the output of the module holding it
    (`holder`), each read when the module returns (None until then, or when there is no such module)."""

    items: list[Record]
    x: torch.Tensor | None
    caller: torch.nn.Module | None
    holder: torch.nn.Module | None
    causal_before: bool
    attn_out: torch.Tensor | None = None
    output: torch.Tensor | None = None


MEASURED_DTYPES = (torch.float32, torch.float64)
"""Weights measured at the capture point: a half-precision call's are too coarse for numbers stated to 0.01 %."""


ACTIVE: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar("selfattn_explain_recorder", default=None)


class Recorder:
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
        self.calls: list[Call] = []
        self.stack: list[tuple[torch.nn.Module, torch.Tensor | None]] = []

    def enter(self, module, args, kwargs) -> None:
        self.stack.append((module, _first_tensor(args, kwargs)))

    def leave(self, module, output) -> None:
        if not self.stack or self.stack[-1][0] is not module:
            return
        self.stack.pop()
        out = output[0] if isinstance(output, (tuple, list)) else output
        for call in reversed(self.calls):
            if call.caller is module and call.attn_out is None:
                call.attn_out = out
            elif call.holder is module and call.output is None:
                call.output = out

    def intercept(self, request: Request, compute) -> Result:
        layer = len(self.calls)
        if self.lengths is None:
            parts = [self._one(request, layer, compute, self.measures[0])]
            result = parts[0][1]
        else:
            cut = items(request, self.lengths, layer)
            parts = [self._one(r, layer, compute, m) for r, m in zip(cut, self.measures, strict=True)]
            result = joined(request, [res for _, res in parts], self.lengths)
        caller, x = self.stack[-1] if self.stack else (None, None)
        holder = self.stack[-2][0] if len(self.stack) > 1 else None
        self.calls.append(
            Call(
                items=[record for record, _ in parts],
                x=x,
                caller=caller,
                holder=holder,
                causal_before=request.causal,
            )
        )
        return result._replace(
            lse=result.lse if request.return_lse else None,
            weights=result.weights if request.return_weights else None,
        )

    def _one(self, request: Request, layer: int, compute, measure: Measure | None) -> tuple[Record, Result]:
        """(the record of one input's call: its kept request, head change, result without weights, digest; the
        result the model gets, with weights only where it asked) — the request recorded, intervened on and
        computed as that input alone."""
        square = request.Lq == request.Lk
        base = dataclasses.replace(
            request.with_rule(mask=bool_mask(request.mask, request.q.dtype)),
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
        digest_, measured = _read(result, kept, head_change, measure) if base.return_weights else (None, None)
        record = Record(
            request=kept,
            head_change=head_change,
            result=result._replace(weights=None),  # the weights are read now, never kept
            digest=digest_,
            measured=measured,
        )
        # the weights go now unless the model asked for them: a batch holds one input's at a time, as alone
        return record, result if request.return_weights else result._replace(weights=None)


def _read(result: Result, kept: Request, head_change, measure: Measure | None) -> tuple[Digest, list | None]:
    """(digest, measured) of one input's call from its own weights (batch item 0 of its request): the digest,
    and `measure` of every head by the call's one rule — None without `measure`, for half-precision weights
    (`MEASURED_DTYPES`) and when a head was changed apart (its own rule: measured later). Each row's entropy is
    computed once for both."""
    assert result.weights is not None  # called only where the request asked for the weights
    weights = result.weights[0]  # (H, L, L)
    measured = measure is not None and head_change is None and weights.dtype in MEASURED_DTYPES
    nats = row_nats(weights.float()) if measured else None
    found = _digest_of(result, kept, head_change, nats)
    if not measured:
        return found, None
    assert measure is not None and nats is not None
    return found, measure(weights, visible_of(kept), kept.causal, nats)


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
def stack_hooks(model: torch.nn.Module, recorder: Recorder):
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


def _on_enter(recorder: Recorder, module, args, kwargs):
    if ACTIVE.get() is recorder:
        recorder.enter(module, args, kwargs)


def _on_leave(recorder: Recorder, module, args, output):
    if ACTIVE.get() is recorder:
        recorder.leave(module, output)


def _first_tensor(args, kwargs) -> torch.Tensor | None:
    for name in ("hidden_states", "x"):
        if isinstance(kwargs.get(name), torch.Tensor):
            return kwargs[name]
    return next((a for a in args if isinstance(a, torch.Tensor)), None)


def bool_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
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
    visible = visible_of(kept)[None]  # (1, L, L)
    if head_change is not None:
        head, changed = head_change
        visible = visible.expand(kept.Hq, -1, -1).clone()
        visible[head] = visible_of(changed, head)
    assert result.weights is not None  # called only where the request asked for the weights
    weights = result.weights[0]  # (H, L, L)
    return digest(lambda start, stop: weights[:, start:stop], visible, kept.Lq, kept.Hq, nats=nats)


def visible_of(r: Request, head: int = 0) -> torch.Tensor:
    """(Lq, Lk) bool of batch item 0, query head `head`: rule and mask together."""
    visible = visibility(r.Lq, r.Lk, causal=r.causal, window=r.window, device=r.q.device)
    apart = r.rule.apart()
    if apart is not None:
        visible = visible & ~apart[0, 0]
    if r.mask is not None:
        full = r.mask.expand(r.B, r.Hq, r.Lq, r.Lk)
        visible = visible & full[0, head if r.mask.dim() == 4 and r.mask.shape[1] > 1 else 0]
    return visible
