"""A layer the page holds but not in full (every layer but the shown one, on a page of layers="auto"): its d_model
vectors x, attn_out and output show their length and top dimensions, those of that layer (checked against torch on
the trace), and say plainly that every value is in the layers asked with --layers; the layer held in full shows
every value. No console error."""

from __future__ import annotations

import re

import numpy as np
import torch

from selfattn.explainer import tracing
from selfattn.explainer.views import tables
from tests.explainer.documents import explained
from tests.explainer.tiny import tiny_explainer
from tests.explainer.web.test_browser import (  # noqa: F401  # browser, watched: the fixtures of the browser tests
    assert_clean,
    browser,
    open_report,
    stage,
    state,
    watched,
)

TEXT = "一只蓝色怪兽走进森林"


def _summary(vector: torch.Tensor) -> tuple[str, str]:
    """The length and the top dimensions of one vector as the page writes them (4 decimals, the minus sign "−"),
    from torch: its norm and a stable sort of |values|."""
    word = lambda x: f"{x:.4f}".replace("-", "\u2212")  # noqa: E731
    v = vector.double()
    dims = torch.sort(-v.abs(), stable=True).indices[: tables.TOP_DIMENSIONS].tolist()
    return word(float(torch.linalg.vector_norm(v))), " · ".join(f"d{d} = {word(float(v[d]))}" for d in dims)


def test_a_layer_not_held_in_full_shows_its_own_norms_and_top_dimensions_and_says_so(watched, tmp_path):  # noqa: F811
    ex = tiny_explainer()
    doc = explained(ex, TEXT, layer=1, head=0)
    assert doc["full_layers"] == [1] and "omitted" not in doc
    url = open_report(watched, doc, tmp_path)
    page = watched.page
    trace = tracing.trace_with_controls(ex, TEXT)[0]  # the text as explain traces it: one batch with its controls
    i = 3
    page.select_option("[data-testid=layer-select]", "0")
    page.click(f"[data-testid=token][data-index='{i}']")
    assert (state(page)["layer"], state(page)["row"], state(page)["held"]) == ("0", str(i), "1")
    for step, names in (("x", ("x",)), ("output", ("attn_out", "output"))):
        stage(page, step)
        for name in names:
            box = f"[data-testid=vec-{name}]"
            assert page.get_attribute(box, "data-full") == "0"
            norm, top = _summary(getattr(trace.layers[0], name)[i])
            summary = page.text_content(f"[data-testid=vec-{name}-summary]")
            assert re.search(rf"= {norm}[;；]", summary) and summary.endswith(top), (name, summary, norm, top)
            note = page.text_content(f"[data-testid=vec-{name}-top-only]")
            assert "--layers 0" in note and ("layer 0" in note or "层 0" in note), note
            assert page.query_selector(f"{box} details") is None  # no list of every value it does not hold
    page.select_option("[data-testid=layer-select]", "1")  # the layer held in full: every value, one click away
    stage(page, "x")
    assert page.get_attribute("[data-testid=vec-x]", "data-full") is None
    assert page.query_selector("[data-testid=vec-x-top-only]") is None
    norm, top = _summary(trace.layers[1].x[i])
    summary = page.text_content("[data-testid=vec-x-summary]")
    assert re.search(rf"= {norm}[;；]", summary) and summary.endswith(top), (summary, norm, top)
    values = page.eval_on_selector_all("[data-testid=vec-x] .nums span", "ss => ss.map(s => s.textContent)")
    np.testing.assert_array_equal(
        [float(v.replace("\u2212", "-")) for v in values], np.round(trace.layers[1].x[i].double().numpy(), 4)
    )
    assert_clean(watched, {url})
