"""Surface "ring": ring attention in real process groups of 2 … 5 ranks (windows, padding, sinks, ALiBi).

Random calls with sliding windows from one position to past the whole sequence (so a window spans
0 … W − 1 ranks) and two-sided windows (left, right) (either side unbounded, up to past the sequence),
lengths from 1 to 3·2W (whole ranks holding nothing but padding), both layouts, causal or not, GQA,
softcap, sinks, ALiBi slopes, float64 and float32, forward and backward; hostile arguments (bad windows,
window pairs with negatives, bad sinks / slopes: shapes, dtypes, NaN, inf, slopes that need a gradient,
segments; lengths; ranks that disagree on the window, the sinks or the slopes); a DecoderLM on
mostly-padding shards.

Every rank checks its own rows against the float64 spec and its gradients (`selfattn.reference`
through tests/distributed/spec_grads.py): output, lse, dq, and dk / dv of the K/V rows it owns, and the
sinks' gradient (the all_reduce of every rank's share).
One spawned group per world size runs all its cases; a case that crashes or hangs a rank breaks the
group, so the group ends there (every rank stops at its first crash, the others time out with
RankFailure) and a fresh group starts at the next case. A group that does not answer at all within
GROUP_WAIT_S counts its current case as a hang.
"""

from __future__ import annotations

import random
from pathlib import Path

from ...tolerances import TOL
from ..tally import Tally

WORLDS = (2, 3, 4, 5)
CASES_PER_WORLD = 48
"""Random attention cases per world size (plus the named ones below)."""
SEED = 18
GROUP_TIMEOUT_S = 8.0
"""The process group's timeout: how long a survivor waits for a rank that crashed before it raises."""
GROUP_WAIT_S = 420.0
"""The most one group may take, start-up included, before its unanswered case counts as a hang."""
MAX_RESTARTS = 6
"""Fresh groups per world size after broken ones; the cases left after that are counted as hangs."""
BROKE = "(left the ring) "
"""Starts the detail of a wrong result after which a rank stops: it raised mid-call, the others may wait."""
RING_TOL = {dtype: TOL[f"hostile_{dtype}"] for dtype in ("float64", "float32")}
"""Largest |got − spec| per dtype (scaled by the size of the spec's values, at least 1): tests/tolerances.py."""

NAMED = [
    # windows wider than one rank's chunk (wrong outputs, no error)
    dict(world=2, layout="contiguous", L=8, causal=True, window=5),
    dict(world=3, layout="contiguous", L=6, causal=True, window=3),
    dict(world=3, layout="zigzag", L=12, causal=True, window=5),
    dict(world=4, layout="zigzag", L=16, causal=True, window=6),
    # mostly padding, windows on 5 ranks (crashes, then hangs)
    dict(world=3, layout="zigzag", L=2, causal=False, window=None),
    dict(world=5, layout="zigzag", L=7, causal=True, window=2),
    dict(world=5, layout="contiguous", L=7, causal=False, window=2),
    dict(world=5, layout="zigzag", L=1, causal=False, window=None),
    dict(world=4, layout="contiguous", L=3, causal=True, window=100),
    # two-sided windows make blocks after a rank's rows visible; sinks once per row; ALiBi globally
    dict(world=2, layout="contiguous", L=8, causal=False, window=(1, 4), sinks=True),
    dict(world=3, layout="zigzag", L=12, causal=False, window=(None, 2), alibi=True),
    dict(world=4, layout="zigzag", L=5, causal=False, window=(0, 0), sinks=True, alibi=True),
]
TENSOR = "tensor"
"""Marks an argument the worker builds: (TENSOR, values, dtype name[, requires_grad])."""
BAD_ARGS = [
    ("window=0", {"window": 0}),
    ("window=-2", {"window": -2}),
    ("window=True", {"window": True}),
    ("window=2.0", {"window": 2.0}),
    ("window='3'", {"window": "3"}),
    ("seq_len=0", {"seq_len": 0}),
    ("seq_len past the rows", {"seq_len": 10**6}),
    ("seq_len=True", {"seq_len": True}),
    ("layout='diagonal'", {"layout": "diagonal"}),
    ("causal='yes'", {"causal": "yes"}),
    ("window=(2, -2)", {"window": (2, -2)}),  # -1 is unbounded (FlashAttention's convention)
    ("window=(-3, 0)", {"window": (-3, 0)}),
    ("window=(1, 2, 3)", {"window": (1, 2, 3)}),
    ("window=(1.5, 2)", {"window": (1.5, 2)}),
    ("window=('a', None)", {"window": ("a", None)}),
    ("window=(True, 1)", {"window": (True, 1)}),
    ("sinks of shape (3,)", {"sinks": (TENSOR, [0.0, 1.0, 2.0], "float64")}),
    ("sinks of shape (2, 1)", {"sinks": (TENSOR, [[0.0], [1.0]], "float64")}),
    ("sinks of dtype int64", {"sinks": (TENSOR, [0, 1], "int64")}),
    ("sinks with NaN", {"sinks": (TENSOR, [0.0, float("nan")], "float64")}),
    ("sinks with inf", {"sinks": (TENSOR, [float("inf"), 0.0], "float64")}),
    ("sinks as a list", {"sinks": [0.0, 1.0]}),
    ("alibi of shape (1,)", {"alibi": (TENSOR, [0.5], "float64")}),
    ("alibi of dtype bool", {"alibi": (TENSOR, [True, False], "bool")}),
    ("alibi with -inf", {"alibi": (TENSOR, [0.5, float("-inf")], "float64")}),
    ("alibi that needs a gradient", {"alibi": (TENSOR, [0.5, 0.25], "float64", True)}),
    ("segments", {"segments": (TENSOR, [[0, 0]], "int64")}),
]


