"""Backend "flex": PyTorch's FlexAttention, compiled with torch.compile.

The request becomes a `mask_mod` (bottom-right causal and window rule, a user bool mask) turned
into a block mask by `create_block_mask`, so hidden blocks are skipped, and a `score_mod`
(softcap c·tanh(s/c), an additive user mask). GQA runs with `enable_gqa=True` (no copies).

Compiling costs seconds (about 13 s per signature on a 2-core CPU) and is paid once per
signature — device, dtype, shapes, rule, softcap, mask layout, scale — then cached by
torch.compile; each first compile is reported on stderr in one line with its time, and
`compile_seconds` keeps them. Nothing compiles at import or in `not_supported_reasons`;
`is_warm(request)` says whether a request's signature is compiled already, which is what "auto"
should ask on a CPU before picking flex (a 13 s compile is never the fastest way to one call).

On the CPU (torch 2.13) the compiled kernel is forward-only and has no log-sum-exp, so requests
that need gradients or lse are refused with that reason; so are problems under one block
(MIN_CPU_LENGTH positions), where the compile can never pay for itself. On CUDA flex serves
windows, softcap, lse and backward.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import threading
import time

import torch

from .base import Backend, Capabilities, Request, Result

__all__ = ["FlexBackend", "is_warm", "compile_seconds", "signature", "MIN_CPU_LENGTH"]

MIN_CPU_LENGTH = 128
"""Fewest query and key positions flex accepts on a CPU: one of its blocks (create_block_mask's
default BLOCK_SIZE). Below it the ~13 s compile per shape never pays for itself."""

_LOCK = threading.Lock()
_COMPILED: dict[tuple, object] = {}
compile_seconds: dict[tuple, float] = {}
"""Seconds each signature's first (compiling) call took, by `signature(request)`."""


def _flex_api():
    """(flex_attention, create_block_mask), or the reason they cannot be had."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as error:
        return None, f"torch {torch.__version__} has no FlexAttention ({error})"
    return (flex_attention, create_block_mask), None


def _mask_kind(r: Request):
    if r.mask is None:
        return None
    return ("bool" if r.mask.dtype == torch.bool else "additive", tuple(r.mask.shape), r.mask.dtype)


def signature(r: Request) -> tuple:
    """What torch.compile specialises on: a new signature means a new compile."""
    return (
        r.q.device.type,
        r.q.dtype,
        tuple(r.q.shape),
        tuple(r.k.shape),
        tuple(r.v.shape),
        r.causal,
        r.window,
        r.softcap,
        r.scale,
        _mask_kind(r),
    )


@functools.lru_cache(maxsize=4)
def _has_compiler(path: str) -> bool:
    """Whether a C++ compiler is on this PATH (torch.compile needs one on the CPU); asked once per PATH."""
    return shutil.which("c++", path=path) is not None or shutil.which("g++", path=path) is not None


def is_warm(r: Request) -> bool:
    """True when this request's signature is compiled already (a call costs no compile)."""
    return signature(r) in _COMPILED


