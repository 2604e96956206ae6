"""The page's packing when it is made fast: heads computed together, long base64 joined in after the JSON encoding
— each gives the numbers and bytes the slow way gave (the arrays compressed on threads and byte planes stored:
test_codec.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from selfattn.explainer.views import codec, packing, report
from tests.explainer.documents import explained
from tests.tolerances import TOL

G, L, D = 3, 100, 8


def _heads(seed: int = 0) -> list:
    """G heads of one key/value group (one K, V; their own Q), causal, with the lse their scores give."""
    g = np.random.default_rng(seed)
    k, v = g.normal(size=(L, D)), g.normal(size=(L, D))
    visible = np.tril(np.ones((L, L), dtype=bool))
    rule = {"scale": D**-0.5, "softcap": None, "sinks": None, "alibi": None}
    heads = []
    for h in range(G):
        q = g.normal(size=(L, D)) * (h + 1)
        masked = np.where(visible, q @ k.T * rule["scale"], -np.inf)
        lse = torch.logsumexp(torch.from_numpy(masked), dim=-1).numpy()
        arrays = {"q": q, "k": k, "v": v, "lse": lse}
        heads.append(packing._Head({"kv_head": 0}, arrays, visible, rule, apart=False))
    return heads


def test_heads_of_a_group_are_packed_as_each_alone():
    """Stacking a group's rows into one `head_stages` call and compressing on threads give every head the arrays
    it gets alone: a mix-up of heads or of arrays fails here."""
    heads = _heads()
    assert packing._groups(heads) == [list(range(G))]
    batch: list = []
    together = packing._page_arrays(heads, batch)
    codec.compress(batch)
    for head, (shown, weights) in zip(heads, together, strict=True):
        [(alone, alone_weights)] = packing._page_arrays([head], None)
        assert torch.equal(weights, alone_weights)
        assert shown.keys() == alone.keys()
        for name in shown:
            np.testing.assert_array_equal(packing.unpack(shown[name]), packing.unpack(alone[name]), err_msg=name)
    first, second = (packing.unpack(shown["weights"]) for shown, _ in together[:2])
    assert not np.array_equal(first, second)  # the heads differ, so equality above means something


def test_a_head_with_its_own_rule_or_other_keys_is_not_stacked():
    heads = _heads()
    heads[1].rule = dict(heads[1].rule, scale=1.0)
    heads[2].arrays = dict(heads[2].arrays, k=heads[2].arrays["k"] + 1)
    assert packing._groups(heads) == [[0], [1], [2]]
    heads = _heads()
    heads[1].apart = True
    heads[2].rule = dict(heads[2].rule, sinks=0.5)
    assert packing._groups(heads) == [[0], [1], [2]]


def _sorted_keys(w: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The stepper's keys by a stable descending sort of each row (the definition)."""
    out = np.full((w.shape[0], packing.TOP_KEYS + 2), w.shape[1], dtype=np.int64)
    for r in range(w.shape[0]):
        top = np.argsort(-w[r], kind="stable")[: packing.TOP_KEYS]
        keys = sorted(set(top.tolist()) | {0, int(rows[r])})
        out[r, : len(keys)] = keys
    return out


@pytest.mark.parametrize("kind", ["random", "ties", "causal", "zeros"])
def test_shown_keys_are_the_top_keys_of_a_stable_sort(kind):
    g = np.random.default_rng(2)
    w = g.random((2 * L, L))
    if kind == "ties":
        w = np.round(w * 4) / 4
    elif kind == "causal":
        w = np.round(np.tril(np.tile(w[:L], (2, 1))), 2)
    elif kind == "zeros":
        w[:] = 0.0
    rows = np.tile(np.arange(L), 2)  # two heads' rows stacked
    np.testing.assert_array_equal(packing._shown_keys(w, rows), _sorted_keys(w, rows))
    np.testing.assert_array_equal(packing.shown_keys(torch.from_numpy(w[:L])).numpy(), _sorted_keys(w[:L], rows[:L]))


