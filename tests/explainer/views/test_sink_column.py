"""The explainer shows an attention sink as its own column (issue 20): a tiny offline gpt-oss explained.

Every number is checked against an independent computation: transformers' own eager attention with
`output_attentions` (whose rows drop the sink: they sum to 1 − the sink's share) for the weights and the
sink column, and the float64 NumPy spec (`selfattn.reference`) for a capture with ALiBi slopes, packed
segments and sinks together (head_stages must score with everything the request had). A model without
sinks gets no sink field anywhere.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rich.console import Console

import selfattn
from selfattn import reference
from selfattn.explainer.capture.trace import capture
from selfattn.explainer.session import Explainer
from selfattn.explainer.views import checkable, packing, plots, tables
from selfattn.modules import MultiHeadSelfAttention
from tests.explainer.documents import explained, explanation
from tests.explainer.sink_model import TEXT, save
from tests.explainer.tiny import tiny_explainer
from tests.tolerances import TOL, max_error

SHOWN = (1, 2)
"""The head the tests show (layer 1: full attention)."""


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    return Explainer.load(save(tmp_path_factory.mktemp("gpt_oss")))


@pytest.fixture(scope="module")
def doc(gpt_oss):
    return explained(gpt_oss, TEXT, layer=SHOWN[0], head=SHOWN[1])


@pytest.fixture(scope="module")
def e(gpt_oss):
    return explanation(gpt_oss, TEXT, layer=SHOWN[0], head=SHOWN[1])


@pytest.fixture(scope="module")
def eager(gpt_oss):
    """transformers' eager attention weights of every layer, (H, L, L) float64: the sink's column dropped."""
    ids = gpt_oss.tokenize(TEXT)[1][None]
    model = gpt_oss.model
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(ids, output_attentions=True, use_cache=False)
    finally:
        model.set_attn_implementation("selfattn")
    return [a[0].double().numpy() for a in out.attentions]


def test_weights_are_eagers_and_the_sink_is_one_minus_their_row_sum(e, eager):
    shares = []
    for l, layer in enumerate(e.trace.layers):
        assert len(layer.features["sinks"]) == 4
        for h in range(layer.n_heads):
            stages = layer.stages(h)
            assert max_error(stages["weights"].numpy(), eager[l][h]) <= TOL["float32_weights"], (l, h)
            sink = layer.sink(h).double().numpy()
            assert max_error(sink, 1 - eager[l][h].sum(-1)) <= TOL["float32_weights"], (l, h)
            assert max_error(stages["sink"].numpy(), sink) <= TOL["float32_weights"], (l, h)
            shares.extend(sink.tolist())
    assert min(shares) < 0.1 and max(shares) > 0.5  # the sinks matter: some rows give them most, some little


def test_the_page_data_and_the_arrays_carry_the_sink(e, doc, eager):
    for l, layer in enumerate(doc["layers"]):
        for h, head in enumerate(layer["heads"]):
            sink = packing.unpack(head["sink"])
            assert max_error(sink, 1 - eager[l][h].sum(-1)) <= TOL["page_weight"], (l, h)  # at 0.01 %, as shown
            sums = packing.unpack(head["sums"])
            assert max_error(sums, eager[l][h].sum(-1)) <= TOL["page_weight"], (l, h)
        assert layer["sinks"] == e.trace.layers[l].features["sinks"].double().tolist()
    arrays = checkable.npz_arrays(e)
    l, h = SHOWN
    np.testing.assert_allclose(arrays[f"layer{l}/head{h}/sink"], 1 - eager[l][h].sum(-1), atol=TOL["float32_weights"])
    assert arrays[f"layer{l}/sinks"].shape == (4,)


@pytest.mark.parametrize("lang, name", [("en", "sink"), ("zh", "汇点")])
def test_the_terminal_shows_the_sink_as_the_last_column(e, eager, lang, name):
    console = Console(record=True, width=200)
    tables.render(e, console, lang=lang)
    text = console.export_text()
    title = "(5) softmax weights (%)" if lang == "en" else "⑤ softmax 权重（%）"
    l, h = SHOWN
    want = 1 - eager[l][h].sum(-1)
    header, _, *rows = [line for line in text.split(title, 1)[1].splitlines() if line.strip()][: 2 + len(want)]
    assert header.split()[-1] == f"⟨{name}⟩"
    for row, share in zip(rows, want, strict=True):
        assert float(row.split()[-1]) == pytest.approx(100 * share, abs=TOL["percent_rounded_to_1_decimal"])
    assert ("1 − the sum of the row's weights" if lang == "en" else "1 − 这一行的权重之和") in text


def test_the_heatmap_draws_the_sink_as_a_column_apart(e, eager):
    import matplotlib

    l, h = SHOWN
    with matplotlib.rc_context(plots.rc(False)):
        fig = plots._heatmap(e, l, h, "en")
    matrix, sink, bar = fig.axes
    np.testing.assert_allclose(sink.images[0].get_array()[:, 0], 1 - eager[l][h].sum(-1), atol=TOL["float32_weights"])
    assert [tick.get_text() for tick in sink.get_xticklabels()] == ["sink"]
    fig.canvas.draw()  # the divider places the axes when drawn
    left, right = matrix.get_window_extent(), sink.get_window_extent()
    assert (
        right.x0 > left.x1 and abs(right.y0 - left.y0) < TOL["pixel"] and abs(right.y1 - left.y1) < TOL["pixel"]
    )  # apart, rows aligned
    assert matrix.images[0].get_array().shape == (len(e.tokens.names),) * 2
    assert plots.render(e, formats=("png",), lang="en")  # the file views draw it too


def test_a_model_without_sinks_shows_no_sink():
    e = explanation(tiny_explainer(), "一只蓝色怪兽走进森林")
    doc = e.session.document(e)
    assert all("sinks" not in layer and all("sink" not in h for h in layer["heads"]) for layer in doc["layers"])
    console = Console(record=True, width=200)
    tables.render(e, console, lang="en")
    assert "⟨sink⟩" not in console.export_text()
    import matplotlib

    with matplotlib.rc_context(plots.rc(True)):
        fig = plots._heatmap(e, e.shown.layer, e.shown.head, "en")
    assert len(fig.axes) == 2  # the matrix and its colour bar, as before


class _Featured(torch.nn.Module):
    """One attention call with ALiBi slopes, packed segments and sinks (and GQA), through selfattn.attention.
    Holds a MultiHeadSelfAttention only so the explainer recognises a selfattn model; forward does not use it."""

    def __init__(self, vocab: int = 11, Hq: int = 4, Hkv: int = 2, D: int = 5):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.emb = torch.nn.Parameter(torch.randn(vocab, D * (Hq + 2 * Hkv), generator=g, dtype=torch.float64))
        self.sinks = torch.randn(Hq, generator=g, dtype=torch.float64)
        self.alibi = torch.rand(Hq, generator=g, dtype=torch.float64)
        self.unused = MultiHeadSelfAttention(8, 2)
        self.shape = (Hq, Hkv, D)

    def forward(self, ids, segments=None):
        Hq, Hkv, D = self.shape
        x = self.emb[ids]  # (1, L, D·(Hq + 2·Hkv))
        q, k, v = x.split([D * Hq, D * Hkv, D * Hkv], dim=-1)
        q, k, v = (t.unflatten(-1, (-1, D)).transpose(1, 2) for t in (q, k, v))
        out = selfattn.attention(q, k, v, causal=True, sinks=self.sinks, alibi=self.alibi, segments=segments)
        return out.transpose(1, 2).flatten(2)

    def qkv(self, ids):
        Hq, Hkv, D = self.shape
        x = self.emb[ids].detach().numpy()
        q, k, v = np.split(x, [D * Hq, D * (Hq + Hkv)], axis=-1)
        return (a.reshape(1, a.shape[1], -1, D).transpose(0, 2, 1, 3) for a in (q, k, v))


def test_the_stages_score_with_the_requests_alibi_segments_and_sinks():
    model = _Featured()
    ids = torch.tensor([[1, 4, 2, 7, 7, 3, 9, 0, 5]])
    segments = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 2, 2]])
    trace = capture(model, ids, [str(i) for i in ids[0].tolist()], segments=segments)
    layer = trace.layers[0]
    out, weights, lse = reference.attention(
        *model.qkv(ids), causal=True, sinks=model.sinks, alibi=model.alibi, segments=segments.numpy()
    )
    for h in range(4):
        st = layer.stages(h)
        assert max_error(st["weights"], weights[0, h]) <= TOL["float64_grad"], h
        assert max_error(st["sink"], 1 - weights[0, h].sum(-1)) <= TOL["float64_grad"], h
        assert max_error(st["weighted"], out[0, h]) <= TOL["float64_grad"], h
        rows = [2, 5, 8]
        part = layer.stages(h, rows)  # a few rows alone: ALiBi's distances are the rows' own
        assert max_error(part["weights"], weights[0, h, rows]) <= TOL["float64_grad"], h
    assert not bool(layer.visible[3, 2]) and bool(layer.visible[4, 3])  # another segment is hidden
    together = layer.weights([3, 0, 2])  # the heads at once (what the head-type measures read), any order
    for i, h in enumerate([3, 0, 2]):
        assert max_error(together[i], weights[0, h]) <= TOL["float64_grad"], h
