"""What each spawned rank runs (see harness.py). Every function returns a list of failure strings.

Inputs are seeded and identical on every rank; each rank computes the whole single-process
reference itself (the float64 NumPy spec for outputs and lse, and its gradients from spec_grads.py;
the naive backend in the case's dtype only for the error baseline) and compares its rows.
"""

from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass

import torch

from selfattn import attention
from selfattn.distributed import RankFailure, count_traffic, padded_length, ring_attention, shard, unshard
from selfattn.distributed.plan import RingPlan, Rule
from tests.helpers import make_inputs
from tests.tolerances import TOL, max_error, tolerance

from .spec_grads import spec_with_grads
from .sweep import sweep


@dataclass(frozen=True)
class Case:
    L: int
    causal: bool = True
    window: int | None = None
    softcap: float | None = None
    scale: float | None = None
    Hq: int = 2
    Hkv: int = 2
    D: int = 8
    Dv: int = 8
    dtype: torch.dtype = torch.float64
    layout: str = "zigzag"
    lse_grad: bool = False
    B: int = 1


CASES = (
    Case(37, causal=True, Hq=4, Hkv=2),  # GQA, L not divisible by 2W
    Case(32, causal=False, dtype=torch.float32),
    Case(29, causal=True, window=5, layout="contiguous"),
    Case(40, causal=False, window=7, dtype=torch.float32, Dv=6),
    Case(21, causal=True, softcap=2.0, Hq=3, Hkv=1, dtype=torch.float32, layout="contiguous"),  # MQA
    Case(16, causal=True, layout="contiguous", lse_grad=True, B=2),
    Case(19, causal=False, softcap=1.5, scale=0.3, lse_grad=True),
    Case(23, causal=True, window=1, dtype=torch.float32),
    Case(45, causal=True, window=9, Hq=4, Hkv=1, lse_grad=True),
    Case(9, causal=True, dtype=torch.float32, layout="contiguous"),  # shorter than 2W chunks on 4 ranks
)


GRAD_SEED_OFFSET = 10_000
"""The upstream gradients (dO, dlse) come from their own generator, seeded this far from the inputs'
(case seeds are 100 + i, so no case's gradients share a stream with another case's q, k, v)."""


def _inputs(case: Case, seed: int):
    """float64 q, k, v (`make_inputs`) and the upstream gradients dO (B, Hq, L, Dv), dlse (B, Hq, L) or None."""
    q, k, v = make_inputs(case.B, case.Hq, case.Hkv, case.L, case.L, case.D, case.Dv, seed=seed)
    g = torch.Generator().manual_seed(seed + GRAD_SEED_OFFSET)
    do = torch.randn(case.B, case.Hq, case.L, case.Dv, generator=g, dtype=torch.float64)
    dl = torch.randn(case.B, case.Hq, case.L, generator=g, dtype=torch.float64) if case.lse_grad else None
    return q, k, v, do, dl


def _opts(case: Case) -> dict:
    return dict(causal=case.causal, window=case.window, softcap=case.softcap, scale=case.scale)


def _naive(q, k, v, do, dl, case: Case, dtype):
    """Output, lse and gradients of the naive backend on the whole sequence, in `dtype`."""
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    res = attention(q, k, v, return_lse=True, backend="naive", **_opts(case))
    loss = (res.output * do.to(dtype)).sum()
    if dl is not None:
        loss = loss + (torch.where(torch.isfinite(res.lse), res.lse, 0) * dl.to(res.lse.dtype)).sum()
    loss.backward()
    return res.output.detach(), res.lse.detach(), q.grad, k.grad, v.grad


def _check(name: str, got, want64, naive, dtype, failures: list) -> None:
    err = max_error(got, want64)
    tol = tolerance(dtype, max_error(naive, want64))
    if not err <= tol:
        failures.append(f"{name}: error {err:.3g} > tolerance {tol:.3g}")


