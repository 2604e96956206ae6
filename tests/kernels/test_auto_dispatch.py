"""backend="auto": the cost model's choices on the cases it was calibrated for, and its pieces."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from selfattn import kernels, masks, reference
from selfattn.kernels import cost
from selfattn.request import build_request

from ..helpers import shaped_request as request


@pytest.fixture(autouse=True)
def native_not_built(monkeypatch):
    """The choices below are those of a machine where the native kernel is not compiled yet (as on a
    fresh install: "auto" never compiles); `native_marked_built` sets the other state."""
    monkeypatch.setattr(kernels.native, "is_built", lambda: False)


@pytest.fixture(autouse=True)
def no_half_gemm(monkeypatch):
    """The choices below are those of a CPU without a bfloat16 GEMM (the calibration's AVX2 EPYC), whatever this
    one has; `test_bfloat16_goes_where_the_cpu_runs_it_fastest` sets both."""
    from selfattn.kernels import cpu

    monkeypatch.setattr(cpu, "half_gemm_isa", lambda dtype: None)


@pytest.fixture
def native_marked_built(monkeypatch):
    """Pretend the native kernel is built (nothing is compiled); not the session's real `native_built`."""
    monkeypatch.setattr(kernels.native, "is_built", lambda: True)
    monkeypatch.setattr(kernels.native, "unavailable_reason", lambda: None)


@pytest.mark.parametrize(
    "kwargs, want",
    [
        (dict(Lq=4096, Lk=4096, causal=True), "sdpa"),  # PyTorch's flash kernel skips blocks too
        (dict(Lq=4096, Lk=4096), "sdpa"),
        (dict(Lq=2048, Lk=2048, Hkv=2, causal=True), "sdpa"),
        (dict(Lq=8192, Lk=8192, causal=True, window=256), "tiled"),  # O(N·w) against a dense O(N²) mask
        (dict(Lq=1024, Lk=4096, causal=True), "sdpa"),  # chunked prefill: close; SDPA holds up busy
        (dict(Lq=1, Lk=16384, Hq=32, Hkv=4, causal=True), "tiled"),  # GQA decoding: K/V read once per group
        (dict(Lq=1, Lk=1024, causal=True), "sdpa"),
        (dict(Lq=2048, Lk=2048, causal=True, return_lse=True), "tiled"),  # SDPA has no lse; naive is O(N²)
        (dict(Lq=1024, Lk=1024, causal=True, softcap=30.0), "tiled"),
        (dict(Lq=8, Lk=8, causal=True, softcap=30.0), "naive"),  # tiny: naive's one pass is cheaper
        (dict(Lq=64, Lk=64, return_weights=True), "naive"),  # nothing else returns weights
        (dict(Lq=4096, Lk=4096, causal=True, window=256, grad=True), "tiled"),
        # scripts/calibrate_dtypes.py, idle: SDPA's bf16 backward runs at 0.18× its fp32 rate (838 ms against
        # tiled's 206 ms at L=2048); its bf16 forward and fp64 keep their place
        (dict(Lq=2048, Lk=2048, causal=True, grad=True, dtype=torch.bfloat16), "tiled"),
        (dict(Lq=2048, Lk=2048, causal=True, dtype=torch.bfloat16), "sdpa"),
        (dict(Lq=2048, Lk=2048, causal=True, dtype=torch.float64), "sdpa"),
    ],
)
def test_auto_chooses_by_estimated_speed(kwargs, want):
    assert kernels.choose(request(**kwargs), "auto").name == want


@pytest.mark.parametrize(
    "kwargs, want",
    [
        (dict(Lq=4096, Lk=4096, causal=True), "native"),  # measured 0.92× SDPA's time
        (dict(Lq=8192, Lk=8192, causal=True, window=256), "native"),  # 8× faster than flex, 25× than SDPA
        (dict(Lq=2048, Lk=2048, causal=True, grad=True), "native"),
        # one decoding step without GQA: native reads K and V faster (its few-row loops, 0.8× SDPA's time over
        # 4,096 keys and more), SDPA's fixed cost is the smaller, so SDPA over few keys (native 1.05–1.12× its time
        # at Lk = 512, 0.95–0.99× at 1,024)
        (dict(Lq=1, Lk=512, causal=True), "sdpa"),
        (dict(Lq=1, Lk=1024, causal=True), "native"),
        (dict(Lq=1, Lk=4096, causal=True), "native"),
        # under GQA native reads a kv head once for its G query heads, SDPA once per query head (from the cache
        # while a kv head's K and V fit it): native 0.84× SDPA's time at Lk = 1024 with Hkv = 1, 0.47× at 16,384;
        # at 512 keys SDPA's smaller fixed cost still wins (native 1.07–1.11× its time)
        (dict(Lq=1, Lk=16384, Hkv=1, causal=True), "native"),
        (dict(Lq=1, Lk=1024, Hkv=1, causal=True), "native"),
        (dict(Lq=1, Lk=512, Hkv=1, causal=True), "sdpa"),
        (dict(Lq=2048, Lk=2048, causal=True, return_lse=True), "native"),
        (dict(Lq=64, Lk=64, return_weights=True), "naive"),  # still the only one with weights
        (dict(Lq=2048, Lk=2048, causal=True, dtype=torch.float64), "native"),  # measured 0.90× SDPA
        (dict(Lq=2048, Lk=2048, causal=True, grad=True, dtype=torch.bfloat16), "native"),  # 0.18× SDPA's time
    ],
)
def test_auto_takes_native_once_it_is_built(native_marked_built, kwargs, want):
    assert kernels.choose(request(**kwargs), "auto").name == want


def test_auto_never_takes_an_unbuilt_native_kernel_and_says_why():
    r = request(Lq=4096, Lk=4096, causal=True)
    e = kernels.explain(r)
    assert e["choice"] == "sdpa"
    assert any("auto never waits on a compile" in why for why in e["backends"]["native"]["reasons"])
    assert kernels.choose(r, "auto").name == "sdpa"


def test_close_estimates_go_to_the_best_worst_case(monkeypatch):
    """Tiled and SDPA within CLOSE of each other: auto takes the one that holds up on busy cores."""
    r = request(Lq=4096, Lk=4096, causal=True)
    sdpa = cost.estimate_seconds(kernels.BACKENDS["sdpa"], r)
    tiled = kernels.BACKENDS["tiled"]
    monkeypatch.setattr(tiled, "cost", dataclasses.replace(tiled.cost, work=lambda req: (1, 1e12, sdpa * 0.95)))
    assert cost.estimate_seconds(tiled, r) < sdpa  # tiled 5 % faster idle
    assert kernels.choose(r, "auto").name == "sdpa"  # but 3× slower busy
    assert "busy cores" in kernels.explain(r)["why"]


def test_auto_keeps_naive_for_weights_even_when_slow():
    assert kernels.choose(request(Lq=2048, Lk=2048, causal=True, return_weights=True), "auto").name == "naive"


def test_off_the_cpu_sdpa_serves_plain_and_causal_and_flex_the_rest():
    assert kernels.choose(request(Lq=8192, Lk=8192, causal=True, device="meta"), "auto").name == "sdpa"
    assert kernels.choose(request(Lq=8192, Lk=8192, device="meta"), "auto").name == "sdpa"
    assert kernels.choose(request(Lq=8192, Lk=8192, causal=True, window=256, device="meta"), "auto").name == "flex"
    assert kernels.choose(request(Lq=256, Lk=256, softcap=3.0, device="meta"), "auto").name == "flex"


def test_no_backend_left_explains_every_refusal():
    r = request(Lq=64, Lk=64, return_weights=True, dropout_p=0.1)
    with kernels.budget(10):
        with pytest.raises(ValueError, match="no backend can serve.*sdpa: .*tiled: .*naive: "):
            kernels.choose(r, "auto")
        # every reason of every backend, not only the first: tiled lacks weights and dropout
        with pytest.raises(ValueError, match="tiled: it never returns attention weights.*no dropout"):
            kernels.choose(r, "auto")


@pytest.mark.parametrize("n_q, n_k", [(1, 1), (5, 5), (3, 8), (8, 3), (1, 9), (13, 13)])
@pytest.mark.parametrize("causal, window", [(False, None), (True, None), (True, 1), (True, 4), (False, 2), (True, 50)])
def test_visible_pairs_counts_the_visibility_rule(n_q, n_k, causal, window):
    want = int(reference.visibility(n_q, n_k, causal=causal, window=window).sum())
    assert cost.visible_pairs(n_q, n_k, causal=causal, window=window) == want


def test_tiled_work_counts_visited_tiles():
    tiles, pairs = kernels.tiled.Plan.of(request(Lq=1024, Lk=1024, causal=True), 256, 256).work()
    assert tiles == 10 and pairs == 10 * 256 * 256  # 4 + 3 + 2 + 1 tiles on and below the diagonal
    tiles, pairs = kernels.tiled.Plan.of(request(Lq=1, Lk=16384, causal=True), 256, 256).work()
    assert tiles == 1 and pairs == 16384  # one decoding step: one wide tile


def test_explain_gives_each_estimate_or_reasons_and_the_choice():
    r = request(Lq=2048, Lk=2048, causal=True, return_lse=True)
    e = kernels.explain(r)
    assert e["choice"] == kernels.choose(r, "auto").name == "tiled" and "smallest estimated time" in e["why"]
    assert e["backends"]["sdpa"] == {
        "supported": False,
        "seconds": None,
        "reasons": kernels.BACKENDS["sdpa"].not_supported_reasons(r),
        "path": None,
    }
    assert "log-sum-exp" in e["backends"]["sdpa"]["reasons"][0]
    for name in ("tiled", "naive"):
        assert e["backends"][name]["seconds"] == cost.estimate_seconds(kernels.BACKENDS[name], r) > 0
    assert e["request"]["Lq"] == 2048 and e["request"]["return_lse"] is True
    plan = e["plan"]
    assert (plan["block_q"], plan["block_k"], plan["query_blocks"], plan["key_blocks"]) == (1024, 256, 2, 8)
    assert plan["drawing"] == masks.draw_blocks(2048, 2048, 1024, 256, causal=True)
    assert json.loads(json.dumps(e)) == e  # plain data: a --json twin
    text = kernels.render(e)
    for part in (
        "Lq=2048",
        "sdpa",
        "cannot: it never returns the log-sum-exp",
        "choice   tiled",
        plan["drawing"].splitlines()[0],
    ):
        assert part in text


def test_explain_takes_attention_arguments_or_a_shape():
    q, k, v = (torch.zeros(1, 2, 5, 4) for _ in range(3))
    by_tensors = kernels.explain(dict(q=q, k=k, v=v, causal=True, return_weights=True))
    by_shape = kernels.explain(dict(B=1, Hq=2, Lq=5, D=4, causal=True, return_weights=True))
    assert by_tensors["request"] == by_shape["request"] and by_tensors["choice"] == by_shape["choice"] == "naive"
    assert kernels.explain(dict(Lq=64, D=8), backend="tiled")["choice"] == "tiled"
    with pytest.raises(ValueError, match="missing Lq"):
        kernels.explain(dict(D=8))
    with pytest.raises(TypeError, match="Request or a mapping"):
        kernels.explain([1, 2])
    with pytest.raises(ValueError, match="unknown backend 'flash'"):
        kernels.explain(dict(Lq=4, D=4), backend="flash")


def test_explain_with_no_backend_left_says_so():
    with kernels.budget(10):
        e = kernels.explain(dict(Lq=8, D=4, return_weights=True, dropout_p=0.1, softcap=1.0))
    assert e["choice"] is None and "no backend" in e["why"]
    assert len(e["backends"]["tiled"]["reasons"]) == 2 and len(e["backends"]["sdpa"]["reasons"]) == 2
    assert "choice   none" in kernels.render(e)


def test_capabilities_list_every_missing_feature():
    caps = kernels.Capabilities(
        returns_weights=False,
        returns_lse=False,
        softcap=False,
        dropout=False,
        dtypes=frozenset({torch.float64}),
        devices=frozenset({"cuda"}),
        window=False,
        gqa=False,
        bool_mask=False,
        notes={"softcap": "use backend='naive'"},
    )
    mask = torch.ones(64, 64, dtype=torch.bool)
    r = request(
        Lq=64,
        Lk=64,
        Hkv=2,
        causal=True,
        window=3,
        softcap=2.0,
        mask=mask,
        return_weights=True,
        return_lse=True,
        dropout_p=0.1,
    )
    reasons = caps.not_supported_reasons(r)
    for part in (
        "dtype torch.float32",
        "device cpu",
        "attention weights",
        "log-sum-exp",
        "softcap; use backend='naive'",
        "dropout",
        "bool mask",
        "sliding window",
        "grouped-query",
    ):
        assert sum(part in reason for reason in reasons) == 1, part
    assert len(reasons) == 9


def test_a_new_backend_is_one_class_and_a_registry_entry(monkeypatch):
    class Echo(kernels.Backend):
        name = "echo"
        capabilities = kernels.Capabilities(returns_weights=False, returns_lse=False, softcap=False, dropout=False)

        def forward(self, r):
            return kernels.Result(r.v.expand(r.B, r.Hq, r.Lk, r.Dv)[:, :, : r.Lq], None, None)

    monkeypatch.setitem(kernels.BACKENDS, "echo", Echo())
    import selfattn

    q = torch.zeros(1, 2, 3, 4)
    assert torch.equal(selfattn.attention(q, q, q + 1, backend="echo"), q + 1)
    e = kernels.explain(dict(q=q, k=q, v=q), backend="echo")
    assert e["choice"] == "echo" and e["backends"]["echo"]["seconds"] is None  # no cost entry: no estimate
    with pytest.raises(ValueError, match="backend 'echo' cannot serve this request: it has no softcap"):
        selfattn.attention(q, q, q, softcap=1.0, backend="echo")


@pytest.mark.parametrize(
    "segments, causal, window",
    [
        ([0] * 70 + [1] * 90 + [2] * 40, True, None),  # contiguous packing, causal
        ([0] * 50 + [1] * 100 + [2] * 50, False, (30, 20)),  # two-sided window inside segments
        ([0] * 20 + [1] * 20 + [0] * 20 + [2] * 30 + [1] * 10, False, None),  # ids that come back
    ],
)
def test_the_block_plan_draws_what_segments_hide(segments, causal, window):
    """Each drawn block against the dense visibility of batch item 0 (NumPy reference rule × same id), built
    here: '.' where nothing is visible, 'F' only where everything is and the segments are contiguous (ids that
    come back leave each segment's span holding others' keys: computed and masked, drawn P)."""
    from selfattn.kernels import dispatch
    from selfattn.kernels.tiled import TiledBackend

    seg = torch.tensor([segments, segments[::-1]])
    L, bq, bk = seg.shape[1], 32, 16
    r = build_request(**dispatch._shaped(dict(B=2, Hq=1, Lq=L, D=4, causal=causal, window=window, segments=seg)))
    drawing = dispatch._plan(r, TiledBackend(block_q=bq, block_k=bk))["drawing"]
    ids = np.array(segments)
    dense = reference.visibility(L, L, causal=causal, window=window) & (ids[:, None] == ids[None, :])
    contiguous = len(set(segments)) == 1 + sum(a != b for a, b in zip(segments[:-1], segments[1:], strict=True))
    rows = [row.split(" ") for row in drawing.splitlines()]
    assert len(rows) == -(-L // bq) and all(len(row) == -(-L // bk) for row in rows)
    for i, row in enumerate(rows):
        for j, char in enumerate(row):
            block = dense[i * bq : (i + 1) * bq, j * bk : (j + 1) * bk]
            if contiguous:
                assert char == ("." if not block.any() else "F" if block.all() else "P"), (i, j)
            else:  # spans hold other segments' keys: what the span covers is computed, masked by id
                assert char != "F" and (char == ".") <= (not block.any()) and block.any() <= (char == "P"), (i, j)
    text = kernels.render(kernels.explain(dict(B=2, Hq=1, Lq=L, D=4, causal=causal, window=window, segments=seg)))
    assert "segments=3+3 per batch item" in text and "native skips the hidden blocks" in text


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_explain_names_the_gemms_native_runs(dtype, native_marked_built):
    """bench --explain says which path native takes on this CPU: its half GEMM only where the CPU has one."""
    from selfattn.kernels import native

    e = kernels.explain(dict(B=1, Hq=2, Lq=64, D=16, causal=True, dtype=dtype))
    path = e["backends"]["native"]["path"]
    assert path.startswith(native.gemm_path(dtype)) and e["backends"]["native"]["supported"]
    assert path in kernels.render(e) and native.softmax_lanes() in path and "split-K" not in path
    if dtype == torch.bfloat16:
        assert path.startswith("bfloat16 GEMM") == native.has_half_gemm(dtype)
    assert e["backends"]["sdpa"]["path"] is None and json.loads(json.dumps(e)) == e


@pytest.mark.parametrize("hardware", [False, True])
def test_bfloat16_goes_where_the_cpu_runs_it_fastest(native_marked_built, monkeypatch, hardware):
    """Where the CPU has a bfloat16 GEMM (AVX512-BF16, AMX) SDPA's bf16 forward runs 2.6× its fp32 speed and
    native's 1.8× (Xeon with AMX: causal L=4096, SDPA 59 ms, native 87 ms, 1 thread), so the forward goes to SDPA;
    forward + backward stays native's (81 vs 95 ms). Without one, every kernel converts and native stays ahead."""
    from selfattn.kernels import cpu

    isa = "AMX-BF16" if hardware else None
    monkeypatch.setattr(cpu, "half_gemm_isa", lambda dtype: isa if dtype == torch.bfloat16 else None)
    forward = request(Lq=4096, Lk=4096, causal=True, dtype=torch.bfloat16)
    both = request(Lq=2048, Lk=2048, causal=True, grad=True, dtype=torch.bfloat16)
    assert kernels.explain(forward)["choice"] == ("sdpa" if hardware else "native")
    assert kernels.explain(both)["choice"] == "native"
    fp32 = request(Lq=4096, Lk=4096, causal=True)  # float32 is not a half dtype: untouched
    assert kernels.explain(fp32)["choice"] == "native"
    monkeypatch.setattr(kernels.native, "is_built", lambda: False)  # without native: SDPA 50 ms, tiled 109 ms
    assert kernels.explain(both)["choice"] == ("sdpa" if hardware else "tiled")