def test_the_data_block_joins_base64_back_exactly():
    blob = codec.encode(np.arange(4000, dtype=np.float32), "f32")
    data = {
        "doc": {
            "layers": [{"x": blob, "heads": [blob, {"b64": "</script>&" * 100}]}],
            "text": report.text("page.page_title", "zh"),
        },
        "evil": "</script><script>x()</script>",
        "short": {"b64": "QUJD"},
    }
    text = report._json_for_script(data)
    assert json.loads(text) == data
    assert "<" not in text and ">" not in text and "&" not in text
    want = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    assert text == want.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def test_a_layer_measured_by_export_is_read_back_by_the_page_and_one_changed_since_is_packed_afresh(monkeypatch):
    """export measures a layer by packing it (`layer_bytes`); the page's `pack` reads that back: the bytes packing
    afresh gives, without running the stages again. A number changed in place in between is packed afresh."""
    import copy

    from tests.explainer.tiny import tiny_explainer

    doc = explained(tiny_explainer(), "一只蓝色怪兽走进森林", layers=[0, 1], layer=1, head=0)
    runs = []
    stages = packing.head_stages
    monkeypatch.setattr(packing, "head_stages", lambda *a, **k: runs.append(1) or stages(*a, **k))
    fresh = json.dumps(packing.pack(copy.deepcopy(doc)))  # no store: every layer packed afresh
    assert runs
    store = packing.PackedLayers()  # a Session's
    sizes = [packing.layer_bytes(layer, l, store) for l, layer in enumerate(doc["layers"])]  # as export measures
    runs.clear()
    page = packing.pack(doc, store)
    assert json.dumps(page) == fresh and not runs  # the same page, the stages not run again
    without_types = [{k: v for k, v in layer.items() if k != "types"} for layer in page["layers"]]
    assert sizes == [
        len(json.dumps(layer, ensure_ascii=False, separators=(",", ":")).encode()) for layer in without_types
    ]
    page["layers"][1]["heads"][0]["q"]["b64"] = "spoiled"  # a caller's copy: what is kept stays as it was
    assert json.dumps(packing.pack(doc, store)) == fresh and not runs
    assert json.dumps(packing.pack(doc, packing.PackedLayers())) == fresh and runs  # another owner's store: packed
    runs.clear()
    doc["layers"][1]["heads"][0]["q"][0][0] += 1.0
    changed = packing.pack(doc, store)
    assert runs  # packed afresh
    q = packing.unpack(changed["layers"][1]["heads"][0]["q"])
    assert q[0, 0] == np.float16(doc["layers"][1]["heads"][0]["q"][0][0])  # the number as it is now, in float16
    assert json.dumps(changed["layers"][0]) == json.dumps(json.loads(fresh)["layers"][0])
    top = packing.layer_bytes(doc["layers"][0], 0, store, full=False)  # kept apart from the whole layer 0
    assert top < sizes[0] and packing.layer_bytes(doc["layers"][0], 0, store) == sizes[0]


def test_a_layer_packed_before_is_packed_afresh_through_another_stage_function(monkeypatch):
    """The store is keyed by the stage function too: a page made while `head_stages` is replaced (the browser test
    that shifts every stage in Python) shows the replaced numbers, not those of a page of the same layer before."""
    from tests.explainer.tiny import tiny_explainer

    doc = explained(tiny_explainer(), "一只蓝色怪兽走进森林", layers=[1], layer=1, head=0)
    store = packing.PackedLayers()
    before = packing.unpack(packing.pack(doc, store)["layers"][1]["heads"][0]["key_stages"])
    stages = packing.head_stages
    monkeypatch.setattr(
        packing, "head_stages", lambda *a, **k: stages(*a, **k) | {"scores": stages(*a, **k)["scores"] + 100}
    )
    after = packing.unpack(packing.pack(doc, store)["layers"][1]["heads"][0]["key_stages"])
    np.testing.assert_allclose(after[0], before[0] + 100, rtol=0, atol=TOL["float64_short_sum"])