def attention_cases(rank: int, world: int) -> list[str]:
    failures: list[str] = []
    for i, case in enumerate(CASES):
        label = f"case {i} {case} W={world}"
        q, k, v, do, dl = _inputs(case, seed=100 + i)
        o64, lse64, gq64, gk64, gv64 = (torch.from_numpy(a) for a in spec_with_grads(q, k, v, do, dl, **_opts(case)))
        naive = _naive(q, k, v, do, dl, case, case.dtype)
        sq, sk, sv = (shard(t.to(case.dtype), layout=case.layout) for t in (q, k, v))
        leaves = [t.tensor.requires_grad_() for t in (sq, sk, sv)]
        with count_traffic() as traffic:
            res = ring_attention(sq, sk, sv, return_lse=True, **_opts(case))
            sdo = shard(do.to(case.dtype), layout=case.layout).tensor
            loss = (res.output.tensor * sdo).sum()
            if dl is not None:
                sdl = shard(dl.to(res.lse.tensor.dtype), layout=case.layout).tensor
                loss = loss + (torch.where(torch.isfinite(res.lse.tensor), res.lse.tensor, 0) * sdl).sum()
            loss.backward()
        full_out = unshard(res.output)
        full_lse = unshard(res.lse)
        grads = [unshard(t.like(leaf.grad)) for t, leaf in zip((sq, sk, sv), leaves, strict=True)]
        for name, got, want, base in (
            ("output", full_out, o64, naive[0]),
            ("lse", full_lse, lse64, naive[1]),
            ("dq", grads[0], gq64, naive[2]),
            ("dk", grads[1], gk64, naive[3]),
            ("dv", grads[2], gv64, naive[4]),
        ):
            _check(f"{label} {name}", got, want, base, case.dtype, failures)
        local_pad = shard(q, layout=case.layout).positions >= case.L
        if bool(local_pad.any()) and not (
            bool(torch.isinf(res.lse.tensor[..., local_pad]).all())
            and float(res.output.tensor.detach()[..., local_pad, :].abs().max()) == 0.0
        ):
            failures.append(f"{label}: padded query rows must have lse -inf and output 0")
        expect = _expected_forward_bytes(case, world, rank)
        if traffic.forward != expect:
            failures.append(f"{label}: sent {traffic.forward} bytes forward, plan says {expect}")
    return failures


def _expected_forward_bytes(case: Case, world: int, rank: int) -> int:
    Lr = padded_length(case.L, world, case.layout) // world
    plan = RingPlan(world, Lr, case.layout, Rule(case.causal, case.window, case.L))
    row_bytes = case.B * case.Hkv * (case.D + case.Dv) * torch.finfo(case.dtype).bits // 8
    return plan.elements_sent(rank) * row_bytes


def roundtrip_and_mismatch(rank: int, world: int) -> list[str]:
    """shard/unshard round trip; ranks that disagree on shapes all get the same ValueError."""
    failures: list[str] = []
    x = torch.arange(2 * 3 * 13 * 4, dtype=torch.float32).view(2, 3, 13, 4)
    for layout in ("zigzag", "contiguous"):
        if not torch.equal(unshard(shard(x, layout=layout)), x):
            failures.append(f"unshard(shard(x)) != x for {layout}")
    D = 8 if rank == 0 else 4
    q = torch.randn(1, 2, 4, D)
    try:
        ring_attention(q, q, q, causal=True)
        failures.append("mismatched D across ranks did not raise")
    except ValueError as e:
        if "rank 1 has 4" not in str(e):
            failures.append(f"mismatch error does not name rank 1's value: {e}")
    q = torch.randn(1, 2, 4, 8, dtype=torch.float32 if rank == 0 else torch.float64)
    try:
        ring_attention(q, q, q)
        failures.append("mismatched dtype across ranks did not raise")
    except ValueError as e:
        if "dtype" not in str(e):
            failures.append(f"dtype mismatch error does not say dtype: {e}")
    return failures


