"""`ring_attention`: exact attention over a sequence split across the ranks of a process group.

Each rank keeps its queries; the K/V blocks travel round the ring, one rank per step, and every
rank folds each block it sees into its running (output, lse) (`blocks.merge`). The send of the
next block is posted before the current one is computed, so communication overlaps compute:

    step s on rank r:   post  send(block held, → r+1), recv(next block, ← r−1)
                        compute r's queries × the block of rank r−s   (skipped if hidden)
                        wait  (with a deadline, naming the rank that did not answer)

Backward goes round the ring again: the K/V blocks travel as before and each carries its
dK/dV accumulator, one step behind, to the next rank that uses it; the last user sends it home
to the block's owner. dQ stays where it is.

    rank r holds   q (B, Hq, Lr, D), k (B, Hkv, Lr, D), v (B, Hkv, Lr, Dv): Lr = Lp / W rows
    forward sends  at most (W − 1) K/V blocks:   (W − 1) · B · Hkv · Lr · (D + Dv) elements
    backward sends at most (W − 1) K/V blocks and W dK/dV blocks (the latter in the accumulation dtype)
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import struct
from dataclasses import dataclass

import torch

from .. import checks
from ..functional import AttentionOutput, intercept
from ..request import accumulate_dtype, build_request, check_window
from ..scores import FEATURES, ScoreRule, join_sinks, sink_grad
from . import comm
from .blocks import block_backward, block_forward, merge
from .layout import LAYOUTS, Sharded, check_layout, positions, world_and_rank
from .plan import RingPlan, Rule

__all__ = ["Traffic", "count_traffic", "ring_attention"]

TAG_KV, TAG_DKV, TAG_HOME = 0, 1, 2
"""Message kinds; the tag of a message is kind + KINDS · step, so gloo never confuses two of a step."""
KINDS = 3

DTYPE_CODES = {torch.float16: 1, torch.bfloat16: 2, torch.float32: 3, torch.float64: 4}

PLAN_CACHE_SIZE = 64
"""Ring plans kept (one per distinct (world, Lr, layout, rule)): a model's layers share one."""


@functools.lru_cache(maxsize=PLAN_CACHE_SIZE)
def _plan(world: int, Lr: int, layout: str, rule: Rule) -> RingPlan:
    """The plan of one ring pass, built once per shape and rule rather than once per call (per layer).

    Only called after `comm.check_same` has agreed the arguments across ranks, so every rank
    gets a plan built from the same values, cached or not.
    """
    return RingPlan(world, Lr, layout, rule)


@dataclass
class Traffic:
    """Bytes this rank sent through `ring_attention` while counting (forward and backward apart)."""

    forward: int = 0
    backward: int = 0


_TRAFFIC: contextvars.ContextVar[Traffic | None] = contextvars.ContextVar("selfattn_ring_traffic", default=None)


@contextlib.contextmanager
def count_traffic():
    """Count the bytes this rank sends in every `ring_attention` call inside (this thread only)."""
    traffic = Traffic()
    token = _TRAFFIC.set(traffic)
    try:
        yield traffic
    finally:
        _TRAFFIC.reset(token)


@dataclass(frozen=True)
class _Ring:
    """Everything one call needs besides the tensors."""

    group: object
    plan: RingPlan
    rank: int
    globals: list
    score: ScoreRule
    real: torch.Tensor
    backend: str
    timeout_s: float
    traffic: Traffic | None

    @property
    def world(self) -> int:
        return self.plan.world

    @property
    def score_args(self) -> tuple[Rule, ScoreRule]:
        """(the ring's causal / window rule, the score rule without them or sinks): how each block scores, as
        `blocks` takes them."""
        return self.plan.rule, self.score

    def exchange(self, label: str) -> comm.Exchange:
        return comm.Exchange(self.group, self.timeout_s, self.rank, self.globals, label)


def _direct(request, compute):
    return compute(request)


def _float_bits(x: float | None) -> int:
    return -1 if x is None else struct.unpack("<q", struct.pack("<d", float(x)))[0]


def _join_sinks(out: torch.Tensor, lse: torch.Tensor, sinks: torch.Tensor, real: torch.Tensor):
    """The merged (out, lse) of this rank's rows with each head's sink in the denominator, once
    (`scores.join_sinks`); padding rows (`real` False) keep output 0 and lse −inf."""
    joined, factor = join_sinks(sinks, lse)
    joined = torch.where(real, joined, lse)
    return out * torch.where(real, factor, torch.zeros_like(factor))[..., None], joined


