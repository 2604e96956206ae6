"""The page's packing when it is made fast: heads computed together, long base64 joined in after the JSON encoding
— each gives the numbers and bytes the slow way gave (the byte planes' one zlib stream: test_codec.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from selfattn.explainer.views import codec, export, packing, report
from tests.explainer.documents import explanation

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
    """Stacking a group's rows into one `head_stages` call gives every head the arrays it gets alone: a mix-up of
    heads or of arrays fails here."""
    heads = _heads()
    assert packing._groups(heads) == [list(range(G))]
    together = packing._page_arrays(heads)
    for head, (shown, weights) in zip(heads, together, strict=True):
        [(alone, alone_weights)] = packing._page_arrays([head])
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


def test_each_layer_of_a_page_is_packed_once_from_its_trace(monkeypatch):
    """A held layer is packed straight from the Explanation's trace, once, also when the page's budget measures it
    (layers="auto" over the budget: the shown layer, then the nearest, packed until one does not fit, or is estimated
    not to: `FIT_SLACK`); its q is the trace's in float16."""
    from tests.explainer.tiny import tiny_explainer

    e = explanation(tiny_explainer(), "一只蓝色怪兽走进森林", layer=1, head=0)
    packed = []
    pack_layer = export.pack_layer
    monkeypatch.setattr(export, "pack_layer", lambda layer, **k: packed.append(layer) or pack_layer(layer, **k))
    doc = export.document(e)
    assert "omitted" not in doc and len(packed) == len(e.trace.layers)  # every layer fits: each packed once
    for l, layer in enumerate(e.trace.layers):
        q = packing.unpack(doc["layers"][l]["heads"][0]["q"])
        np.testing.assert_array_equal(q, layer.q[0].numpy().astype(np.float16))
    packed.clear()
    shown = packing.packed_bytes(pack_layer(e.trace.layers[1], full=True)[0])
    monkeypatch.setattr(export, "MAX_PAGE_BYTES", shown + 100)  # room for the shown layer only
    doc = export.document(e)
    assert doc["omitted"]["held"] == [1] and doc["layers"][0]["omitted"]
    assert [id(layer) for layer in packed] == [id(e.trace.layers[1])]  # 0, estimated too large, was not packed
    assert (
        export.FIT_SLACK
        * export.layer_page_bytes(e.trace.layers[0], full=False)
        * shown
        / export.layer_page_bytes(e.trace.layers[1])
        > 100
    )  # the estimate: 0's bound times 1's packed / bound ratio, less 10 %, over the 100 bytes left
