"""The registry of backends, and how a request finds one: `choose`, `explain`, `render`.

    choose(request, "auto")    the backend that serves it (the fastest by `cost`), or a ValueError
                               that gives every backend's every reason
    explain(request)           a dict: each backend's estimate or reasons, the choice and why,
                               and the tiled kernel's block plan
    render(explain(request))   that dict as text, the block plan drawn F / P / .
    register(backend)          one more backend (BACKENDS is the registry, in "auto"'s preference order)

"auto" remembers its choice for a request's form (`kernels.choices`: shapes, dtypes, the rule's scalars, the
backends' state) where no backend reads tensor values to decide, so a decoding loop weighs once per form.

A reroute is a dispatch rule here, never one backend calling another: SDPA refuses a masked request
whose keys hold NaN (its mask would spread it), and "auto" takes the next that can serve it, which
`explain` reports. How to add a backend: docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import torch

from .. import checks, masks
from ..request import build_request
from ..scores import FEATURES
from . import choices, cost
from .base import Backend, Capabilities, Cost, Request
from .flex import FlexBackend
from .naive import NaiveBackend
from .native import NativeBackend
from .sdpa import SdpaBackend, fused_causal
from .tiled import Plan, TiledBackend

__all__ = ["BACKENDS", "auto_order", "register", "check_backend", "choose", "explain", "render", "MAX_DRAWN_BLOCKS"]

BACKENDS: dict[str, Backend] = {
    b.name: b for b in (SdpaBackend(), NativeBackend(), TiledBackend(), FlexBackend(), NaiveBackend())
}
"""The registry, in "auto"'s order of preference where estimates tie or none applies.