class _RingFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, ring: _Ring):
        plan, rank, W = ring.plan, ring.rank, ring.world
        acc = accumulate_dtype(q.dtype)
        B, Hq, Lr, Dv = q.shape[0], q.shape[1], q.shape[2], v.shape[3]
        D = k.shape[3]
        out = torch.zeros(B, Hq, Lr, Dv, dtype=acc, device=q.device)
        lse = torch.full((B, Hq, Lr), float("-inf"), dtype=acc, device=q.device)
        first_block = torch.cat([k, v], dim=-1).contiguous()  # (B, Hkv, Lr, D + Dv)
        block = first_block.shape
        cur: torch.Tensor | None = first_block
        sent = 0
        for step in range(W):
            ex = ring.exchange(f"forward step {step}")
            nxt = None
            if plan.sends_on(rank, step):
                assert cur is not None  # the plan sends only a block this rank holds
                ex.send(cur, (rank + 1) % W, "sending the K/V block", TAG_KV + KINDS * step)
            if plan.sends_on((rank - 1) % W, step):
                nxt = torch.empty(block, dtype=k.dtype, device=k.device)  # cur is None when this rank held nothing
                ex.recv(nxt, (rank - 1) % W, "receiving the K/V block", TAG_KV + KINDS * step)
            ex.post()
            src = plan.holds(rank, step)
            if src is not None:
                assert cur is not None  # the plan gives this rank a source only with a block held
                with intercept(_direct):  # the blocks are not the user's attention calls: no interceptor sees them
                    for qoff, koff, b in plan.boxes(rank, src):
                        part_out, part_lse = block_forward(
                            q, cur[..., :D], cur[..., D:], b, qoff, koff, *ring.score_args, ring.backend
                        )
                        merge(out, lse, b.q0 + qoff, part_out, part_lse)
            ex.wait()
            sent += ex.bytes_sent
            cur = nxt
        if ring.traffic is not None:
            ring.traffic.forward += sent
        if sinks is not None:
            out, lse = _join_sinks(out, lse, sinks.detach(), ring.real)
        out = out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse, sinks)
        ctx.ring = ring
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse, sinks = ctx.saved_tensors
        ring: _Ring = ctx.ring
        plan, rank, W = ring.plan, ring.rank, ring.world
        acc = accumulate_dtype(q.dtype)
        D = k.shape[3]
        qa, do = q.to(acc), dout.to(acc)
        delta = (do * out.to(acc)).sum(-1)  # (B, Hq, Lr)
        if dlse is not None:
            delta = delta - dlse.to(acc)
        dq = torch.zeros_like(qa)
        cur = torch.cat([k, v], dim=-1).contiguous()  # (B, Hkv, Lr, D + Dv)
        block = cur.shape
        held_prev = done_prev = mine = None
        my_hops = plan.hops(rank)
        sent = 0
        for step in range(W + 1):
            ex = ring.exchange(f"backward step {step}")
            nxt = acc_in = home = None
            if step < W and plan.sends_on(rank, step):
                ex.send(cur, (rank + 1) % W, "sending the K/V block", TAG_KV + KINDS * step)
            if step < W and plan.sends_on((rank - 1) % W, step):
                nxt = torch.empty(block, dtype=k.dtype, device=k.device)  # cur is None when this rank held nothing
                ex.recv(nxt, (rank - 1) % W, "receiving the K/V block", TAG_KV + KINDS * step)
            if held_prev is not None:
                if plan.sends_on(rank, step - 1):
                    ex.send(done_prev, (rank + 1) % W, "sending dK/dV onward", TAG_DKV + KINDS * step)
                elif held_prev != rank:
                    ex.send(done_prev, held_prev, "sending dK/dV home", TAG_HOME + KINDS * step)
                else:
                    mine = done_prev
            src = plan.holds(rank, step) if step < W else None
            if src is not None and step > 0:
                acc_in = torch.empty(block, dtype=acc, device=q.device)
                ex.recv(acc_in, (rank - 1) % W, "receiving dK/dV", TAG_DKV + KINDS * step)
            if my_hops > 0 and step == my_hops + 1:
                home = torch.empty(block, dtype=acc, device=q.device)
                ex.recv(home, (rank + my_hops) % W, "receiving this rank's dK/dV", TAG_HOME + KINDS * step)
            ex.post()
            part = None
            if src is not None:
                part = torch.zeros(block, dtype=acc, device=q.device)
                ka, va = cur[..., :D].to(acc), cur[..., D:].to(acc)
                for qoff, koff, b in plan.boxes(rank, src):
                    block_backward(
                        qa, ka, va, do, lse, delta, dq, part[..., :D], part[..., D:], b, qoff, koff, *ring.score_args
                    )
            ex.wait()
            sent += ex.bytes_sent
            if home is not None:
                mine = home
            if part is not None and acc_in is not None:
                part += acc_in
            held_prev, done_prev, cur = src, part, nxt
        if ring.traffic is not None:
            ring.traffic.backward += sent
        dk, dv = mine[..., :D].to(k.dtype), mine[..., D:].to(v.dtype)
        dsinks = None
        if sinks is not None and ctx.needs_input_grad[3]:  # this rank's rows' share (summed over ranks: the whole)
            dsinks = sink_grad(sinks, lse[:, :, ring.real], delta[:, :, ring.real])
        return dq.to(q.dtype), dk, dv, dsinks, None


