"""The experiments on the page, in real headless Chromium: the ablation's next-token distribution before →
after, the patching maps (layers × heads, layers × positions) and the logit-lens table show exactly the
numbers of Python's export (`experiments.run`, whose own numbers tests/explainer/pipeline/test_experiments.py and
test_real_heads.py check against plain hooks), in the HTML report and in the app; zh and en.

Screenshots (SELFATTN_SHOTS, default /tmp/selfattn-shots) of the patching maps, the lens and the model view.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from playwright.sync_api import Page

from selfattn.explainer import experiments
from selfattn.explainer.views.tables import number
from tests.explainer.documents import explained
from tests.explainer.web import test_browser as base
from tests.explainer.web.test_browser import assert_clean, open_report, state, submit, value, wait_ready
from tests.tolerances import TOL

browser, watched, explainer, app_url = base.browser, base.watched, base.explainer, base.app_url  # the fixtures
SHOTS = Path(os.environ.get("SELFATTN_SHOTS", "/tmp/selfattn-shots"))
TEXT = "一只蓝色怪兽走进森林"
CORRUPTED = "两条红色鱼游进大海"  # the same 6 tokens (<bos> + 5 words)
ABLATE = [[1, 0], [0, 1]]


def shot(page: Page, name: str, selector: str):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator(selector).screenshot(path=str(SHOTS / name))


def full_doc(explainer, **asked) -> dict:
    """The export dict with the experiments, as `selfattn explain --ablate --patch --logit-lens --json` makes it."""
    asked = asked or {"ablate": ABLATE, "patch": {"corrupted": CORRUPTED}, "lens": {"position": None}}
    return explained(explainer, TEXT) | experiments.run(explainer, TEXT, **asked)


def rows(page: Page, testid: str) -> list[tuple[str, float]]:
    got = page.eval_on_selector_all(
        f"[data-testid={testid}]",
        "rs => rs.map(r => [r.querySelector('.word').textContent, r.querySelector('.prob').textContent])",
    )
    return [(word, value(p)) for word, p in got]


def assert_top(shown: list[tuple[str, float]], want: list[dict]):
    assert [w for w, _ in shown] == [p["shown"] for p in want]
    np.testing.assert_allclose([p for _, p in shown], [p["prob"] for p in want], rtol=0, atol=TOL["page_weight"])


def share_of(title: str) -> float:
    """The share a cell's title ends with ("layer 1 · head 0: 61.23% recovered" / "…：恢复 61.23%")."""
    words = [w for w in title.replace("：", " ").split() if w.endswith("%")]
    return value(words[-1])


def assert_experiments(page: Page, doc: dict, lang: str):
    """Every number the experiments' blocks show against the export dict."""
    a, p, lens = doc["ablation"], doc["patching"], doc["lens"]
    # ablation: the sentence, and the distribution before → after
    assert page.text_content("[data-testid=ablation-text]") == a["text"][lang]
    assert_top(rows(page, "ablation-before"), a["before"]["top"])
    assert_top(rows(page, "ablation-after"), a["after"]["top"])
    # patching: the sentence, every head cell (title: 2 decimals; label: a whole percentage), the framed heads
    assert page.text_content("[data-testid=patching-text]") == p["text"][lang]
    cells = page.eval_on_selector_all(
        "[data-testid=patch-head]",
        "cs => cs.map(c => [Number(c.dataset.layer), Number(c.dataset.head), c.title, c.textContent,"
        " c.classList.contains('named')])",
    )
    heads = np.array(p["heads"])
    assert len(cells) == heads.size
    for l, h, title, label, framed in cells:
        assert abs(share_of(title) - heads[l, h]) <= TOL["page_weight"], (l, h, title)
        want = number(100 * heads[l, h], 0) if abs(heads[l, h]) >= p["display"]["label_min"] else ""
        assert label == want, (l, h)
        assert framed == ({"layer": l, "head": h} in [{k: x[k] for k in ("layer", "head")} for x in p["top_heads"]])
    assert sum(c[4] for c in cells) == len(p["top_heads"]) >= 1
    residual = np.array(p["residual"])
    for l, q in ((0, 0), (0, residual.shape[1] - 1), (residual.shape[0] - 1, p["differ"][0])):
        title = page.get_attribute(f"[data-testid=patch-cell][data-layer='{l}'][data-position='{q}']", "title")
        assert abs(share_of(title) - residual[l, q]) <= TOL["page_weight"], (l, q, title)
    changed = page.eval_on_selector_all(".pmap th.changed", "ts => ts.map(t => Number(t.dataset.position))")
    assert changed == p["differ"]
    # the lens: every layer's top tokens and probabilities, its entropy, the settled layer marked
    assert page.text_content("[data-testid=lens-text]") == lens["text"][lang]
    for row in lens["layers"]:
        sel = f"[data-testid=lens-row][data-layer='{row['layer']}']"
        cells = page.eval_on_selector_all(
            f"{sel} [data-testid=lens-cell]",
            "cs => cs.map(c => [c.querySelector('.word').textContent, c.querySelector('.prob').textContent])",
        )
        assert_top([(w, value(x)) for w, x in cells], row["top"])
        assert (
            abs(value(page.text_content(f"{sel} [data-testid=lens-entropy]")) - row["entropy_bits"])
            <= TOL["rounded_to_2_decimals"]
        )
    settled = page.eval_on_selector_all("[data-testid=lens-row].settled", "rs => rs.map(r => Number(r.dataset.layer))")
    assert settled == [lens["settled"]]


