"""A page that does not hold every layer (`--layers`, or a long input over the page's budget) says so under the
layer asked for, by the menu, the URL hash and the model view, and never shows another layer's numbers there;
the model view still draws every head from its thumbnail. `explain --help` documents --layers, and a bad value
is one line naming it."""

from __future__ import annotations

import numpy as np
import pytest

from selfattn.cli import main
from selfattn.explainer.views import report
from tests.explainer.test_browser import CHROMIUM, CHROMIUM_ARGS, shown_row, stage, state, wait_ready
from tests.explainer.tiny import tiny_explainer

TEXT = "一只蓝色怪兽走进森林"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    ex = tiny_explainer()
    doc = ex.explain(TEXT, layers=[1], layer=1, head=0)
    path = report.write_html(doc, tmp_path_factory.mktemp("layers") / "one.html")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport={"width": 1360, "height": 1000})
        errors: list[str] = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(path.resolve().as_uri())
        wait_ready(pg)
        yield pg, doc, ex, errors
        browser.close()


def test_a_layer_not_held_is_said_under_its_own_name_by_the_menu_and_the_hash(page):
    pg, doc, ex, errors = page
    stage(pg, "softmax")
    i = int(state(pg)["row"])
    held = ex.trace(TEXT).layers[1].stages(0)["weights"][i].numpy()
    got = shown_row(pg, "weights")
    np.testing.assert_allclose([got[j] for j in sorted(got)], held, atol=1e-4)
    pg.select_option("[data-testid=layer-select]", "0")
    s = state(pg)
    assert (s["layer"], s["held"]) == ("0", "0")
    note = pg.inner_text("[data-testid=not-held]")
    assert "层 0 的数组不在这一页里" in note and "--layers 0" in note and "层 1" in note
    assert not pg.is_visible("[data-testid=heatmap]") and not pg.is_visible("[data-testid=stepper]")
    assert pg.is_visible("[data-testid=not-held-thumb]")
    pg.evaluate("window.location.hash = '#view=explore&layer=1&head=1&query=2'")
    pg.wait_for_function("() => document.getElementById('app').dataset.head === '1'")
    s = state(pg)
    assert (s["layer"], s["head"], s["row"], s["held"]) == ("1", "1", "2", "1")
    got = shown_row(pg, "weights")
    want = ex.trace(TEXT).layers[1].stages(1)["weights"][2].numpy()
    np.testing.assert_allclose([got[j] for j in sorted(got)], want, atol=1e-4)
    pg.evaluate("window.location.hash = '#view=head&layer=0&head=1&query=2'")
    pg.wait_for_function("() => document.getElementById('app').dataset.layer === '0'")
    assert "层 0 的数组不在这一页里" in pg.inner_text("[data-testid=head-body]")
    assert errors == []


def test_the_model_view_draws_every_head_held_or_not(page):
    pg, doc, _, errors = page
    pg.click("[data-testid=view-btn-model]")
    thumbs = pg.eval_on_selector_all(
        "[data-testid=mv-thumb]", "bs => bs.map(b => b.dataset.layer + '.' + b.dataset.head + ':' + b.dataset.held)"
    )
    assert thumbs == ["0.0:0", "0.1:0", "1.0:1", "1.1:1"]
    types = pg.eval_on_selector_all("[data-testid=mv-thumb]", "bs => bs.map(b => b.dataset.type || null)")
    assert types == [d["verdict"]["type"] for layer in doc["descriptions"] for d in layer]  # held or not
    assert pg.inner_text("[data-testid=mv-held]").startswith("这一页完整包含层 1；")  # which layers, before a click
    greyed = pg.eval_on_selector_all("[data-testid=mv-grid] th.mv-not-held", "ths => ths.map(th => th.textContent)")
    assert greyed == ["层 0"]
    pg.click("[data-testid=mv-thumb][data-layer='0'][data-head='1']")
    assert (state(pg)["layer"], state(pg)["head"], state(pg)["held"]) == ("0", "1", "0")
    assert errors == []


def test_a_layer_not_held_keeps_its_heads_labels_for_the_model_view():
    """The model view colours every thumbnail by its head's label (the explain sentences' verdicts, which every
    layer has): a layer whose arrays are left out keeps them."""
    from selfattn.explainer.session import Explainer

    doc = Explainer.load().explain(TEXT, layers=[0], layer=0, head=0)
    packed = report.pack(doc)["layers"]
    want = [[d["verdict"]["type"] for d in layer] for layer in doc["descriptions"]]
    assert packed[1]["omitted"] and packed[1]["types"] == want[1] and any(want[1]), want
    assert packed[0]["types"] == want[0]


def test_explain_help_documents_layers_and_a_bad_value_is_one_line(capsys):
    with pytest.raises(SystemExit):
        main(["explain", "--help"])
    out = capsys.readouterr().out
    assert "--layers" in out and "3,18" in out
    with pytest.raises(SystemExit) as exit_info:
        main(["explain", "--layers", "3,x"])
    assert exit_info.value.code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("expected layers such as 3,18 or 0-5, got '3,x' (at 'x')")
