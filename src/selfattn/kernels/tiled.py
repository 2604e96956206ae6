"""Backend "tiled": FlashAttention-2 in PyTorch ops — O(N) memory, blocks it cannot see are skipped.

The (Lq × Lk) weight matrix is never built. Queries are taken BLOCK_Q at a time; for each
query block the key/value blocks are visited one by one, and three running numbers per query
row (Triton's fused-attention tutorial calls them m, l, acc) carry the softmax across them:

    m    running row maximum of the scores seen so far        (rows, 1)
    l    running Σ 2^(s − m) over the keys seen so far        (rows, 1)
    acc  running Σ 2^(s − m) · v                              (rows, Dv)

When a new block raises the maximum from m to m', l and acc are multiplied by 2^(m − m')
before the block is added: the online softmax. At the end (the epilogue) out = acc / l and
the log-sum-exp lse = m + log₂ l is saved, so that the backward pass can recompute any
block of probabilities as p = 2^(s − lse) without a second pass over the keys.

Scores are kept in base 2 (s = q·k · scale · log₂e), as in the Triton tutorial: exp2 is
cheaper than exp, and the log₂e factor rides on the Q Kᵀ matmul's alpha. Each tile's logits are
the request's score rule (`selfattn.scores.ScoreRule`) with `unit=LOG2_E`; an additive mask whose
entries times log₂e would overflow (torch.finfo(float32).min, transformers' "hidden") keeps the
request in natural units instead (`unit=1`, exp), so that such a row stays the uniform row it is.

Which blocks are visited comes from `masks.block_visibility`. With causal = True, Lq = Lk = 8
and blocks of 2, the query blocks (rows) meet the key blocks (columns) as
`masks.draw_blocks(8, 8, 2, 2, causal=True)` draws them:

    P . . .        F  full: no mask needed ("off-band"), visited first
    F P . .        P  partial: the diagonal (or a window edge) crosses it: masked
    F F P .        .  hidden: never computed
    F F F P

so causal costs half of full attention, and a window of w costs O(N·w) instead of O(N²).
Query blocks may be taller than key blocks (1024 × 256 by default): a tile then keeps only the
rows that see some key of its key block, so the hidden part above the diagonal stays uncomputed.
A user mask (bool or additive) is applied tile by tile on every visited block. Hidden scores are
set to −inf (not added to), so a NaN in a key that a row may not see never reaches that row.

Grouped-query attention does not copy K/V: the G query heads that share a key/value head
are stacked as the rows of one query block, (B·Hkv, n·G, D), so one batched matmul per tile
serves the whole group. Nothing of size Lq·D is copied either: q is read block by block, the
softmax scale is folded into the matmul, and output and lse are written in place. What stays
is one tile of scores per chunk of heads (TILE_BUDGET_BYTES) and the running state of a block.

Speed on a CPU: each tile is about ten multi-threaded PyTorch ops, so the kernel starts and
joins OpenMP threads a few hundred times per call where SDPA does once. On idle cores that
costs little (1.1-1.2× SDPA's time for causal attention); on cores shared with other busy
processes, OpenMP's default spin-waiting makes every join wait for a preempted thread, and
OMP_WAIT_POLICY=PASSIVE in the environment brings it back (see `selfattn.bench`).
"""

from __future__ import annotations

import torch

from ..scores import sink_grad, values_readable
from ..weights import weights_from_lse
from .base import (
    EVERY_FEATURE,
    Backend,
    Cost,
    Request,
    Result,
    SecondDerivativeRefused,
    Work,
    looped_vmap,
    softmax_delta,
    streaming,
)
from .tiling import BLOCK_K, BLOCK_Q, BLOCK_SIZES, Plan, Tile

__all__ = ["TiledBackend", "Plan", "BLOCK_SIZES", "BLOCK_Q", "BLOCK_K", "TILE_SECONDS"]

