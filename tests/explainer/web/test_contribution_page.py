"""The page's second heatmap measure and the stepper's contribution row (value-weighted attention), in real
headless Chromium, on the planted sink of tests/explainer/views/test_contributions_view.py: the toggle draws the
shares Python shipped, the note says the shown head's sentence (another head: that only the shown one has them),
and the key table's contribution row holds Python's shares. The browser fixtures are test_browser.py's.
"""

from __future__ import annotations

from selfattn.explainer.analysis.contributions import shares as row_shares
from selfattn.explainer.pipeline import Session, Spec
from tests.explainer.documents import explained
from tests.explainer.views.test_contributions_view import TEXT, sink_explainer
from tests.explainer.web.test_browser import browser, open_report, shown_row, stage, watched  # noqa: F401 - fixtures
from tests.tolerances import TOL

ROWS = (3, 12)


def test_the_page_shows_contributions_beside_the_weights(watched, tmp_path):  # noqa: F811
    ex = sink_explainer()
    doc = explained(ex, TEXT, layer=0, head=0)
    c = doc["contributions"]
    exact = row_shares(Session(ex).explain(Spec(TEXT, layer=0, head=0)).contributions(0, 0)).numpy()
    page = watched.page
    open_report(watched, doc, tmp_path)
    assert page.locator("[data-testid=measure]").is_visible()
    assert page.locator("[data-testid=contribution-note]").is_hidden()  # the weights first
    page.click("[data-testid=measure-contributions]")
    note = page.text_content("[data-testid=contribution-note]")
    assert note.startswith(c["text"]["zh"])
    assert note.endswith("首 token 型：按权重成立，按贡献占比不成立")  # planted: credited on the weights only
    for i in ROWS:
        page.click(f"[data-testid=token][data-index='{i}']")
        stage(page, "weighted")
        shares = shown_row(page, "contribution")
        weights = shown_row(page, "weights")
        assert shares, "no contribution row"
        for j, share in shares.items():
            assert abs(share - exact[i, j]) <= TOL["page_weight"], (i, j)
        assert weights[0] > 2 * shares[0] + TOL["page_weight"]  # planted: <bos> weighed, not moved
        assert page.text_content("[data-testid=contribution-text]") == c["text"]["zh"]
    page.select_option("[data-testid=head-select]", "1")
    assert "head 0" in page.text_content("[data-testid=contribution-note]")
    stage(page, "weighted")
    assert page.locator("[data-testid=row-contribution]").count() == 0
    page.click("[data-testid=measure-weights]")
    assert page.locator("[data-testid=contribution-note]").is_hidden()
    assert watched.errors == [], watched.errors
