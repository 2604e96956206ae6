"""Backend "flex": PyTorch's FlexAttention, compiled with torch.compile.

The request's score rule becomes a `mask_mod` (bottom-right causal and window rule, a user bool
mask) turned into a block mask by `create_block_mask` (remembered per shape and rule where positions alone
decide it, as a FlexAttention user builds it once), so hidden blocks are skipped, and a
`score_mod` (softcap c·tanh(s/c), an additive user mask), both derived from the rule's fields in
one function (`mods`). GQA runs with `enable_gqa=True` (no copies).

Compiling costs seconds (about 13 s per signature on a 2-core CPU) and is paid once per
signature — everything torch.compile specialises on: device, dtypes, shapes and strides of q, k, v
and the mask, the rule's fields, lse and grad — then remembered in a bounded LRU (`WARM_SIGNATURES`
of them; torch itself keeps at most `torch._dynamo.config.recompile_limit` specialisations of one
function). Each first compile is announced as a start and a done `selfattn.kernels.Notice`
with its time (`compile_seconds` keeps them). Nothing compiles at import or in
`not_supported_reasons`; `is_warm(request)` says whether a request's signature is compiled already,
which is what "auto" asks on a CPU before picking flex: a transposed q is another signature, so auto
never waits on its compile.

On the CPU (torch 2.13) the compiled kernel is forward-only and has no log-sum-exp, so requests
that need gradients or lse are refused with that reason; so are problems under one block
(MIN_CPU_LENGTH positions), where the compile can never pay for itself, and calls under a torch.func transform
(vmap, grad: FlexAttention's eager call compiles, which fails on the transform's tensors). Inside a graph being
compiled (torch.compile, torch.export) flex_attention is traced into that graph, without our compiled wrapper or
bookkeeping. On CUDA flex serves windows, softcap, lse and backward.
"""

from __future__ import annotations

import collections
import functools
import os
import shutil
import threading
import time
from collections.abc import Hashable

import torch

from ..masks import held_tensors
from ..scores import additive_in, constant_when_compiled
from .base import EVERY_FEATURE, Backend, Cost, Request, Result, Work, streaming
from .cost import request_pairs
from .notice import Notice, emit

__all__ = ["FlexBackend", "is_warm", "compile_seconds", "signature", "mods", "MIN_CPU_LENGTH", "WARM_SIGNATURES"]

MIN_CPU_LENGTH = 128
"""Fewest query and key positions flex accepts on a CPU: one of its blocks (create_block_mask's
default BLOCK_SIZE). Below it the ~13 s compile per shape never pays for itself."""

WARM_SIGNATURES = 8
"""Compiled signatures remembered (least recently used forgotten first): torch's own default limit of
specialisations per function (`torch._dynamo.config.recompile_limit`), so a server that sees one text
length after another keeps a bounded set, and "auto" takes flex only for one of these."""

RATE_GFLOPS = 60.0
"""Causal forward, compiled, L = 4096, 1 thread (`kernels.cost`)."""

RATE_WINDOW_GFLOPS = 9.0
"""Window w = 256, L = 8192, per visible pair (its CPU kernel visits more)."""