RATE_GFLOPS = 52.0
"""Full and causal forward, L = 4096, 1024×256 tiles: 604 ms / 340 ms, 1 thread (`kernels.cost`)."""

LN_2 = 0.6931471805599453
"""ln 2: turns a base-2 log-sum-exp back into the natural one that `attention` returns."""

TILE_SECONDS = 60e-6
"""The kernel's Python and small-op overhead per visited tile (about a dozen ops), measured."""

NEG_INF = float("-inf")


def _work(r: Request) -> Work:
    """The tiles the forward visits at the default block sizes (`Plan.work`): a window of w costs O(N·w),
    bottom-right causal skips the hidden blocks; partial tiles count whole."""
    tiles, pairs = Plan.of(r, BLOCK_Q, BLOCK_K).work()
    return pairs, RATE_GFLOPS, tiles * TILE_SECONDS


class TiledBackend(Backend):
    """The tiled kernel with its block sizes; `BACKENDS["tiled"]` is `TiledBackend()`."""

    name = "tiled"
    capabilities = streaming(
        features=EVERY_FEATURE,
        notes={
            "weights": "the tiled kernel never builds the weight matrix: use backend='naive', or "
            "selfattn.attention_weights(q, k, lse, rows=...) for chosen rows",
        },
    )

    cost = Cost(
        work=_work,
        read_gbps=15.7,
        call_seconds=200e-6,
        backward_factor=3.3,
        busy_factor=3.3,
        dtype_speed={torch.bfloat16: 0.90, torch.float64: 0.32},
        backward_dtype_speed={torch.bfloat16: 0.96, torch.float64: 0.39},
    )
    """busy_factor 3.3 (3× SDPA's): it starts and joins the thread pool per tile and waits each time for a preempted
    thread (1.6× to 13× measured under `selfattn bench --load 1`)."""

    def __init__(self, block_q: int = BLOCK_Q, block_k: int = BLOCK_K):
        for label, size in (("block_q", block_q), ("block_k", block_k)):
            if size not in BLOCK_SIZES:
                raise ValueError(f"{label}={size!r} is not a supported block size; choose one of {BLOCK_SIZES}")
        self.block_q = block_q
        self.block_k = block_k

    def __repr__(self) -> str:
        return f"TiledBackend(block_q={self.block_q}, block_k={self.block_k})"

    def form_decides(self, r: Request) -> bool:
        """True: its reasons and estimate read no tensor values (`Backend.form_decides`)."""
        return True

    def not_supported_reasons(self, r: Request) -> list[str]:
        """Capabilities' reasons, and a function of the score that holds a tensor requiring grad: the backward
        takes the gradient through it to q, k, v only."""
        reasons = super().not_supported_reasons(r)
        if r.needs_grad or torch.is_grad_enabled():
            reasons += [
                f"its {words} holds a tensor that requires grad, and its backward differentiates q, k, v only; use "
                f"backend='naive' (or detach it)"
                for words in r.rule.mods_holding_grad()
            ]
        return reasons

    def forward(self, r: Request) -> Result:
        plan = Plan.of(r, self.block_q, self.block_k)
        sinks_grad = r.rule.sinks is not None and r.rule.sinks.requires_grad and torch.is_grad_enabled()
        if r.needs_grad or sinks_grad or not values_readable(r.q, r.k, r.v, r.rule.sinks):  # vmap: the Function's rule
            sinks = r.rule.sinks if r.rule.sinks is not None else r.q.new_zeros(0)
            out, lse2 = _TiledAttention.apply(r.q, r.k, r.v, sinks, plan)
        else:
            out, lse2 = _forward(r.q, r.k, r.v, plan)
        return Result(out, None, (lse2 * LN_2 if plan.base2 else lse2) if r.return_lse else None)


