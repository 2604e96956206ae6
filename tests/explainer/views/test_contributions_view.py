"""The contributions field (`views.contribution_words`) in every view: --json, the terminal, the page's packed shares.

A planted sink on the tiny DecoderLM: head 0 of layer 0 reads <bos> with most of its weight (its keys are the
inputs' similarity to <bos>'s, scaled up) while <bos>'s value is exactly 0 (the value bias cancels it), so the
raw weights say "a first-token head" and the contributions say <bos> moves nothing. Every number is checked
against the independent float64 computation from hooks on the model's own modules.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from rich.console import Console

from selfattn.explainer.analysis import contributions as contrib
from selfattn.explainer.pipeline import Session, Spec
from selfattn.explainer.views import checkable, codec, export, packing, tables
from selfattn.explainer.views.contribution_words import SHARE_DIGITS
from tests.explainer.documents import valid
from tests.explainer.tiny import tiny_explainer
from tests.tolerances import TOL

TEXT = "一只蓝色怪兽走进森林。它在森林里睡觉。"
SINK_GAIN = 1.0
"""How far head 0's keys are scaled toward <bos>'s input: enough that its rows put most weight on <bos>."""
JSON_ROUNDING = 0.5 * 10.0**-checkable.WEIGHT_DIGITS
SHARE_ROUNDING = 0.5 * 10.0**-SHARE_DIGITS
U16_ROUNDING = 0.5 * 10.0**-packing.WEIGHT_DIGITS
"""The page's shares: to WEIGHT_DIGITS decimals (`codec.fixed`)."""


def _ln_inputs(ex, ids):
    """(L, d_model) the input of layer 0's attention (LN(x)), read by a hook on its module."""
    seen = {}
    attn = ex.model.blocks[0].attn
    handle = attn.register_forward_pre_hook(lambda m, args: seen.update(x=args[0].detach()))  # returns None
    try:
        with torch.no_grad():
            ex.model(ids[None])
    finally:
        handle.remove()
    return seen["x"][0]


def sink_explainer():
    """The tiny DecoderLM (2 heads) with the planted sink on head 0 of layer 0 (module doc)."""
    ex = tiny_explainer(n_heads=2)
    _, ids, _ = ex.tokenize(TEXT)
    x = _ln_inputs(ex, ids)  # (L, d)
    a = ex.model.blocks[0].attn
    D = a.head_dim
    x0 = x[0] / x[0].norm()
    with torch.no_grad():
        u = torch.ones(D) / D**0.5
        a.q_proj.weight[:D].zero_()
        a.q_proj.bias[:D] = u * SINK_GAIN
        a.k_proj.weight[:D] = SINK_GAIN * u[:, None] * x0[None, :]  # k_j = gain · u (x_j · x̂_0): largest at j = 0
        a.k_proj.bias[:D].zero_()
        a.v_proj.bias[:D] = -(a.v_proj.weight[:D] @ x[0])  # v_0 = 0 exactly (up to rounding)
    return ex


@pytest.fixture(scope="module")
def planted():
    ex = sink_explainer()
    _, ids, _ = ex.tokenize(TEXT)
    return ex, ids, Session(ex).explain(Spec(TEXT, layer=0, head=0))


def _reference(ex, ids, head: int) -> torch.Tensor:
    """(L, L) float64 α_ij ‖v_j W_O^h‖ of layer 0 from hooked Q, K, V and the module's own out_proj."""
    got = {}
    a = ex.model.blocks[0].attn
    handles = [
        getattr(a, n).register_forward_hook(lambda m, i, out, n=n: got.update({n: out.detach()[0].double()}))
        for n in ("q_proj", "k_proj", "v_proj")
    ]
    try:
        with torch.no_grad():
            ex.model(ids[None])
    finally:
        for h in handles:
            h.remove()
    D, L = a.head_dim, len(ids)
    q, k, v = (got[n][:, head * D : (head + 1) * D] for n in ("q_proj", "k_proj", "v_proj"))
    s = (q @ k.T / D**0.5).masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
    n = (v @ a.out_proj.weight.detach().double()[:, head * D : (head + 1) * D].T).norm(dim=-1)
    return torch.softmax(s, dim=-1) * n[None, :]