def _draw(rng: random.Random, world: int) -> dict:
    longest = 3 * 2 * world
    L = rng.choice([rng.randint(1, world), rng.randint(1, longest), rng.randint(longest // 2, longest)])
    window = rng.choice([None, 1, 2, rng.randint(1, L + 2), L, L + rng.randint(1, 50), 10**9, "pair", "pair"])
    if window == "pair":
        sides = [None, 0, 1, rng.randint(0, L + 2), L + rng.randint(1, 50)]
        window = (rng.choice(sides), rng.choice(sides))
    G = rng.choice([1, 1, 2])
    Hkv = rng.choice([1, 2])
    return dict(
        world=world,
        layout=rng.choice(["zigzag", "contiguous"]),
        L=L,
        causal=rng.random() < 0.5,
        window=window,
        softcap=rng.choice([None, None, None, 2.0]),
        dtype=rng.choice(["float64", "float64", "float32"]),
        Hq=Hkv * G,
        Hkv=Hkv,
        D=rng.randint(1, 5),
        Dv=rng.randint(1, 5),
        B=rng.choice([1, 1, 2]),
        backend=rng.choice(["auto", "auto", "naive", "tiled"]),
        sinks=rng.random() < 0.4,
        alibi=rng.random() < 0.4,
    )


def cases(world: int) -> list[dict]:
    """The cases of one world size: named regressions, random calls, bad arguments, a model."""
    rng = random.Random(SEED * 100 + world)
    out = [dict(c, kind="attention") for c in NAMED if c["world"] == world]
    out += [dict(_draw(rng, world), kind="attention") for _ in range(CASES_PER_WORLD)]
    out += [dict(world=world, kind="bad", name=name, args=args) for name, args in BAD_ARGS]
    out += [dict(world=world, kind="disagree", on=on) for on in ("window", "sinks", "alibi")]
    out += [dict(world=world, kind="model", L=L) for L in (1, 2, world + 1, 3 * world)]
    return out


def label(case: dict) -> str:
    kind = case["kind"]
    if kind == "attention":
        keys = ("layout", "L", "causal", "window", "softcap", "sinks", "alibi", "dtype", "Hq", "Hkv", "D", "Dv", "B")
        keys += ("backend",)
        return f"ring W={case['world']} " + " ".join(f"{k}={case[k]}" for k in keys if k in case)
    if kind == "bad":
        return f"ring W={case['world']} bad argument {case['name']}"
    if kind == "disagree":
        return f"ring W={case['world']} ranks pass different {case['on']}"
    return f"ring W={case['world']} DecoderLM on a shard of L={case['L']} (mostly padding)"


def _merge(per_rank: list[list[tuple[str, str]]]) -> list[tuple[str, str]]:
    """One (outcome, detail) per case from every rank's: the same outcome on all, or the worst."""
    n = min(len(r) for r in per_rank)
    merged = []
    for i in range(n):
        outcomes = [r[i] for r in per_rank]
        kinds = {o for o, _ in outcomes}
        if len(kinds) == 1:
            merged.append(outcomes[0])
            continue
        for worst in ("traceback", "hang", "wrong"):
            hit = [(rank, d) for rank, (o, d) in enumerate(outcomes) if o == worst]
            if hit:
                merged.append((worst, f"rank {hit[0][0]}: {hit[0][1]}"))
                break
        else:
            merged.append(("wrong", f"ranks disagree: {sorted(kinds)}"))
    return merged


def run(work: Path) -> Tally:
    from selfattn.distributed.spawn import collect, start

    tally = Tally("ring attention (2-5 processes)")
    for world in WORLDS:
        todo = cases(world)
        first, restarts = 0, 0
        while first < len(todo):
            if restarts > MAX_RESTARTS:
                for case in todo[first:]:
                    tally.record("hang", label(case), "not run: too many broken groups before it")
                break
            procs, results = start(world, f"{__package__}.worker:work", args=(first,), timeout_s=GROUP_TIMEOUT_S)
            got = collect(procs, results, world, wait_s=GROUP_WAIT_S)
            per_rank = [got[r][1] if r in got and got[r][0] == "ok" else [] for r in range(world)]
            errors = {r: got[r][1] for r in got if got[r][0] == "error"}
            merged = _merge(per_rank) if all(per_rank) else []
            for offset, (outcome, detail) in enumerate(merged):
                tally.record(outcome, label(todo[first + offset]), detail)
            first += len(merged)
            broke = bool(merged) and (merged[-1][0] == "traceback" or BROKE in merged[-1][1])
            if first < len(todo) and not broke:
                why = f"group ended without an answer for it: {errors or 'no answer'}"
                tally.record("hang", label(todo[first]), str(why)[:300])
                first += 1
            if first < len(todo):
                restarts += 1
    return tally
