"""The page shows an attention sink as its own column (issue 20), in real headless Chromium.

A tiny offline gpt-oss explained (tests/explainer/sink_model.py), its HTML report opened: the stepper's key
table ends with a labelled sink column whose weights cell is Python's sink share of the row, whose masked
cell is the head's sink logit, and the heatmap's tooltip over the column apart from the matrix says the same
share. Python's numbers are transformers' eager `output_attentions` (1 − each row's sum), independently.
A model without sinks shows no sink column. The browser fixtures are test_browser.py's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfattn.explainer.session import Explainer
from tests.explainer.documents import explained
from tests.explainer.sink_model import TEXT, save
from tests.explainer.tiny import tiny_explainer
from tests.explainer.web.test_browser import browser, open_report, stage, value, watched  # noqa: F401 - fixtures
from tests.tolerances import TOL

LAYER, HEAD = 1, 2
ROWS = (0, 3, 7)


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    return Explainer.load(save(tmp_path_factory.mktemp("gpt_oss_page")))


def _eager_sink(explainer) -> np.ndarray:
    """1 − the row sums of transformers' eager weights of the shown head (the sink's column dropped): (L,)."""
    ids = explainer.tokenize(TEXT)[1][None]
    model = explainer.model
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            attentions = model(ids, output_attentions=True, use_cache=False).attentions
    finally:
        model.set_attn_implementation("selfattn")
    return 1 - attentions[LAYER][0, HEAD].double().sum(-1).numpy()


def _sink_tip(page, i: int) -> str:
    """The tooltip over row i of the heatmap's sink column, found by moving right to left along the row."""
    page.locator("#heatmap").scroll_into_view_if_needed()
    box = page.locator("#heatmap").bounding_box()
    L = len(TEXT.split()) + 1
    size = page.evaluate("() => document.getElementById('heatmap').height / (window.devicePixelRatio || 1)")
    for x in range(int(box["width"]) - 2, 0, -3):
        page.mouse.move(box["x"] + x, box["y"] + (size - 24) - (L - i - 0.5) * (size - 24 - 96) / L)
        tip = page.locator("#tip")
        if tip.is_visible() and ("sink" in tip.text_content() or "汇点" in tip.text_content()):
            return tip.text_content()
    raise AssertionError(f"no sink tooltip on row {i}")


def test_the_page_shows_the_sink_column_with_pythons_numbers(gpt_oss, watched, tmp_path):  # noqa: F811
    doc = explained(gpt_oss, TEXT, layer=LAYER, head=HEAD)
    want = _eager_sink(gpt_oss)
    page = watched.page
    open_report(watched, doc, tmp_path)
    for i in ROWS:
        page.click(f"[data-testid=token][data-index='{i}']")
        stage(page, "softmax")
        assert page.text_content("[data-testid=sink-head]") in ("sink", "汇点")
        cell = page.locator("[data-testid=sink-weights]")
        assert abs(float(cell.get_attribute("data-value")) - want[i]) <= TOL["page_weight"]  # held at 0.01 %
        assert abs(value(cell.text_content()) - want[i]) <= TOL["page_weight"]
        logit = float(page.get_attribute("[data-testid=sink-masked]", "data-value"))
        assert logit == pytest.approx(doc["layers"][LAYER]["sinks"][HEAD], abs=TOL["page_data"])
        assert "1 − " in page.text_content("[data-testid=stage-explain]")  # the row sums to less than 100 %
        words = page.text_content("[data-testid=sink-sum]")
        assert f"{100 * want[i]:.2f}%" in words
        tip = _sink_tip(page, i)
        assert f"{100 * want[i]:.2f}%" in tip and f"{i}" in tip
    page.screenshot(path=str(tmp_path / "sink-page.png"))
    assert watched.errors == [], watched.errors


def test_a_page_without_sinks_has_no_sink_column(watched, tmp_path):  # noqa: F811
    doc = explained(tiny_explainer(), "一只蓝色怪兽走进森林")
    page = watched.page
    open_report(watched, doc, tmp_path)
    stage(page, "softmax")
    assert page.locator("[data-testid=row-weights]").count() == 1
    assert page.locator("[data-testid=sink-head]").count() == 0
    assert page.locator("[data-testid=sink-sum]").count() == 0
    assert watched.errors == [], watched.errors