class _Compiles:
    """flex_attention compiled for this process and what it has compiled: one per process (`_COMPILES`), every
    change under its lock (calls come from any thread).

    function      torch.compile(flex_attention), made on the first call (or given: the tests' eager kernel)
    seconds       seconds each remembered signature's first (compiling) call took, by `signature(request)`, least
                  recently used first; at most WARM_SIGNATURES entries (`compile_seconds` is this dict)
    pending       the signatures being compiled now (not in `seconds` yet)
    count         signatures compiled so far: a change of `seconds`' keys, for `FlexBackend.state`
    block_masks   block masks of rules that positions alone decide (causal, windows), by `_block_mask_key`, least
                  recently used first; at most WARM_SIGNATURES. Building one evaluates the mask on every (query,
                  key) pair (4 s at L = 8192 on a 2-core CPU): a user of FlexAttention builds it once per shape,
                  and so do we."""

    def __init__(self, function=None) -> None:
        self.lock = threading.Lock()
        self.function = function
        self.seconds: collections.OrderedDict[tuple, float] = collections.OrderedDict()
        self.pending: set[tuple] = set()
        self.count = 0
        self.block_masks: collections.OrderedDict[tuple, object] = collections.OrderedDict()

    def is_warm(self, key: tuple) -> bool:
        """Whether the signature `key` is compiled already."""
        with self.lock:
            return key in self.seconds

    def begin(self, key: tuple, flex_attention):
        """(the compiled function, whether this call compiles `key`: it is neither warm nor being compiled, and is
        marked as being compiled now); a warm `key` becomes the most recently used."""
        with self.lock:
            if self.function is None:
                self.function = torch.compile(flex_attention, dynamic=False)
            first = key not in self.seconds and key not in self.pending
            if first:
                self.pending.add(key)
            elif key in self.seconds:
                self.seconds.move_to_end(key)
            return self.function, first

    def failed(self, key: tuple) -> None:
        """The compiling call of `key` failed: it is no longer being compiled."""
        with self.lock:
            self.pending.discard(key)

    def done(self, key: tuple, seconds: float) -> None:
        """The compiling call of `key` took `seconds`: remembered, the least recently used forgotten past
        WARM_SIGNATURES."""
        with self.lock:
            self.pending.discard(key)
            self.seconds[key] = seconds
            self.count += 1
            while len(self.seconds) > WARM_SIGNATURES:
                self.seconds.popitem(last=False)

    def block_mask(self, key: tuple):
        """The block mask remembered for `key` (now the most recently used), or None."""
        with self.lock:
            found = self.block_masks.get(key)
            if found is not None:
                self.block_masks.move_to_end(key)
            return found

    def keep_block_mask(self, key: tuple, made) -> None:
        """Remember `made` for `key`, the least recently used forgotten past WARM_SIGNATURES."""
        with self.lock:
            self.block_masks[key] = made
            while len(self.block_masks) > WARM_SIGNATURES:
                self.block_masks.popitem(last=False)


_COMPILES = _Compiles()

compile_seconds = _COMPILES.seconds
"""Seconds each remembered signature's first (compiling) call took, by `signature(request)`, least recently
used first; at most WARM_SIGNATURES entries. A signature being compiled is not in it yet."""


def _work(r: Request) -> Work:
    pairs = request_pairs(r) // r.B
    return pairs, RATE_WINDOW_GFLOPS if r.window is not None else RATE_GFLOPS, 0.0


def _flex_api():
    """(flex_attention, create_block_mask), or the reason they cannot be had."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as error:
        return None, f"torch {torch.__version__} has no FlexAttention ({error})"
    return (flex_attention, create_block_mask), None


def _layout(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), tuple(t.stride()), t.dtype)


def signature(r: Request) -> tuple:
    """Everything torch.compile specialises on for this request: a new signature means a new compile."""
    rule = r.rule
    mask = None if rule.mask is None else (rule.mask_kind, *_layout(rule.mask))
    return (
        str(r.q.device),
        _layout(r.q),
        _layout(r.k),
        _layout(r.v),
        rule.causal,
        rule.window,
        rule.softcap,
        rule.scale,
        mask,
        rule.alibi is not None,
        None if rule.segments is None else tuple(rule.segments.shape),
        rule.mask_mod,
        rule.score_mod,
        r.return_lse,
        r.needs_grad,
    )


@functools.lru_cache(maxsize=4)
def _has_compiler(path: str) -> bool:
    """Whether a C++ compiler is on this PATH (torch.compile needs one on the CPU); asked once per PATH."""
    return shutil.which("c++", path=path) is not None or shutil.which("g++", path=path) is not None


@constant_when_compiled
def _compiler_on_path() -> bool:
    """`_has_compiler` for this PATH; read once when compiled (a file lookup cannot be traced)."""
    return _has_compiler(os.environ.get("PATH", ""))


def is_warm(r: Request) -> bool:
    """True when this request's signature is compiled already (a call costs no compile)."""
    return _COMPILES.is_warm(signature(r))