def train_step_case(rank: int, world: int) -> list[str]:
    """One context-parallel step of a DecoderLM, through its public arguments (`model(shard(ids), group=...)`
    inside `train_step`), equals one process's step: the loss and every parameter's gradient."""
    from selfattn.model.data import next_token_loss
    from selfattn.model.decoder import DecoderConfig, DecoderLM
    from selfattn.model.train.parallel import train_step

    failures: list[str] = []
    cfg = DecoderConfig(vocab_size=40, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, max_len=64)
    pad_id = 0
    g = torch.Generator().manual_seed(7)
    batch = torch.randint(1, cfg.vocab_size, (2, 28), generator=g)  # L = 27: not a multiple of 2W
    batch[1, 20:] = pad_id
    for layout in ("zigzag", "contiguous"):
        torch.manual_seed(3)
        single = DecoderLM(cfg).double()
        torch.manual_seed(3)
        model = DecoderLM(cfg).double()
        loss1 = next_token_loss(single(batch[:, :-1]), batch, pad_id)
        loss1.backward()
        loss = train_step(model, batch, pad_id, layout=layout)
        if abs(loss - loss1.item()) > TOL["float64_model_loss"]:
            failures.append(f"{layout}: loss {loss!r} != single-process {loss1.item()!r}")
        for (name, p1), (_, p) in zip(single.named_parameters(), model.named_parameters(), strict=True):
            err = float((p1.grad - p.grad).abs().max())
            if not err <= TOL["float64_grad"]:
                failures.append(f"{layout}: grad of {name} differs by {err:.3g}")
    return failures