class _Tiles:
    """Scratch space for one chunk of heads: score tiles reused from step to step, and the
    hidden-position tiles of the causal/window rule, cached by their geometry."""

    HIDDEN_CACHE_SIZE = 64
    """Distinct edge-tile geometries kept; aligned blocks need only a handful."""

    def __init__(self, plan: Plan, heads: int, like: torch.Tensor, buffers: int):
        size = heads * plan.G * min(plan.block_q * plan.block_k, plan.Lq * plan.Lk)  # ≥ any tile
        self._flat = [like.new_empty(size) for _ in range(buffers)]
        self._plan = plan
        self._hidden: dict[tuple[int, int, int], torch.Tensor] = {}

    def scratch(self, i: int, *shape: int) -> torch.Tensor:
        """Buffer i as a contiguous tensor of `shape` (at most one tile)."""
        n = 1
        for d in shape:
            n *= d
        return self._flat[i][:n].view(shape)

    def hidden(self, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor:
        """True where the causal/window rule hides key j from query i: bool (n, bk)."""
        key = (q1 - q0, k1 - k0, q0 - k0)  # the rule depends on positions only through q − k
        if key not in self._hidden:
            if len(self._hidden) >= self.HIDDEN_CACHE_SIZE:
                self._hidden.clear()
            plan, device = self._plan, self._flat[0].device
            rows, cols = torch.arange(q0, q1, device=device), torch.arange(k0, k1, device=device)
            self._hidden[key] = ~plan.rule.visible(rows, cols, plan.Lq, plan.Lk)
        return self._hidden[key]


def _mask_tile(plan: Plan, chunk, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor:
    """The rule's mask on one tile, laid out like its scores s5 (b, h, n|1, G|1, bk|1): a view."""
    b0, b1, h0, h1 = chunk
    m = plan.mask
    assert m is not None  # the caller draws a tile only when the plan has a mask
    tile = m[_span(m, 0, b0, b1), _span(m, 1, h0, h1), :, _span(m, 3, q0, q1), _span(m, 4, k0, k1)]
    return tile.transpose(2, 3)


def _span(m: torch.Tensor, dim: int, a: int, b: int) -> slice:
    """[a, b) along `dim`, or all of it where the mask broadcasts (size 1) along `dim`."""
    return slice(a, b) if m.shape[dim] > 1 else slice(None)


def _scores(
    plan: Plan,
    chunk,
    tiles: _Tiles,
    qt: torch.Tensor,
    kb: torch.Tensor,
    tile: Tile,
    masked: bool,
    keep_tanh: bool = False,
):
    """One tile of logits by the request's score rule, in `plan.unit`s (base 2: s = q·k · scale · log₂e),
    softcapped and masked: (heads, n·G, bk), in scratch buffer 0 (the rule's alpha rides on the matmul).
    With keep_tanh (the backward, under a softcap) also tanh(q·k · scale/c), which the softcap's
    derivative needs; then s is a new tensor and buffer 0 holds the tanh. Returns (s, tanh or None, pull or None):
    pull(ds) takes a gradient of the logits back through the rule's function of the score (`ScoreRule.modify`,
    by autograd; only with keep_tanh), in place."""
    q0, q1, k0, k1 = tile
    b0, b1, h0, h1 = chunk
    rule = plan.rule
    s = tiles.scratch(0, qt.shape[0], qt.shape[1], k1 - k0)
    torch.baddbmm(s, qt, kb.transpose(1, 2), beta=0.0, alpha=rule.alpha(plan.unit), out=s)  # s = alpha · Q Kᵀ
    if keep_tanh:
        s, capped = rule.scaled(s, unit=plan.unit, folded=True, keep_tanh=True)
    else:
        s, capped = rule.scaled(s, unit=plan.unit, folded=True), None
    s5 = s.view(b1 - b0, h1 - h0, q1 - q0, plan.G, k1 - k0)
    by_position = rule.biased or rule.parted or rule.blocked or rule.modded
    span = (torch.arange(q0, q1, device=s.device), torch.arange(k0, k1, device=s.device)) if by_position else None
    bias = None if span is None else rule.bias(*span, plan.Lq, plan.Lk, dtype=s.dtype, device=s.device, unit=plan.unit)
    if bias is not None:  # (Hq, n, bk) → (h, n, G, bk): the chunk's kv heads, each group's terms
        s5.add_(bias.view(plan.Hkv, plan.G, q1 - q0, k1 - k0)[h0:h1].transpose(1, 2))
    pull = None
    if span is not None and rule.modded:
        pull = _modified(plan, chunk, s5, *span, keep_grad=keep_tanh)
    mask = None if plan.mask is None else _mask_tile(plan, chunk, q0, q1, k0, k1)
    hidden = tiles.hidden(q0, q1, k0, k1)[:, None] if masked else None  # (n, 1, bk): the same for the group
    apart = None if span is None else rule.apart(*span)
    if apart is not None:  # (b, 1, n, 1, bk): hidden by ids, per batch (tiles are not skipped for them)
        apart = apart[b0:b1, :, :, None]
        hidden = apart if hidden is None else apart | hidden
    blocked = None if span is None else rule.blocked_out(*span)
    if blocked is not None:  # (Bm, Hm, n, bk) → (b|1, h|1, n, G|1, bk)
        blocked = _by_group(blocked, plan, chunk)
        hidden = blocked if hidden is None else blocked | hidden
    rule.hide(s5, mask, hidden, unit=plan.unit, inplace=True)
    return s, capped, pull


def _by_group(t: torch.Tensor, plan: Plan, chunk) -> torch.Tensor:
    """A (Bm, Hm, n, bk) tile of the rule (Bm, Hm: 1 or all) laid out like the scores s5 (b|1, h|1, n, G|1, bk)."""
    b0, b1, h0, h1 = chunk
    if t.shape[0] > 1:
        t = t[b0:b1]
    if t.shape[1] == 1:
        return t[:, :, :, None]
    return t.view(t.shape[0], plan.Hkv, plan.G, t.shape[2], t.shape[3])[:, h0:h1].transpose(2, 3)


def _modified(plan: Plan, chunk, s5: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, *, keep_grad: bool):
    """The rule's function of the score (`ScoreRule.modify`) on s5 (b, h, n, G, bk), in place, called with index
    tensors broadcasting to it: b (b,1,1,1,1), h (1,h,1,G,1) (query heads), q_idx (1,1,n,1,1), kv_idx (1,1,1,1,bk).
    With keep_grad, returns pull(ds): ds (the logits' gradient, s5's layout) → the gradient of its input, by
    autograd, in place; else None."""
    b0, b1, h0, h1 = chunk
    device, G = s5.device, plan.G
    b = torch.arange(b0, b1, device=device)[:, None, None, None, None]
    h = (torch.arange(h0, h1, device=device)[:, None] * G + torch.arange(G, device=device)[None, :])[
        None, :, None, :, None
    ]
    index = (b, h, rows[None, None, :, None, None], cols[None, None, None, None, :])
    if not keep_grad:
        s5.copy_(plan.rule.modify(s5, *index, unit=plan.unit))
        return None
    with torch.enable_grad():
        x = (s5 / plan.unit).requires_grad_(True)  # natural units: the gradients are the logits' own
        y = plan.rule.modify(x, *index)
    s5.copy_(y.detach() * plan.unit)

    def pull(ds: torch.Tensor) -> torch.Tensor:
        (grad,) = torch.autograd.grad(y, x, ds.view(s5.shape))
        return ds.copy_(grad.view(ds.shape))

    return pull


def _grouped(x: torch.Tensor, plan: Plan) -> torch.Tensor:
    """(B, Hq, L, E) → (B·Hkv, G, L, E): the G query heads of each key/value head side by side (a view
    for the usual layouts)."""
    return x.reshape(plan.B * plan.Hkv, plan.G, x.shape[2], x.shape[3])


def _rows(x4: torch.Tensor, heads: slice, q0: int, q1: int) -> torch.Tensor:
    """Queries [q0, q1) of every head of a group as the rows of one matrix, query-major (row r is
    query q0 + r // G of group head r % G): (h, G, L, E) → (h, n·G, E). A view when G = 1."""
    part = x4[heads, :, q0:q1].transpose(1, 2)
    return part.reshape(part.shape[0], part.shape[1] * part.shape[2], part.shape[3])


def _unrows(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(h, n·G, E) → (h, G, n, E): undo `_rows` (a view)."""
    return x.view(x.shape[0], -1, groups, x.shape[2]).transpose(1, 2)


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: Plan):
    """The forward loops. Returns out (B, Hq, Lq, Dv) in q's dtype and lse₂ (B, Hq, Lq) (base 2)."""
    G, BQ, Dv = plan.G, plan.block_q, v.shape[-1]
    q4 = _grouped(q.to(plan.acc), plan)  # (B·Hkv, G, Lq, D)
    k3 = k.to(plan.acc).reshape(plan.B * plan.Hkv, plan.Lk, k.shape[-1])
    v3 = v.to(plan.acc).reshape(plan.B * plan.Hkv, plan.Lk, Dv)
    out = q.new_empty(plan.B, plan.Hq, plan.Lq, Dv)
    lse2 = q4.new_empty(plan.B, plan.Hq, plan.Lq, 1)
    out4, lse4 = _grouped(out, plan), _grouped(lse2, plan)
    for chunk in plan.head_chunks():
        b0, b1, h0, h1 = chunk
        heads = slice(b0 * plan.Hkv + h0, (b1 - 1) * plan.Hkv + h1)
        tiles = _Tiles(plan, (b1 - b0) * (h1 - h0), q4, buffers=1)
        for q0 in range(0, plan.Lq, BQ):
            q1 = min(q0 + BQ, plan.Lq)
            qb = _rows(q4, heads, q0, q1)  # (h, n·G, D)
            m = qb.new_full((qb.shape[0], qb.shape[1], 1), NEG_INF)  # running max
            l = qb.new_zeros(qb.shape[0], qb.shape[1], 1)  # running sum
            acc = qb.new_zeros(qb.shape[0], qb.shape[1], Dv)  # running Σ p·v
            full, partial = plan.key_blocks(q0, q1)
            for blocks, masked in ((full, False), (partial, True)):  # off-band first, then the diagonal
                for tile in blocks:
                    r0, r1, k0, k1 = tile
                    if plan.rule.tile_hidden(r0, r1, k0, k1):
                        continue
                    rows = slice((r0 - q0) * G, (r1 - q0) * G)  # the rows that see this key block
                    s, _, _ = _scores(plan, chunk, tiles, qb[:, rows], k3[heads, k0:k1], tile, masked)
                    _online_softmax_step(s, v3[heads, k0:k1], m[:, rows], l[:, rows], acc[:, rows], plan.base2)
            if plan.rule.sinks is not None:
                _join_sink(plan, heads, q1 - q0, m, l, acc)
            # epilogue: normalise, and save the log-sum-exp for the backward pass
            acc.div_(l.masked_fill(l == 0, 1.0))  # a row that saw nothing: 0
            out4[heads, :, q0:q1].copy_(_unrows(acc, G))
            lse4[heads, :, q0:q1].copy_(
                _unrows(m + (torch.log2(l) if plan.base2 else torch.log(l)), G)
            )  # and lse = −inf
    return out, lse2[..., 0]


def _join_sink(plan: Plan, heads: slice, n: int, m, l, acc) -> None:
    """The sink logit of each row's head joins (m, l, acc) as one more key whose value is 0, in place:
    m' = max(m, sink), l' = l · 2^(m − m') + 2^(sink − m') (base 2 or natural, as the plan's logits)."""
    sinks = plan.rule.sinks
    assert sinks is not None  # the caller joins a sink only when the rule has sinks
    kv = torch.arange(heads.start, heads.stop, device=m.device) % plan.Hkv  # (h,) kv head of each chunk row
    sink = sinks.detach().to(m.dtype).view(plan.Hkv, plan.G)[kv] * plan.unit  # (h, G)
    sink = sink[:, None, :].expand(-1, n, -1).reshape(m.shape)  # (h, n·G, 1) query-major, as the rows
    m_new = torch.where(torch.isnan(m), m, torch.maximum(m, sink))
    power = torch.exp2 if plan.base2 else torch.exp
    alpha = torch.where(l > 0, power(m - m_new), torch.zeros_like(m))
    l.mul_(alpha).add_(power(sink - m_new))
    acc.mul_(alpha)
    m.copy_(m_new)


def _online_softmax_step(s, vb, m, l, acc, base2: bool = True) -> None:
    """Fold one tile of logits s (h, rows, bk), base 2 or natural, into the running (m, l, acc), in place."""
    m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
    m_use = m_new.masked_fill(m_new == NEG_INF, 0.0)  # a row that saw only −inf so far: subtract 0, not −inf
    p = s.sub_(m_use).exp2_() if base2 else s.sub_(m_use).exp_()  # (h, rows, bk) in place: no new tile
    alpha = torch.exp2(m - m_use) if base2 else torch.exp(m - m_use)  # rescales what was summed under the old max
    l.mul_(alpha).add_(p.sum(dim=-1, keepdim=True))
    acc.mul_(alpha).baddbmm_(p, vb)
    m.copy_(m_new)


def _backward(q, k, v, out, lse2, d_out, d_lse, plan: Plan):
    """The backward loops (FlashAttention-2): key blocks outside, query blocks inside, every tile's
    probabilities recomputed as p = 2^(s − lse₂). Returns dq, dk, dv in the accumulate dtype."""
    G, BK, Dv, acc = plan.G, plan.block_k, v.shape[-1], plan.acc
    BH = plan.B * plan.Hkv
    q4 = _grouped(q.to(acc), plan)
    k3, v3 = k.to(acc).reshape(BH, plan.Lk, k.shape[-1]), v.to(acc).reshape(BH, plan.Lk, Dv)
    do4 = _grouped(d_out.to(acc), plan)
    delta4 = _grouped(softmax_delta(d_out, out, d_lse, acc)[..., None], plan)  # Δ = rowsum(dO ∘ O) − dlse
    lse4 = _grouped(lse2[..., None], plan)
    dq4 = torch.zeros_like(q4)
    dk, dv = torch.zeros_like(k3), torch.zeros_like(v3)
    for chunk in plan.head_chunks():
        b0, b1, h0, h1 = chunk
        heads = slice(b0 * plan.Hkv + h0, (b1 - 1) * plan.Hkv + h1)
        tiles = _Tiles(plan, (b1 - b0) * (h1 - h0), q4, buffers=2)
        for k0 in range(0, plan.Lk, BK):
            k1 = min(k0 + BK, plan.Lk)
            kb, vb = k3[heads, k0:k1], v3[heads, k0:k1]
            dk_acc, dv_acc = dk[heads, k0:k1], dv[heads, k0:k1]
            full, partial = plan.query_blocks(k0, k1)
            for blocks, masked in ((full, False), (partial, True)):
                for tile in blocks:
                    q0, q1 = tile[:2]
                    if plan.rule.tile_hidden(*tile):
                        continue
                    qt, do = _rows(q4, heads, q0, q1), _rows(do4, heads, q0, q1)
                    s, capped, pull = _scores(plan, chunk, tiles, qt, kb, tile, masked, keep_tanh=True)
                    p = weights_from_lse(
                        s, _rows(lse4, heads, q0, q1)[..., 0], base2=plan.base2, inplace=True
                    )  # the forward's probabilities
                    dv_acc.baddbmm_(p.transpose(1, 2), do)  # dV += pᵀ dO
                    ds = tiles.scratch(1, *p.shape)
                    torch.bmm(do, vb.transpose(1, 2), out=ds)  # dP = dO Vᵀ
                    ds.sub_(_rows(delta4, heads, q0, q1)).mul_(p)  # dS = p ∘ (dP − Δ)
                    if pull is not None:
                        pull(ds)  # back through the rule's function of the score
                    if capped is not None:
                        ds.mul_(capped.square_().neg_().add_(1.0))  # d/dx c·tanh(x/c) = 1 − tanh² (chain rule)
                    dk_acc.baddbmm_(ds.transpose(1, 2), qt, alpha=plan.scale)  # dK += scale · dSᵀ Q
                    if G == 1:  # dQ += scale · dS K
                        dq4[heads, 0, q0:q1].baddbmm_(ds, kb, alpha=plan.scale)
                    else:  # (group rows are not adjacent in dQ)
                        dq4[heads, :, q0:q1].add_(_unrows(torch.bmm(ds, kb), G), alpha=plan.scale)
    shape_kv = (plan.B, plan.Hkv, plan.Lk)
    return dq4.view(q.shape), dk.view(*shape_kv, k.shape[-1]), dv.view(*shape_kv, Dv)


DOUBLE_BACKWARD = (
    "double backward through the tiled attention kernel is not supported (its backward has no derivative); "
    "use backend='naive' for a gradient of a gradient"
)
"""The refusal of a second derivative (RuntimeError), raised by the first backward asked with create_graph=True."""


class _TiledBackward(SecondDerivativeRefused):
    """(dq, dk, dv) of the tiled kernel: a Function of its own so that vmap has a rule for it and a second
    derivative (create_graph=True, then a gradient of the gradient) raises DOUBLE_BACKWARD by name."""

    refusal = DOUBLE_BACKWARD

    @staticmethod
    def forward(q, k, v, out, lse2, d_out, d_lse, plan: Plan):
        return _backward(q, k, v, out, lse2, d_out, d_lse, plan)

    @staticmethod
    def vmap(info, in_dims, *args):
        return looped_vmap(_TiledBackward.apply, info, in_dims, args)


class _TiledAttention(torch.autograd.Function):
    """out, lse₂ = tiled attention of (q, k, v) (lse₂ in `plan.unit`s); the backward recomputes
    probabilities block by block. torch.func.grad and vmap work over it (setup_context, vmap rules: one
    call per vmapped entry); a second derivative is refused by name (`_TiledBackward`)."""

    @staticmethod
    def forward(q, k, v, sinks, plan: Plan):
        return _forward(q, k, v, plan)

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, sinks, plan = inputs
        ctx.save_for_backward(q, k, v, sinks, *output)
        ctx.plan = plan
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, d_out, d_lse2):
        q, k, v, sinks, out, lse2 = ctx.saved_tensors
        if d_out is None:
            d_out = torch.zeros_like(out)
        plan = ctx.plan
        d_lse = None if d_lse2 is None else d_lse2 * plan.unit  # the caller's lse is lse₂ / unit
        dq, dk, dv = _TiledBackward.apply(q, k, v, out, lse2, d_out, d_lse, plan)
        d_sinks = None
        if sinks.numel() and ctx.needs_input_grad[3]:
            lse = lse2 / plan.unit  # natural units
            d_sinks = sink_grad(sinks, lse, softmax_delta(d_out, out, d_lse, plan.acc))
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), d_sinks, None

    @staticmethod
    def vmap(info, in_dims, q, k, v, sinks, plan):
        return looped_vmap(_TiledAttention.apply, info, in_dims, (q, k, v, sinks, plan))