class FlexBackend(Backend):
    """FlexAttention, compiled; `BACKENDS["flex"]` is `FlexBackend()`."""

    name = "flex"
    capabilities = streaming(
        features=EVERY_FEATURE - {"sinks"},
        notes={
            "sinks": "FlexAttention's softmax has no sink term; use backend='native', 'tiled' or 'naive'",
            "weights": "use backend='naive'",
        },
    )
    cost = Cost(work=_work, read_gbps=14.0, call_seconds=1.06e-3, backward_factor=3.7, busy_factor=1.0)
    """One parallel region per call (its compiled kernel). No backward on the CPU; off the CPU the model is
    not used."""

    def not_supported_reasons(self, r: Request) -> list[str]:
        """Every reason flex cannot serve `r` (empty: it can). Never compiles."""
        _, missing = _flex_api()
        if missing is not None:
            return [missing]
        reasons = super().not_supported_reasons(r)
        if r.q.device.type == "cpu":
            if r.q.dtype == torch.float64:
                reasons.append(
                    f"FlexAttention's compiled CPU kernel does not lower float64 (torch {torch.__version__}: "
                    f"an Inductor LoweringException); use backend='native', 'tiled' or 'naive'"
                )
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
            if not _compiler_on_path():
                reasons.append("torch.compile needs a C++ compiler on the CPU and none is on PATH")
            if torch._C._are_functorch_transforms_active():
                reasons.append(
                    f"FlexAttention cannot run under a torch.func transform (vmap, grad) on the CPU (torch "
                    f"{torch.__version__}: its eager call compiles, and Dynamo fails on the transform's tensors); use "
                    f"backend='native' or 'tiled'"
                )
        return reasons

    def auto_reasons(self, r: Request) -> list[str]:
        """ "auto" never waits on a compile: on the CPU it takes flex only for a signature already compiled
        (shapes, strides, dtypes, rule: `signature`)."""
        if torch.compiler.is_compiling():  # its compile cache is not traceable (a lock); nor is a compile in one
            return ["auto does not take flex inside a graph being compiled; ask for backend='flex' by name"]
        if r.q.device.type != "cpu" or is_warm(r):
            return []
        return [
            "not compiled for this signature yet (shapes, strides, dtypes, rule), and auto never waits on a "
            "compile (~13 s on the CPU)"
        ]

    def form_decides(self, r: Request) -> bool:
        """True: its reasons read no tensor values (`Backend.form_decides`)."""
        return True

    def state(self) -> Hashable:
        """The signatures compiled (`auto_reasons` takes flex only for one of them)."""
        return _COMPILES.count

    def forward(self, r: Request) -> Result:
        (flex_attention, create_block_mask), _ = _flex_api()
        score_mod, mask_mod, (bm, hm) = mods(r)
        block_mask = None
        if mask_mod is not None:
            block_mask = _block_mask(r, create_block_mask, mask_mod, bm, hm)
        arguments = dict(score_mod=score_mod, block_mask=block_mask, scale=r.scale, enable_gqa=r.G > 1)
        if torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
            # inside a graph being compiled, flex_attention is traced into it (our compiled wrapper and the
            # bookkeeping's lock cannot be); under vmap or grad it runs as the transform's operator
            return _result(r, flex_attention(r.q, r.k, r.v, return_lse=r.return_lse, **arguments))
        key = signature(r)
        compiled, first = _COMPILES.begin(key, flex_attention)
        what = f"compiling FlexAttention for {_describe(r)}"
        if first:
            emit(Notice("flex", what, "start"))
        start = time.perf_counter()
        try:
            out = compiled(r.q, r.k, r.v, return_lse=r.return_lse, **arguments)
        except Exception:
            if first:
                _COMPILES.failed(key)
                emit(Notice("flex", what, "failed", time.perf_counter() - start))
            raise
        if first:
            seconds = time.perf_counter() - start
            _COMPILES.done(key, seconds)
            emit(Notice("flex", what, "done", seconds, "cached for this signature"))
        return _result(r, out)


def _result(r: Request, out) -> Result:
    """flex_attention's answer (out, or (out, lse) where `r` asks the lse) as a Result."""
    if r.return_lse:
        out, lse = out
        return Result(out, None, lse.to(r.accumulate_dtype))
    return Result(out, None, None)


def _block_mask_key(r: Request) -> tuple | None:
    """What a block mask depends on when positions (and a mask_mod, with the tensors it holds) alone decide it (no
    user mask, no segments); None otherwise (a tensor's values decide it: built per call)."""
    rule = r.rule
    if rule.mask is not None or rule.segments is not None:
        return None
    mod = None if rule.mask_mod is None else (rule.mask_mod, held_tensors(rule.mask_mod), r.B, r.Hq)
    return (str(r.q.device), r.Lq, r.Lk, rule.bounds, mod)


