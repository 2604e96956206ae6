"""What "auto" chose, remembered by the request's form, so a decoding loop does not weigh five backends per step.

Weighing is every backend's reasons and estimate (`dispatch._pick`): about 200 µs of Python, as long as a whole
decoding step's kernel at a few hundred keys. A choice follows from the request's form — device, dtypes, shapes,
strides, the rule's scalars (causal, window, scale, softcap), which score features it sets, dropout, the return
flags, whether it needs gradients, the materialisation budget, the CPU's instructions as `cpu` answers (a forced
answer, `cpu.forced`) — and from what each backend says may change during a run (`Backend.state`: the native kernel
built, a flex signature compiled; a backend's `Cost` record replaced counts too), as long as every backend's reasons
read no tensor values for it (`Backend.form_decides`: SDPA looks for NaN keys under a mask; a backend
registered at run time is assumed to read values). Only such requests are remembered; a mask or segments (whose
values decide visible pairs) always weigh afresh. `kernels.explain` always weighs afresh, and says the same.

    remembered(request, backends)      the name chosen before for this form and state, or None
    remember(request, backends, name)  keep it (at most MAX_CHOICES forms, least recently used forgotten)
    forget()                           drop them all (`dispatch.register` does: a new backend weighs in)
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Hashable, Mapping

import torch

from . import cpu
from .base import Backend, Request, budget_bytes

__all__ = ["remembered", "remember", "forget", "MAX_CHOICES"]

MAX_CHOICES = 256
"""Forms remembered: a model's layers share a few (prefill, then one per decoding length bucket); a server that
sees every length keeps at most this many."""

_LOCK = threading.Lock()
_CHOICES: collections.OrderedDict[Hashable, str] = collections.OrderedDict()


def _key(request: Request, backends: Mapping[str, Backend]) -> Hashable | None:
    """The form and state that decide "auto"'s choice for `request`, or None where values may decide it (a mask,
    segments, a backend whose reasons read values) or nothing may be kept (while torch.compile traces)."""
    rule = request.rule
    if torch.compiler.is_compiling() or rule.mask is not None or rule.segments is not None:
        return None
    if not all(isinstance(t, torch.Tensor) for t in rule.features().values()):  # a mask_mod's or score_mod's values
        return None
    if not all(backend.form_decides(request) for backend in backends.values()):
        return None
    q, k, v = request.q, request.k, request.v
    features = tuple((name, tuple(t.shape), t.dtype, t.requires_grad) for name, t in rule.features().items())
    return (
        q.device,
        tuple((t.dtype, tuple(t.shape), t.stride()) for t in (q, k, v)),
        (rule.causal, rule.window, rule.scale, rule.softcap, features),
        (request.dropout_p, request.return_weights, request.return_lse, request.needs_grad),
        budget_bytes(),
        cpu.name(),  # a forced instruction set (`cpu.forced`) changes what native runs and what each costs
        torch._C._are_functorch_transforms_active(),  # flex refuses vmap and grad on the CPU
        tuple((name, id(backend), id(backend.cost), backend.state()) for name, backend in backends.items()),
    )


def remembered(request: Request, backends: Mapping[str, Backend]) -> tuple[Hashable | None, str | None]:
    """(the key of `request`'s form — None where it may not be remembered —, the name chosen for it before)."""
    key = _key(request, backends)
    if key is None:
        return None, None
    with _LOCK:
        name = _CHOICES.get(key)
        if name is not None:
            _CHOICES.move_to_end(key)
        return key, name


def remember(key: Hashable | None, name: str) -> None:
    """Keep `name` as the choice for the form `key` (from `remembered`; None: nothing kept)."""
    if key is None:
        return
    with _LOCK:
        _CHOICES[key] = name
        while len(_CHOICES) > MAX_CHOICES:
            _CHOICES.popitem(last=False)


def forget() -> None:
    """Drop every remembered choice."""
    with _LOCK:
        _CHOICES.clear()