def test_planted_sink_is_oversold_in_the_json(planted):
    ex, ids, e = planted
    ref = _reference(ex, ids, 0)
    doc = json.loads(json.dumps(checkable.json_document(e), ensure_ascii=False, allow_nan=False))
    c = doc["contributions"]
    assert (c["layer"], c["head"]) == (0, 0)
    values = np.array(c["values"])
    assert np.abs(values - ref.numpy()).max() <= JSON_ROUNDING + TOL["float32_hf_stages"] * float(ref.abs().max())
    total = ref.sum(-1, keepdim=True)
    assert np.abs(np.array(c["shares"]) - (ref / total).numpy()).max() <= SHARE_ROUNDING + TOL["float32_weight_mean"]
    weights = e.weights(0, 0)
    first = c["first"][0]
    assert abs(first["weight"] - float(weights[1:, 0].mean())) <= TOL["float32_weight_mean"]
    assert first["weight"] >= contrib.OVERSOLD_WEIGHT  # planted: the rows look at <bos>
    assert first["share"] <= TOL["float32_weight_mean"]  # ... whose value is 0
    assert first["oversold"]
    assert "<bos>" in c["text"]["zh"] and "<bos>" in c["text"]["en"]
    assert f"{round(100 * first['weight'])}%" in c["text"]["zh"] and "0%" in c["text"]["en"]
    # the first-token type: credited on the weights (where measured), never on the shares
    on_weights = doc["descriptions"][0][0]["scores"]["first"]
    assert not c["first_type"][0]["credited"]
    assert c["first_type"][0]["score"] <= TOL["float32_weight_mean"]
    assert on_weights["credited"] and on_weights["score"] >= contrib.OVERSOLD_WEIGHT


def test_the_terminal_prints_the_shares_and_the_sentence(planted):
    _, _, e = planted
    doc = export.document(e, display=False)
    console = Console(width=200, record=True)
    tables.render(e, console, "zh")
    out = console.export_text()
    assert "⑥′ 贡献 ‖α·v·W_O‖" in out
    assert doc["contributions"]["text"]["zh"] in out.replace("\n", "")
    shares = doc["contributions"]["shares"]
    last = out[out.index("⑥′") :].split("\n")
    row = next(line for line in last if line.strip().startswith("。@12"))
    assert row.split()[1] == f"{100 * shares[-1][0]:.1f}"  # the <bos> column of the last row


def test_the_page_holds_the_packed_shares(planted):
    _, _, e = planted
    doc = export.document(e, layers="selected")
    valid(doc)
    c = doc["contributions"]
    shares = codec.unpack(c["packed"])  # to WEIGHT_DIGITS decimals, as the shown head's weights
    assert shares.shape == (len(e.tokens), len(e.tokens))
    ref = contrib.shares(e.contributions(0, 0)).numpy()
    assert np.abs(shares - ref).max() <= U16_ROUNDING + TOL["float64"]


def test_no_output_projection_no_field():
    """A layer whose output projection the capture did not find: no field in any view, and the API says why."""
    e = Session(tiny_explainer()).explain(Spec(TEXT))
    for layer in e.trace.layers:  # this Explanation's own trace
        layer.out_proj = None
    assert "contributions" not in checkable.json_document(e)
    assert "contributions" not in export.document(e)
    with pytest.raises(ValueError, match="output projection"):
        e.contributions(0, 0)


def test_the_first_type_of_every_head_is_each_heads_own_measure(planted):
    """`contributions.first_type` measures every head's shares in one call of `head_types.measure`: each head's
    verdict is the one it gets measured alone (a mix-up of heads or rows fails here)."""
    from selfattn.explainer.analysis import head_types

    _, _, e = planted
    layer = e.trace.layers[0]
    ids = [int(i) for i in e.tokens.ids]
    together = contrib.first_type(layer, ids)
    alone = []
    for h in range(layer.n_heads):
        shares = contrib.shares(contrib.contributions(layer, h, layer.stages(h, weighted=False)["weights"]))
        alone.append(head_types.measure(shares, ids, causal=layer.causal, visible=layer.visible)[0]["first"])
    assert len(together) == len(alone) == 2
    for one, other in zip(together, alone, strict=True):  # a mean over the stacked rows may differ in its last bit
        assert one == pytest.approx(other, rel=TOL["float64"], abs=0)
    assert together[0] != pytest.approx(together[1])  # the heads differ, so equality above means something
