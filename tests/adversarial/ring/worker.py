"""What each rank of a ring group runs (see ring_cases.py): the cases of its world size from `first` on.

Returns one (outcome, detail) per case, in order, and stops after the first case that crashed
(anything but a clear ValueError/TypeError where one is expected): the group may be broken then.
"""

from __future__ import annotations

import numpy as np
import torch

from selfattn.distributed import RankFailure, padded_length, ring_attention, shard, unshard
from tests.distributed.spec_grads import spec_with_grads
from tests.helpers import make_inputs

from .cases import BROKE, RING_TOL, TENSOR, cases

DTYPES = {"float64": torch.float64, "float32": torch.float32}


def _padded(a: np.ndarray, Lp: int, fill: float) -> np.ndarray:
    pad = [(0, 0)] * a.ndim
    pad[2] = (0, Lp - a.shape[2])
    return np.pad(a, pad, constant_values=fill)


def _attention(rank: int, world: int, c: dict, seed: int) -> tuple[str, str]:
    """A valid call: this rank's rows of the output, lse and gradients against the float64 spec."""
    B, Hq, Hkv, D, Dv = c.get("B", 1), c.get("Hq", 2), c.get("Hkv", 1), c.get("D", 4), c.get("Dv", 3)
    dtype, L, layout = DTYPES[c.get("dtype", "float64")], c["L"], c["layout"]
    opts = dict(causal=c["causal"], window=c["window"], softcap=c.get("softcap"))
    q, k, v = make_inputs(B, Hq, Hkv, L, L, D, Dv, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    do = torch.randn(B, Hq, L, Dv, generator=g, dtype=torch.float64)
    dl = torch.randn(B, Hq, L, generator=g, dtype=torch.float64)
    sinks = torch.randn(Hq, generator=g, dtype=torch.float64) * 2 if c.get("sinks") else None
    alibi = torch.rand(Hq, generator=g, dtype=torch.float64) if c.get("alibi") else None
    spec_window = min(c["window"], L) if isinstance(c["window"], int) else c["window"]
    want = spec_with_grads(
        q, k, v, do, dl, causal=c["causal"], window=spec_window, softcap=c.get("softcap"), sinks=sinks, alibi=alibi
    )
    want_dsinks = want[5] if sinks is not None else None
    Lp = padded_length(L, world, layout)
    want = [_padded(a, Lp, f) for a, f in zip(want[:5], (0.0, -np.inf, 0.0, 0.0, 0.0), strict=True)]
    sq, sk, sv = (shard(t.to(dtype), layout=layout) for t in (q, k, v))
    leaves = [t.tensor.requires_grad_() for t in (sq, sk, sv)]
    s = None if sinks is None else sinks.to(dtype).requires_grad_()
    try:
        res = ring_attention(
            sq, sk, sv, return_lse=True, backend=c.get("backend", "auto"), sinks=s, alibi=alibi, **opts
        )
        lse = res.lse.tensor
        sdo = shard(do.to(dtype), layout=layout).tensor
        sdl = shard(dl.to(lse.dtype), layout=layout).tensor
        ((res.output.tensor * sdo).sum() + (torch.where(torch.isfinite(lse), lse, 0) * sdl).sum()).backward()
        if s is not None:
            torch.distributed.all_reduce(s.grad)
    except ValueError as e:  # a clear refusal of a valid call: wrong, and this rank may have left the ring
        return "wrong", f"{BROKE}valid call refused: {e}"[:300]
    except Exception as e:  # noqa: BLE001 - counted (a TypeError from inside is a crash too)
        return "traceback", f"{type(e).__name__}: {str(e)[:250]}"
    rows = sq.positions.numpy()
    got_lse = lse.detach().double().numpy()
    if not (np.isneginf(got_lse) == np.isneginf(want[1][:, :, rows])).all():
        return "wrong", "lse is not -inf exactly on the rows that see nothing"
    finite = np.isfinite(want[1][:, :, rows])
    pairs = [
        ("output", res.output.tensor.detach(), want[0][:, :, rows]),
        ("lse", got_lse[finite], want[1][:, :, rows][finite]),
        *((n, t.grad, w[:, :, rows]) for n, t, w in zip(("dq", "dk", "dv"), leaves, want[2:], strict=True)),
    ]
    if s is not None:
        pairs.append(("dsinks", s.grad, want_dsinks))
    for name, got, ref in pairs:
        got = got.detach().double().numpy() if isinstance(got, torch.Tensor) else got
        if not np.isfinite(got).all():
            return "wrong", f"non-finite {name}"
        tol = RING_TOL[c.get("dtype", "float64")] * max(1.0, float(np.max(np.abs(ref), initial=0.0)))
        err = float(np.max(np.abs(got - ref), initial=0.0))
        if not err <= tol:
            return "wrong", f"{name} off the float64 spec by {err:.3g} (tolerance {tol:.3g})"
    return "ok", ""


def _built(args: dict) -> dict:
    """The call's arguments with each (TENSOR, values, dtype[, requires_grad]) made a tensor."""
    out = {}
    for name, value in args.items():
        if isinstance(value, tuple) and value and value[0] == TENSOR:
            t = torch.tensor(value[1], dtype=getattr(torch, value[2]))
            out[name] = t.requires_grad_() if len(value) > 3 and value[3] else t
        else:
            out[name] = value
    return out


def _disagree(rank: int, on: str) -> dict:
    """Arguments that differ between ranks, each valid on its own."""
    if on == "window":
        return {"window": 2 + rank}
    return {on: torch.tensor([0.5, 0.1 * (rank + 1)], dtype=torch.float64)}


def _refused(fn) -> tuple[str, str]:
    """A call that must be refused with a ValueError/TypeError on every rank, the group intact."""
    try:
        fn()
    except (ValueError, TypeError) as e:
        return ("error", "") if str(e).strip() else ("wrong", f"{type(e).__name__} with no message")
    except Exception as e:  # noqa: BLE001 - counted
        return "traceback", f"{type(e).__name__}: {str(e)[:250]}"
    return "wrong", "accepted, should be refused"


def _model(world: int, L: int) -> tuple[str, str]:
    """A DecoderLM on Sharded ids equals one process's logits, whatever share of the rows is padding."""
    from selfattn.model.decoder import DecoderConfig, DecoderLM

    torch.manual_seed(4)
    model = DecoderLM(DecoderConfig(vocab_size=23, d_model=8, n_layers=2, n_heads=2, max_len=64)).double().eval()
    ids = torch.randint(0, 23, (2, L), generator=torch.Generator().manual_seed(L))
    try:
        with torch.no_grad():
            want = model(ids)
            got = {layout: unshard(model(shard(ids, layout=layout, dim=1))) for layout in ("zigzag", "contiguous")}
    except Exception as e:  # noqa: BLE001 - counted
        return "traceback", f"{type(e).__name__}: {str(e)[:250]}"
    for layout, logits in got.items():
        err = float((logits - want).abs().max())
        if not err <= RING_TOL["float64"]:
            return "wrong", f"{layout}: logits differ from one process's by {err:.3g}"
    return "ok", ""


def work(rank: int, world: int, first: int) -> list[tuple[str, str]]:
    out = []
    x = torch.randn(1, 2, 2 * world, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for i, c in enumerate(cases(world)[first:], start=first):
        kind = c["kind"]
        try:
            if kind == "attention":
                result = _attention(rank, world, c, seed=1000 + i)
            elif kind == "bad":
                args = {"causal": True, **_built(c["args"])}
                result = _refused(lambda args=args: ring_attention(x[:, :, :2], x[:, :, :2], x[:, :, :2], **args))
            elif kind == "disagree":
                args = _disagree(rank, c["on"])
                result = _refused(lambda args=args: ring_attention(x[:, :, :2], x[:, :, :2], x[:, :, :2], **args))
            else:
                result = _model(world, c["L"])
        except RankFailure as e:
            result = ("traceback", f"RankFailure: {str(e)[:250]}")
        out.append(result)
        if result[0] == "traceback" or result[1].startswith(BROKE):
            break
    return out
