"""backend="auto": the cost model's choices on the cases it was calibrated for, and its pieces."""

import pytest

from selfattn import kernels, reference
from selfattn.kernels import cost

from ..helpers import shaped_request as request


@pytest.mark.parametrize("kwargs, want", [
    (dict(Lq=4096, Lk=4096, causal=True), "sdpa"),                      # PyTorch's flash kernel skips blocks too
    (dict(Lq=4096, Lk=4096), "sdpa"),
    (dict(Lq=2048, Lk=2048, Hkv=2, causal=True), "sdpa"),
    (dict(Lq=8192, Lk=8192, causal=True, window=256), "tiled"),         # O(N·w) against a dense O(N²) mask
    (dict(Lq=1024, Lk=4096, causal=True), "tiled"),                     # chunked prefill: SDPA gets a dense mask
    (dict(Lq=1, Lk=16384, Hq=32, Hkv=4, causal=True), "tiled"),         # GQA decoding: K/V read once per group
    (dict(Lq=1, Lk=1024, causal=True), "sdpa"),
    (dict(Lq=2048, Lk=2048, causal=True, return_lse=True), "tiled"),      # SDPA has no lse; naive is O(N²)
    (dict(Lq=1024, Lk=1024, causal=True, softcap=30.0), "tiled"),
    (dict(Lq=8, Lk=8, causal=True, softcap=30.0), "naive"),             # tiny: naive's one pass is cheaper
    (dict(Lq=64, Lk=64, return_weights=True), "naive"),                   # nothing else returns weights
    (dict(Lq=4096, Lk=4096, causal=True, window=256, grad=True), "tiled"),
])
def test_auto_chooses_by_estimated_speed(kwargs, want):
    assert kernels.choose(request(**kwargs), "auto").name == want


def test_auto_keeps_naive_for_weights_even_when_slow():
    assert kernels.choose(request(Lq=2048, Lk=2048, causal=True, return_weights=True), "auto").name == "naive"


def test_off_the_cpu_auto_keeps_the_preference_order():
    r = request(Lq=8192, Lk=8192, causal=True, window=256, device="meta")
    assert kernels.choose(r, "auto").name == kernels.AUTO_ORDER[0] == "sdpa"
    assert kernels.choose(request(Lq=64, Lk=64, softcap=3.0, device="meta"), "auto").name == "tiled"


def test_no_backend_left_explains_every_refusal():
    r = request(Lq=64, Lk=64, return_weights=True, dropout_p=0.1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernels.naive, "WEIGHTS_BUDGET_BYTES", 10)
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
    assert tiles == 10 and pairs == 10 * 256 * 256     # 4 + 3 + 2 + 1 tiles on and below the diagonal
    tiles, pairs = kernels.tiled.Plan.of(request(Lq=1, Lk=16384, causal=True), 256, 256).work()
    assert tiles == 1 and pairs == 16384                # one decoding step: one wide tile