On a CPU, "auto" takes the one with the smallest `cost.estimate_seconds` among those that
accept the request: SDPA for plain and causal (Lq = Lk) attention, where PyTorch's fused
kernel is fastest; "native" (the compiled C++ kernel, once built: auto never waits on its
compile) and "tiled" for sliding windows and bottom-right causal with Lq ≠ Lk, where they skip
the blocks SDPA has to compute through a dense mask, and for what SDPA refuses (lse, softcap,
sinks, ALiBi, segments, NaN keys under a mask), native where its estimate is the smaller; "naive"
when weights are asked for (nothing else returns them) or the problem is tiny. On other devices the
CPU-measured rates do not apply: SDPA for plain and square-causal attention, flex for the rest, else
the first accepting backend in this order.
A backend without a `Cost` record is never taken by "auto"."""

NO_COST = "it has no cost record (Backend.cost), so auto cannot weigh it; ask for it by name"
"""Why "auto" passes over a backend that declares no `base.Cost`."""


def auto_order() -> tuple[str, ...]:
    """The registered backends' names in "auto"'s preference order (the registry's order)."""
    return tuple(BACKENDS)


def register(backend: Backend) -> Backend:
    """Add `backend` to the registry (last in the preference order): `attention(..., backend=name)` and
    `explain` know it at once, and "auto" weighs it when it has a `Cost` record. Returns it."""
    if not isinstance(backend, Backend):
        raise TypeError(f"register needs a selfattn.kernels.Backend, got {type(backend).__name__}")
    name = backend.name
    if not isinstance(name, str) or not name or name == "auto":
        raise ValueError(f"a backend needs a name other than 'auto', got {name!r}")
    if name in BACKENDS:
        raise ValueError(f"a backend called {name!r} is registered already: {BACKENDS[name]!r}")
    if not isinstance(getattr(backend, "capabilities", None), Capabilities):
        raise TypeError(f"backend {name!r} declares no Capabilities (its capabilities attribute)")
    BACKENDS[name] = backend
    choices.forget()  # it weighs in from now on
    return backend


MAX_DRAWN_BLOCKS = 64
"""`explain` draws the tiled block plan only up to this many query or key blocks."""


def check_backend(backend) -> str:
    """`backend` if it is "auto" or a name in BACKENDS; else a TypeError / ValueError naming it."""
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a str, got {type(backend).__name__} {backend!r}")
    if backend != "auto" and backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose 'auto' or one of {sorted(BACKENDS)}")
    return backend


def _reasons(request: Request, candidates, *, auto: bool = False) -> dict[str, list[str]]:
    """Each candidate's reasons to refuse; with `auto`, also the reasons "auto" passes it over for."""
    return {
        name: BACKENDS[name].not_supported_reasons(request) + (_auto_reasons(name, request) if auto else [])
        for name in candidates
    }


def _auto_reasons(name: str, request: Request) -> list[str]:
    backend = BACKENDS[name]
    return backend.auto_reasons(request) + ([NO_COST] if backend.cost is None else [])


def _pick(request: Request, able: list[str]) -> tuple[str, str]:
    """(choice, why) among the backends `able` to serve the request (in the registry's order).

    On a CPU: the estimates within `cost.CLOSE` of the fastest are close, and among them the one
    with the best busy-core estimate (× Cost.busy_factor) wins (the best worst case). On a GPU the
    CPU rates say nothing: SDPA's fused kernels (flash / cuDNN) for plain and square-causal
    attention, flex for the rest."""
    order = ", ".join(auto_order())
    if request.q.device.type != "cpu":
        plain = request.mask is None and request.window is None and (not request.causal or fused_causal(request))
        for name in ("sdpa", "flex") if plain else ("flex", "sdpa"):
            if name in able:
                return (
                    name,
                    (
                        f"on {request.q.device.type}: SDPA's fused kernels for plain and causal attention, "
                        f"flex for windows, masks and softcaps"
                    ),
                )
        return able[0], f"on {request.q.device.type}: the first that can serve it in {order}"
    # on a CPU, `able` holds only backends with a Cost record (`_auto_reasons`): every estimate is a float
    estimates = {name: cast(float, cost.estimate_seconds(BACKENDS[name], request)) for name in able}
    if len(able) == 1:
        return able[0], "the only backend that can serve it"
    fastest = min(estimates.values())
    close = [name for name in able if estimates[name] <= fastest * cost.CLOSE]
    best = min(close, key=lambda name: estimates[name] * cast(Cost, BACKENDS[name].cost).busy_factor)
    if len(close) == 1:
        return best, f"the smallest estimated time among {', '.join(able)} (selfattn.kernels.cost)"
    return (
        best,
        f"{', '.join(close)} are within {cost.CLOSE}× of each other: the one fastest on busy cores (Cost.busy_factor)",
    )


def choose(request: Request, name: str) -> Backend:
    """The backend called `name` if it can serve `request`; "auto": the fastest that can (see BACKENDS).
    A refusal is a ValueError naming every reason of every backend considered."""
    if name == "auto":
        key, known = choices.remembered(request, BACKENDS)
        if known is not None:
            return BACKENDS[known]
        reasons = _reasons(request, auto_order(), auto=True)
        able = [candidate for candidate in auto_order() if not reasons[candidate]]
        if not able:
            raise ValueError(
                "no backend can serve this request: "
                + "; ".join(f"{candidate}: {', '.join(why)}" for candidate, why in reasons.items())
            )
        picked = _pick(request, able)[0]
        choices.remember(key, picked)
        return BACKENDS[picked]
    backend = BACKENDS[name]
    why = backend.not_supported_reasons(request)
    if why:
        raise ValueError(f"backend {name!r} cannot serve this request: {'; '.join(why)}")
    return backend


def explain(request_or_kwargs: Request | Mapping, backend: str = "auto") -> dict:
    """Why `backend` ("auto": which one, and why) serves this request, as plain data.

    request_or_kwargs  a `Request`, or the keyword arguments of `selfattn.attention` (q, k, v,
                       causal, mask, …), or a shape without tensors: B, Hq, Hkv, Lq, Lk, D, Dv,
                       dtype, device, requires_grad and the masking arguments (causal, window, …)

    Returns {"request": {...}, "backends": {name: {"supported", "seconds", "reasons"}},
    "choice": name or None, "why": str, "plan": the tiled block plan or None, "block_map": a mask_mod's block map
    drawn, or None}.
    """
    request = _as_request(request_or_kwargs)
    check_backend(backend)
    names = auto_order()
    reasons = _reasons(request, names, auto=backend == "auto")
    able = [name for name in names if not reasons[name]]
    rows = {
        name: {
            "supported": not reasons[name],
            "seconds": None if reasons[name] else cost.estimate_seconds(BACKENDS[name], request),
            "reasons": reasons[name],
            "path": BACKENDS[name].compute_path(request),
        }
        for name in names
    }
    if backend != "auto":
        choice = None if reasons[backend] else backend
        why = f"asked for by name; {'it can serve it' if choice else 'it cannot serve it'}"
    elif able:
        choice, why = _pick(request, able)
    else:
        choice, why = None, "no backend can serve this request (see each one's reasons)"
    return {
        "request": _describe(request),
        "backends": rows,
        "choice": choice,
        "why": why,
        "plan": _plan(request, cast(TiledBackend, BACKENDS["tiled"])),
        "block_map": _block_map(request),
    }


def _block_map(r: Request) -> str | None:
    """A mask_mod's block map as `masks.BlockMask.draw` draws it (batch item 0, head 0), or None (no mask_mod, or
    more than MAX_DRAWN_BLOCKS blocks a side)."""
    bm = r.rule.block_mask
    if bm is None or max(bm.kinds.shape[2:]) > MAX_DRAWN_BLOCKS:
        return None
    return bm.draw()


def render(explanation: Mapping) -> str:
    """The text of an `explain` dict: the request, one line per backend, the choice, the block plan."""
    r = explanation["request"]
    shape = " ".join(f"{key}={r[key]}" for key in ("B", "Hq", "Hkv", "Lq", "Lk", "D", "Dv"))
    options = [
        f"{key}={r[key]}"
        for key in ("causal", "window", "scale", "softcap", "dropout_p")
        if r[key] not in (None, False, 0.0) or key in ("causal", "scale")
    ]
    if r["mask"] is not None:
        options.append(f"mask={r['mask']['kind']} {tuple(r['mask']['shape'])}")
    options += [
        f"{key}={r[key] if isinstance(r[key], str) else tuple(r[key])}"
        for key in FEATURES
        if key != "segments" and r.get(key) is not None
    ]
    if r.get("segments") is not None:
        options.append("segments=" + "+".join(map(str, r["segments"])) + " per batch item")
    options += [key for key in ("return_weights", "return_lse", "requires_grad") if r[key]]
    lines = [f"request  {shape}  {r['dtype']} on {r['device']}", f"         {', '.join(options)}", ""]
    width = max(len(name) for name in explanation["backends"])
    for name, row in explanation["backends"].items():
        if row["supported"]:
            seconds = "no estimate" if row["seconds"] is None else f"estimate {_seconds(row['seconds'])}"
            path = f"; {row['path']}" if row.get("path") else ""
            lines.append(f"{name:<{width}}  can serve it, {seconds}{path}")
        else:
            lines.append(f"{name:<{width}}  cannot: " + ("\n" + " " * (width + 10)).join(row["reasons"]))
    lines += ["", f"choice   {explanation['choice'] or 'none'}: {explanation['why']}"]
    plan = explanation.get("plan")
    if plan is not None:
        lines += [
            "",
            f"tiled block plan: {plan['query_blocks']} × {plan['key_blocks']} blocks of "
            f"{plan['block_q']} × {plan['block_k']} (query × key); {plan['tiles']} tiles visited, "
            f"{plan['pairs']} pairs",
            "  F full, P partial (masked), . hidden (skipped)"
            + (
                "; segments drawn for batch item 0: native skips the hidden blocks, tiled masks them"
                if r.get("segments") is not None
                else ""
            ),
        ]
        lines += (
            ["  " + line for line in plan["drawing"].splitlines()]
            if plan["drawing"]
            else [f"  (not drawn: more than {MAX_DRAWN_BLOCKS} blocks a side)"]
        )
    block_map = explanation.get("block_map")
    if block_map is not None:
        lines += ["", "mask_mod block map (128 × 128, batch item 0, head 0): native never reads a '.' block, masks a P"]
        lines += ["  " + line for line in block_map.splitlines()]
    return "\n".join(lines)


def _seconds(x: float) -> str:
    return f"{x * 1e3:.3g} ms" if x < 1 else f"{x:.3g} s"


def _plan(r: Request, tiled: TiledBackend) -> dict:
    n_q, n_k = -(-r.Lq // tiled.block_q), -(-r.Lk // tiled.block_k)
    tiles, pairs = Plan.of(r, tiled.block_q, tiled.block_k).work()
    drawing = None
    if max(n_q, n_k) <= MAX_DRAWN_BLOCKS:
        if r.rule.segments is None:
            drawing = masks.draw_blocks(r.Lq, r.Lk, tiled.block_q, tiled.block_k, causal=r.causal, window=r.window)
        else:
            drawing = _segments_drawing(r, tiled.block_q, tiled.block_k)
    return {
        "block_q": tiled.block_q,
        "block_k": tiled.block_k,
        "query_blocks": n_q,
        "key_blocks": n_k,
        "tiles": tiles,
        "pairs": pairs,
        "drawing": drawing,
    }


def _segments_drawing(r: Request, block_q: int, block_k: int) -> str:
    """The blocks of batch item 0 the rule leaves visible when segments join the causal / window rule: each
    row sees the keys of its segment's span within its position bounds. Where a segment is not one
    contiguous run the span holds other segments' keys too, so no block is drawn full (F becomes P)."""
    span, contiguous = r.rule.segment_spans
    p = torch.arange(r.Lq) + (r.Lk - r.Lq)
    left, right = r.rule.bounds or (None, None)
    lo, hi = span[0, 0].cpu(), span[1, 0].cpu()
    if left is not None:
        lo = torch.maximum(lo, p - left)
    if right is not None:
        hi = torch.minimum(hi, p + right + 1)
    drawing = masks.draw_row_intervals(lo, hi, r.Lk, block_q, block_k)
    return drawing if contiguous else drawing.replace("F", "P")


def _describe(r: Request) -> dict:
    mask = None if r.mask is None else {"kind": r.mask_kind, "shape": list(r.mask.shape)}
    return {
        "B": r.B,
        "Hq": r.Hq,
        "Hkv": r.Hkv,
        "Lq": r.Lq,
        "Lk": r.Lk,
        "D": r.D,
        "Dv": r.Dv,
        "dtype": str(r.q.dtype).removeprefix("torch."),
        "device": str(r.q.device),
        "causal": r.causal,
        "window": r.window,
        "scale": r.scale,
        "softcap": r.softcap,
        "dropout_p": r.dropout_p,
        "mask": mask,
        **{name: _feature(name, getattr(r.rule, name)) for name in FEATURES},
        "return_weights": r.return_weights,
        "return_lse": r.return_lse,
        "requires_grad": r.needs_grad,
    }


def _feature(name: str, t):
    """A score feature as `explain` shows it: None, its shape (per-head tensors, a block mask), the segments' sizes,
    or a function's name (a score_mod)."""
    if t is None:
        return None
    if not hasattr(t, "shape"):
        return getattr(t, "__qualname__", type(t).__name__)
    return _segment_counts(t) if name == "segments" else list(t.shape)


def _segment_counts(segments: torch.Tensor) -> list[int]:
    """How many segments each batch item packs (distinct ids per row)."""
    return [int(row.unique().numel()) for row in segments.cpu()]


SHAPE_KEYS = ("B", "Hq", "Hkv", "Lq", "Lk", "D", "Dv")


def _as_request(x) -> Request:
    if isinstance(x, Request):
        return x
    if not isinstance(x, Mapping):
        raise TypeError(f"explain needs a Request or a mapping of attention arguments, got {type(x).__name__}")
    kwargs = dict(x)
    if "q" not in kwargs:
        kwargs = _shaped(kwargs)
    return build_request(**kwargs)


def _shaped(kwargs: dict) -> dict:
    """B, Hq, Hkv, Lq, Lk, D, Dv, dtype, device, requires_grad → q, k, v that take no memory
    (one element, expanded), plus the other arguments unchanged."""
    size = {key: checks.integer(key, kwargs.pop(key), low=0) for key in SHAPE_KEYS if key in kwargs}
    missing = [key for key in ("Lq", "D") if key not in size]
    if missing:
        raise ValueError(f"explain needs q, k, v or a shape with at least Lq and D; missing {', '.join(missing)}")
    B, Hq, Lq, D = size.get("B", 1), size.get("Hq", 1), size["Lq"], size["D"]
    Hkv, Lk, Dv = size.get("Hkv", Hq), size.get("Lk", Lq), size.get("Dv", D)
    dtype = kwargs.pop("dtype", torch.float32)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__} {dtype!r}")
    device = kwargs.pop("device", "cpu")
    grad = checks.boolean("requires_grad", kwargs.pop("requires_grad", False))
    one = torch.zeros((), dtype=dtype, device=device, requires_grad=grad)
    kwargs.update(q=one.expand(B, Hq, Lq, D), k=one.expand(B, Hkv, Lk, D), v=one.expand(B, Hkv, Lk, Dv))
    return kwargs