def decoder_case(rank: int, world: int) -> list[str]:
    """DecoderLM and MultiHeadSelfAttention on this rank's rows, through their public arguments, give this
    rank's rows of one process's result: logits of Sharded ids (B, Lr) and (Lr,); the attention module's
    output and gradients (input and weights), causal and not, GQA; a group of another size is refused."""
    from selfattn.distributed import ContextParallel, Sharded
    from selfattn.model.decoder import DecoderConfig, DecoderLM
    from selfattn.modules import MultiHeadSelfAttention

    failures: list[str] = []
    torch.manual_seed(5)
    model = DecoderLM(DecoderConfig(vocab_size=31, d_model=16, n_layers=2, n_heads=2, max_len=40)).double().eval()
    ids = torch.randint(0, 31, (2, 19), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        want = model(ids)
    for layout in ("zigzag", "contiguous"):
        with torch.no_grad():
            got = unshard(model(shard(ids, layout=layout, dim=1)))
            one_row = unshard(model(shard(ids[1], layout=layout, dim=0)))
        for name, a, b in (("(B, L)", got, want), ("(L,)", one_row, want[1])):
            err = float((a - b).abs().max())
            if not err <= TOL["float64"]:
                failures.append(f"DecoderLM {layout} {name}: logits differ by {err:.3g}")
    for n_kv_heads, causal in ((None, True), (1, False)):
        torch.manual_seed(8)
        mha = MultiHeadSelfAttention(12, 4, n_kv_heads, causal=causal).double()
        x = torch.randn(2, 13, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
        dy = torch.randn(2, 13, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(10))
        xa = x.clone().requires_grad_()
        (mha(xa) * dy).sum().backward()
        want_grads = [xa.grad] + [p.grad.clone() for p in mha.parameters()]
        mha.zero_grad()
        sx = shard(x, dim=1)
        leaf = sx.tensor.clone().requires_grad_()
        y = mha(leaf, context_parallel=ContextParallel.of(sx))
        (y * shard(dy, dim=1).tensor).sum().backward()
        got_grads = [unshard(sx.like(leaf.grad))] + [p.grad.clone() for p in mha.parameters()]
        for p in got_grads[1:]:
            torch.distributed.all_reduce(p)  # each rank holds its rows' share of dW
        label = f"MultiHeadSelfAttention n_kv_heads={n_kv_heads} causal={causal}"
        err = float((unshard(sx.like(y.detach())) - mha(x).detach()).abs().max())
        if not err <= TOL["float64"]:
            failures.append(f"{label}: output differs by {err:.3g}")
        for (name, _), a, b in zip([("x", None), *mha.named_parameters()], got_grads, want_grads, strict=True):
            err = float((a - b).abs().max())
            if not err <= TOL["float64"]:
                failures.append(f"{label}: grad of {name} differs by {err:.3g}")
    try:
        ContextParallel.of(Sharded(torch.zeros(1, 4), 7, "zigzag", 1, world + 1, rank))
        failures.append("a Sharded of another world size was not refused")
    except ValueError as e:
        if f"sharded over {world + 1} ranks" not in str(e):
            failures.append(f"world mismatch error does not name the sizes: {e}")
    return failures


def group_two(rank: int, world: int) -> list[str]:
    return (
        roundtrip_and_mismatch(rank, world)
        + sweep(rank, world)
        + attention_cases(rank, world)
        + train_step_case(rank, world)
        + decoder_case(rank, world)
        + train_entry_point(rank, world)
    )


def group_three(rank: int, world: int) -> list[str]:
    return sweep(rank, world) + attention_cases(rank, world)


def group_four(rank: int, world: int) -> list[str]:
    return (
        roundtrip_and_mismatch(rank, world)
        + sweep(rank, world)
        + attention_cases(rank, world)
        + decoder_case(rank, world)
    )


def group_five(rank: int, world: int) -> list[str]:
    return sweep(rank, world) + attention_cases(rank, world)


def fails_mid_call(rank: int, world: int, victim: int, how: str) -> str:
    """The victim dies (SIGKILL) or hangs inside ring_attention, after the metadata check and before
    its first block goes out; the others must raise RankFailure naming a rank, not hang. "die_first": the others
    post their first blocks only after the victim died, so posting fails (a batch to two peers: which one?)."""
    from selfattn.distributed import comm

    original = comm.Exchange.post
    if rank == victim:

        def post_then_fail(self):
            if how in ("die", "die_first"):
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(HANG_S)
            original(self)

        comm.Exchange.post = post_then_fail
    elif how == "die_first":  # the others post only once the victim is gone: posting itself fails

        def post_late(self):
            time.sleep(LATE_S)
            original(self)

        comm.Exchange.post = post_late
    q = torch.randn(1, 2, 8, 4)
    started = time.monotonic()
    try:
        ring_attention(q, q, q, causal=True)
    except RankFailure as e:
        return f"{time.monotonic() - started:.1f}|{e.rank}|{e}"
    return "no error"


HANG_S = 60.0
"""How long a hanging victim sleeps: longer than the test's timeout."""
LATE_S = 2.0
"""How long the survivors of "die_first" wait before posting: the victim's connections are closed by then."""


def train_entry_point(rank: int, world: int) -> list[str]:
    """The torchrun entry point's loop, a few steps on a tiny model: finite losses, equal on every
    rank, falling; every rank sent bytes."""
    from selfattn.model.train.parallel import parse_args, train

    args = parse_args(
        [
            "--seq-len",
            "61",
            "--steps",
            "4",
            "--sentences",
            "200",
            "--d-model",
            "16",
            "--heads",
            "2",
            "--layers",
            "1",
            "--lr",
            "0.01",
        ]
    )
    _, _, rows = train(args)
    losses = [r["loss"] for r in rows]
    failures = []
    if not all(math.isfinite(x) for x in losses) or not losses[-1] < losses[0]:
        failures.append(f"train losses not finite and falling: {losses}")
    if not all(r["bytes_sent"] > 0 for r in rows):
        failures.append(f"no bytes sent: {rows}")
    gathered = [None] * world
    torch.distributed.all_gather_object(gathered, losses)
    if any(g != losses for g in gathered):
        failures.append(f"ranks report different losses: {gathered}")
    return failures