def ring_attention(
    q,
    k,
    v,
    *,
    group=None,
    causal=False,
    window=None,
    softcap=None,
    scale=None,
    layout="zigzag",
    seq_len=None,
    return_lse=False,
    backend="auto",
    **features,
):
    """Attention over a sequence split across the ranks of `group`: this rank's rows of the whole.

    q  (B, Hq, Lr, D)    this rank's queries, Lr = Lp / W rows in `layout` (see `shard`)
    k  (B, Hkv, Lr, D)   this rank's keys (K/V travel with Hkv heads: GQA is not expanded)
    v  (B, Hkv, Lr, Dv)  this rank's values
    q, k, v may be `Sharded` (from `shard`): layout and seq_len are then taken from them, and
    the output (and lse) come back as `Sharded` too, ready for `unshard`.
    causal, window, softcap, scale, backend   as in `selfattn.attention` on the whole sequence. A window
               counts global positions: w (p − w < j <= p) or (left, right) (p − left <= j <= p + right,
               FlashAttention's convention; with causal=False keys after the query are visible too); one
               wider than a rank's rows reaches further ranks
    features   the tensor score features of `selfattn.attention` (`scores.FEATURES`), the same on every rank:
               sinks (Hq,): each row's softmax denominator gains exp(sink_h), once (joined to the merged
               lse, which includes it). Differentiable: sinks.grad on a rank is its rows' share; their sum
               over the ranks (an all_reduce, as for any replicated parameter) is the whole sequence's
               gradient. ALiBi slopes (Hq,): score −= slope_h · |p − j| with p, j global positions
               (constants, not differentiated). Segments are refused (ValueError): packed sequences are
               not split across a ring
    layout     "zigzag" (rank i holds chunks i and 2W−1−i: balanced causal work) or "contiguous"
    seq_len    the true length L <= Lr · W; positions >= L are padding: hidden as keys, and their
               query rows get output 0, lse −inf (None: no padding, L = Lr · W)
    return_lse return AttentionOutput(output, None, lse (B, Hq, Lr))

    Returns output (B, Hq, Lr, Dv) equal to rows of `attention(full q, full k, full v, ...)`.
    Raises ValueError when ranks disagree on shapes, dtypes or options (sinks and slopes included), and
    `RankFailure` naming the rank that did not answer within the group's timeout (set by `init`).
    """
    if features.get("segments") is not None:
        raise ValueError(
            "ring_attention does not take segments= (packed sequences are not split across ranks): "
            "run each packed batch with selfattn.attention, or pass one sequence per call"
        )
    mods = [name for name in ("mask_mod", "score_mod", "block_mask") if features.get(name) is not None]
    if mods:  # each rank holds its own rows and keys: a mod would be called with this rank's local positions
        raise ValueError(
            f"ring_attention does not take {', '.join(m + '=' for m in mods)} (a mod reads positions, and each rank "
            "holds only its own rows and keys): pass the rule as causal=, window= or a score feature, or run "
            "selfattn.attention on the whole sequence"
        )
    sharded = None
    if any(isinstance(t, Sharded) for t in (q, k, v)):
        if not all(isinstance(t, Sharded) for t in (q, k, v)):
            raise TypeError("q, k, v must be all Sharded or all tensors")
        metas = {(t.seq_len, t.layout, t.dim, t.world, t.rank) for t in (q, k, v)}
        if len(metas) != 1 or q.dim != 2:
            raise ValueError(
                f"q, k, v must be sharded alike along dim 2, got (seq_len, layout, dim, world, rank) {sorted(metas)}"
            )
        sharded, seq_len, layout = q, q.seq_len, q.layout
        q, k, v = q.tensor, k.tensor, v.tensor
    check_layout(layout)
    checks.boolean("causal", causal)
    checks.boolean("return_lse", return_lse)
    # the window is the whole sequence's rule: checked here against L, not clamped to this rank's Lr rows
    # as `build_request` would
    check_window(window, 1, 1)
    for name, t in features.items():  # attention folds a batched one into a mask, which the ring does not draw
        if name in FEATURES and FEATURES[name].folds and isinstance(t, torch.Tensor) and t.dim() == 2 and len(t) > 1:
            raise ValueError(
                f"ring_attention takes {FEATURES[name].words} of shape (Hq,) (one per head, for every batch item), "
                f"got {tuple(t.shape)}"
            )
    request = build_request(q, k, v, causal=causal, scale=scale, softcap=softcap, **features)
    world_and_rank(group)  # RuntimeError before `init`
    world, rank, global_ranks = comm.group_ranks(group)
    Lr = q.shape[2]
    if k.shape[2] != Lr:
        raise ValueError(
            f"q has {Lr} local rows but k has {k.shape[2]}: each rank holds the same positions of q, k and v"
        )
    if layout == "zigzag" and Lr % 2:
        raise ValueError(f"the zigzag layout needs an even number of local rows (two equal chunks), got Lr={Lr}")
    seq_len = checks.integer("seq_len", Lr * world if seq_len is None else seq_len, low=1, high=Lr * world)
    window = check_window(window, seq_len, seq_len)  # every wider window reaches the ends: the same rule
    comm.check_same(
        {
            "B": q.shape[0],
            "Hq": q.shape[1],
            "Hkv": k.shape[1],
            "Lr": Lr,
            "D": q.shape[3],
            "Dv": v.shape[3],
            "dtype": DTYPE_CODES[q.dtype],
            "seq_len": seq_len,
            "layout": LAYOUTS.index(layout),
            "causal": int(causal),
            **_window_meta(window),
            "scale_bits": _float_bits(request.scale),
            "softcap_bits": _float_bits(request.softcap),
            **{
                key: bits
                for f in FEATURES.values()
                if f.per_head
                for key, bits in _per_head_meta(f.name, getattr(request.rule, f.name)).items()
            },
        },
        group,
        "ring_attention",
    )
    plan = _plan(world, Lr, layout, Rule(causal, window, seq_len))
    real = positions(rank, world, Lr, layout, device=q.device) < seq_len
    ring = _Ring(
        group,
        plan,
        rank,
        global_ranks,
        request.rule.replace(sinks=None),
        real,
        backend,
        comm.wait_timeout_s(),
        _TRAFFIC.get(),
    )
    out, lse = _RingFunction.apply(q, k, v, request.rule.sinks, ring)
    if sharded is not None:
        out, lse = sharded.like(out), sharded.like(lse)
    return AttentionOutput(out, None, lse) if return_lse else out


def _window_meta(window) -> dict[str, int]:
    """The normalised window as small ints for `comm.check_same`: its kind (0 none, 1 w, 2 a pair) and sides
    (−1 for an unbounded side)."""
    if window is None:
        return {"window_kind": 0, "window_left": -1, "window_right": -1}
    if isinstance(window, int):
        return {"window_kind": 1, "window_left": window, "window_right": 0}
    left, right = window
    sides = (-1 if side is None else side for side in (left, right))
    return dict(zip(("window_kind", "window_left", "window_right"), (2, *sides), strict=True))


def _per_head_meta(name: str, t: torch.Tensor | None) -> dict[str, int]:
    """Whether `t` (sinks, ALiBi slopes) is given and the bits of each of its values (float64), for
    `comm.check_same`: every rank must score with the same per-head numbers."""
    if t is None:
        return {name: 0}
    return {name: 1} | {f"{name}[{h}]": _float_bits(x) for h, x in enumerate(t.detach().double().cpu().tolist())}