class FlexBackend(Backend):
    """FlexAttention, compiled; `BACKENDS["flex"]` is `FlexBackend()`."""

    name = "flex"
    capabilities = Capabilities(
        returns_weights=False,
        returns_lse=True,
        softcap=True,
        dropout=False,
        mask_grad=False,
        notes={
            "weights": "use backend='naive'",
            "dropout": "use backend='sdpa' or 'naive', or dropout_p=0",
            "mask_grad": "use backend='naive'",
        },
    )

    def not_supported_reasons(self, r: Request) -> list[str]:
        """Every reason flex cannot serve `r` (empty: it can). Never compiles."""
        _, missing = _flex_api()
        if missing is not None:
            return [missing]
        reasons = super().not_supported_reasons(r)
        if r.q.device.type == "cpu":
            if r.return_lse:
                reasons.append(
                    f"FlexAttention's compiled CPU kernel does not return the log-sum-exp (torch "
                    f"{torch.__version__}); use backend='native' or 'tiled'"
                )
            if r.needs_grad:
                reasons.append(
                    f"FlexAttention has no backward on the CPU (torch {torch.__version__}); use "
                    f"backend='native' or 'tiled'"
                )
            if min(r.Lq, r.Lk) < MIN_CPU_LENGTH:
                reasons.append(
                    f"on the CPU flex needs Lq and Lk >= {MIN_CPU_LENGTH} (one block), got Lq={r.Lq}, "
                    f"Lk={r.Lk}: its compile (~13 s per shape) never pays off below that"
                )
            if not _has_compiler(os.environ.get("PATH", "")):
                reasons.append("torch.compile needs a C++ compiler on the CPU and none is on PATH")
        return reasons

    def auto_reasons(self, r: Request) -> list[str]:
        """ "auto" never waits on a compile: on the CPU it takes flex only for a signature already compiled."""
        if r.q.device.type != "cpu" or is_warm(r):
            return []
        return ["not compiled for this shape yet, and auto never waits on a compile (~13 s on the CPU)"]

    def forward(self, r: Request) -> Result:
        (flex_attention, create_block_mask), _ = _flex_api()
        mask_mod = _mask_mod(r)
        block_mask = None
        if mask_mod is not None:
            bm, hm = _mask_batch_heads(r)
            block_mask = create_block_mask(mask_mod, bm, hm, r.Lq, r.Lk, device=r.q.device)
        key = signature(r)
        with _LOCK:
            compiled = _COMPILED.get(key)
            first = compiled is None
            if first:
                compiled = _COMPILED[key] = torch.compile(flex_attention, dynamic=False)
        start = time.perf_counter()
        if first:
            sys.stderr.write(f"selfattn: compiling FlexAttention for {_describe(r)} ... ")
            sys.stderr.flush()
        try:
            out = compiled(
                r.q,
                r.k,
                r.v,
                score_mod=_score_mod(r),
                block_mask=block_mask,
                scale=r.scale,
                enable_gqa=r.G > 1,
                return_lse=r.return_lse,
            )
        except Exception:
            if first:
                sys.stderr.write("failed\n")
                with _LOCK:
                    _COMPILED.pop(key, None)
            raise
        if first:
            compile_seconds[key] = time.perf_counter() - start
            sys.stderr.write(f"done in {compile_seconds[key]:.1f} s (cached for this signature)\n")
            sys.stderr.flush()
        if r.return_lse:
            out, lse = out
            return Result(out, None, lse.to(r.accumulate_dtype))
        return Result(out, None, None)


def _describe(r: Request) -> str:
    rule = "causal" if r.causal else "full"
    if r.window is not None:
        rule += f", window {r.window}"
    return f"q {tuple(r.q.shape)} {str(r.q.dtype).replace('torch.', '')}, {rule}"


def _mask_batch_heads(r: Request) -> tuple[int | None, int | None]:
    """create_block_mask's B and H: None where the block mask is the same for every batch/head."""
    if r.mask is None or r.mask.dtype != torch.bool:
        return None, None
    shape = r.mask.shape
    return (r.B if shape[0] > 1 else None), (r.Hq if shape[1] > 1 else None)


def _mask_mod(r: Request):
    """The causal/window rule (bottom-right) and a user bool mask as one mask_mod, or None."""
    shift, window, causal = r.Lk - r.Lq, r.window, r.causal
    user = None
    if r.mask is not None and r.mask.dtype == torch.bool:
        user = r.mask.expand(r.mask.shape[0], r.mask.shape[1], r.Lq, r.Lk)
    if not causal and window is None and user is None:
        return None

    def mask_mod(b, h, q_idx, kv_idx):
        p = q_idx + shift
        visible = kv_idx <= p if (causal or window is not None) else kv_idx >= 0
        if window is not None:
            visible = visible & (kv_idx > p - window)
        if user is not None:
            bb = b if user.shape[0] > 1 else 0
            hh = h if user.shape[1] > 1 else 0
            visible = visible & user[bb, hh, q_idx, kv_idx]
        return visible

    return mask_mod


def _score_mod(r: Request):
    """softcap c·tanh(s/c) and an additive user mask as one score_mod, or None."""
    cap = r.softcap
    add = None
    if r.mask is not None and r.mask.dtype != torch.bool:
        add = r.mask.detach().to(r.q.dtype)
        add = add.expand(add.shape[0], add.shape[1], r.Lq, r.Lk)
    if cap is None and add is None:
        return None

    def score_mod(score, b, h, q_idx, kv_idx):
        if cap is not None:
            score = cap * torch.tanh(score / cap)
        if add is not None:
            bb = b if add.shape[0] > 1 else 0
            hh = h if add.shape[1] > 1 else 0
            a = add[bb, hh, q_idx, kv_idx]
            score = torch.where(a == float("-inf"), a, score + a)  # −inf hides the key, NaN-proof
        return score

    return score_mod