def test_report_shows_the_experiments_of_the_export(watched, explainer, tmp_path):
    page = watched.page
    doc = full_doc(explainer)
    url = open_report(watched, doc, tmp_path)
    assert page.is_visible("[data-testid=experiments]")
    assert_experiments(page, doc, "zh")
    shot(page, "patching-zh.png", "[data-testid=exp-patching]")
    shot(page, "lens-zh.png", "[data-testid=exp-lens]")
    shot(page, "ablation-zh.png", "[data-testid=exp-ablation]")
    page.click("[data-testid=lang-toggle]")
    wait_ready(page)
    assert_experiments(page, doc, "en")
    shot(page, "patching-en.png", "[data-testid=exp-patching]")
    shot(page, "lens-en.png", "[data-testid=exp-lens]")
    assert_clean(watched, {url})


def test_report_shows_attribution_beside_exact_patching(watched, explainer, tmp_path):
    page = watched.page
    doc = full_doc(explainer, patch={"corrupted": CORRUPTED})
    p = doc["patching"]
    doc["attribution"] = experiments.attribution(
        explainer, TEXT, CORRUPTED, target=p["target"]["id"], foil=p["foil"]["id"], exact=p
    )
    url = open_report(watched, doc, tmp_path)
    for lang in ("zh", "en"):
        assert page.is_visible("[data-testid=exp-attribution]")
        cells = page.eval_on_selector_all(
            "[data-testid=attribution-head]",
            "cs => cs.map(c => [Number(c.dataset.layer), Number(c.dataset.head), c.title])",
        )
        estimate, exact = np.array(doc["attribution"]["heads"]), np.array(p["heads"])
        assert len(cells) == estimate.size
        for l, h, title in cells:
            shares = [value(w) for w in re.findall(r"[−-]?\d+(?:\.\d+)?%", title)]  # the estimate, then the exact
            assert (
                abs(shares[0] - estimate[l, h]) <= TOL["page_weight"]
                and abs(shares[1] - exact[l, h]) <= TOL["page_weight"]
            ), (l, h, title)
        agreement = doc["attribution"]["exact"]["agreement"]
        said = page.text_content("[data-testid=attribution-text]")
        assert "Spearman" in said and str(agreement["shared"]) in said
        shot(page, f"attribution-{lang}.png", "[data-testid=exp-attribution]")
        if lang == "zh":
            page.click("[data-testid=lang-toggle]")
            wait_ready(page)
    assert_clean(watched, {url})