def _block_mask(r: Request, create_block_mask, mask_mod, batch, heads):
    """The block mask of `mask_mod` for `r`: remembered (`_Compiles.block_masks`) where positions alone decide it."""
    key = _block_mask_key(r)
    if key is None or torch.compiler.is_compiling():  # a lock and a dict cannot be traced
        return create_block_mask(mask_mod, batch, heads, r.Lq, r.Lk, device=r.q.device)
    found = _COMPILES.block_mask(key)
    if found is not None:
        return found
    made = create_block_mask(mask_mod, batch, heads, r.Lq, r.Lk, device=r.q.device)
    _COMPILES.keep_block_mask(key, made)
    return made


def _describe(r: Request) -> str:
    rule = "causal" if r.causal else "full"
    if r.window is not None:
        rule += f", window {r.window}"
    layout = "" if r.q.is_contiguous() else f", strides {tuple(r.q.stride())}"
    return f"q {tuple(r.q.shape)} {str(r.q.dtype).replace('torch.', '')}{layout}, {rule}"


def mods(r: Request):
    """(score_mod, mask_mod, (B, H) of the block mask) from the request's score rule — the one place its
    fields become FlexAttention's: mask_mod is the causal/window rule (bottom-right, `rule.visible_at`) and
    a user bool mask, or None; score_mod the softcap (`rule.cap`) and an additive user mask (`rule.hide`: its
    −inf hides, NaN-proof), or None; B / H are None where the block mask is the same for every batch item /
    head. (Flex multiplies by the scale itself, before score_mod.)"""
    rule = r.rule
    shift = r.Lk - r.Lq
    user = add = None
    mask = rule.mask
    if mask is not None and rule.mask_kind == "bool":
        user = mask.expand(mask.shape[0], mask.shape[1], r.Lq, r.Lk)
    elif mask is not None:  # additive
        add = additive_in(mask.detach(), r.q.dtype)
        add = add.expand(add.shape[0], add.shape[1], r.Lq, r.Lk)
    mask_mod = score_mod = None
    seg = rule.segments
    slopes = None if rule.alibi is None else rule.alibi.detach().to(r.q.dtype)
    users_mask, users_score = rule.mask_mod, rule.score_mod  # FlexAttention's own: called as they are

    if rule.limited or user is not None or seg is not None or users_mask is not None:

        def mask_mod(b, h, q_idx, kv_idx):
            visible = rule.visible_at(q_idx + shift, kv_idx) if rule.limited else kv_idx >= 0
            if user is not None:
                visible = visible & user[b if user.shape[0] > 1 else 0, h if user.shape[1] > 1 else 0, q_idx, kv_idx]
            if seg is not None:  # a document mask: the block mask skips the blocks of other segments
                visible = visible & (seg[b, q_idx] == seg[b, kv_idx])
            if users_mask is not None:
                visible = visible & users_mask(b, h, q_idx, kv_idx)
            return visible

    if rule.softcap is not None or add is not None or slopes is not None or users_score is not None:

        def score_mod(score, b, h, q_idx, kv_idx):
            score = rule.cap(score)
            if slopes is not None:
                score = score - slopes[h] * (q_idx + shift - kv_idx).abs()
            if users_score is not None:
                score = users_score(score, b, h, q_idx, kv_idx)
            if add is not None:
                score = rule.hide(score, add[b if add.shape[0] > 1 else 0, h if add.shape[1] > 1 else 0, q_idx, kv_idx])
            return score

    batch_heads: tuple[int | None, int | None] = (None, None)
    if user is not None:
        batch_heads = (r.B if user.shape[0] > 1 else None, r.Hq if user.shape[1] > 1 else None)
    if seg is not None:
        batch_heads = (r.B, batch_heads[1])
    if rule.block_mask is not None:  # the mask_mod's own map says whether it differs by batch item / head
        Bm, Hm = rule.block_mask.kinds.shape[:2]
        batch_heads = (r.B if Bm > 1 else batch_heads[0], r.Hq if Hm > 1 else batch_heads[1])
    return score_mod, mask_mod, batch_heads