def test_report_without_experiments_hides_their_section(watched, explainer, tmp_path):
    page = watched.page
    url = open_report(watched, explained(explainer, TEXT), tmp_path)
    assert page.is_hidden("[data-testid=experiments]")
    doc = full_doc(explainer, lens={"position": 2})  # only the lens, at 蓝色
    open_report(watched, doc, tmp_path, name="lens.html")
    assert page.is_hidden("[data-testid=exp-patching]") and page.is_hidden("[data-testid=exp-ablation]")
    assert page.text_content("[data-testid=exp-lens] h3").endswith("位置 2（蓝色）之后每层读出的下一个 token")
    assert_clean(watched, {url, page.url})


def test_app_runs_the_experiments_asked_in_its_controls(watched, explainer, app_url):
    page = watched.page
    page.goto(app_url)
    wait_ready(page)
    page.fill("[data-testid=ablate-input]", "1.0, 0.1")
    page.fill("[data-testid=patch-input]", CORRUPTED)
    page.check("[data-testid=toggle-lens]")
    submit(page, TEXT)
    doc = full_doc(explainer)
    assert_experiments(page, doc, "zh")
    # the first head ablated is shown, and the page says why
    assert (state(page)["layer"], state(page)["head"]) == ("1", "0")
    assert page.text_content("[data-testid=rule]") == "显示被消融的第一个 head"
    # mean ablation, the lens at another position: asked again, the numbers of Python
    page.check("[data-testid=ablate-mean]")
    wait_ready(page)
    page.fill("[data-testid=lens-position]", "3")
    with page.expect_response(lambda r: r.url.endswith("/api/explain")):
        page.press("[data-testid=lens-position]", "Enter")
    wait_ready(page)
    mean = experiments.ablation(explainer, TEXT, ABLATE, "mean")
    assert_top(rows(page, "ablation-after"), mean["after"]["top"])
    lens = experiments.logit_lens(explainer, TEXT, position=3)
    assert page.text_content("[data-testid=lens-text]") == lens["text"]["zh"]
    assert_experiments(page, doc | {"ablation": mean, "lens": lens}, "zh")
    shot(page, "app-experiments-zh.png", "[data-testid=experiments]")
    shot(page, "app-controls-zh.png", "[data-testid=live]")
    origin = app_url.rstrip("/")
    assert_clean(watched, {app_url, f"{origin}/api/explain"})


@pytest.mark.parametrize(
    "fill, message",
    [
        ({"ablate-input": "1-0"}, "消融的 head 写成 层.head"),
        ({"patch-input": "两条"}, "same token length"),
        ({"ablate-input": "5.0"}, "layer must be in [0, 1], got 5"),
    ],
)
def test_app_says_why_an_experiment_is_refused(watched, app_url, fill, message):
    page = watched.page
    page.goto(app_url)
    wait_ready(page)
    for testid, text in fill.items():
        page.fill(f"[data-testid={testid}]", text)
    page.fill("[data-testid=text-input]", TEXT)
    page.click("[data-testid=submit]")
    page.wait_for_selector("[data-testid=error]:not([hidden])")
    assert message in page.text_content("[data-testid=error]")
    assert [e for e in watched.errors if "422" not in e] == []


def test_model_view_colours_heads_by_type(watched, tmp_path):
    """The model view's grid of the bundled default model, its thumbnails bordered by type (screenshot)."""
    from selfattn.explainer.session import Explainer

    doc = explained(Explainer.load(), TEXT)
    page = watched.page
    open_report(watched, doc, tmp_path)
    page.click("[data-testid=view-btn-model]")
    wait_ready(page)
    types = page.eval_on_selector_all("[data-testid=mv-thumb]", "bs => bs.map(b => b.dataset.type || null)")
    assert types == [t for layer in doc["layers"] for t in layer["types"]]  # Python's head types
    assert any(types), "no head of the default model has a type"
    assert page.query_selector("[data-testid=mv-held]") is None  # every layer held: nothing to say
    assert page.query_selector("[data-testid=mv-grid] th.mv-not-held") is None
    shot(page, "model-view-zh.png", "[data-testid=view-model]")
    page.click("[data-testid=lang-toggle]")
    wait_ready(page)
    shot(page, "model-view-en.png", "[data-testid=view-model]")
