"""A page that does not hold every layer (`--layers`, or a long input over the page's budget) says so under the
layer asked for, by the menu, the URL hash and the model view, and never shows another layer's numbers there;
the model view still draws every head from its thumbnail. `explain --help` documents --layers, and a bad value
is one line naming it."""

from __future__ import annotations

import numpy as np
import pytest

from selfattn.cli import main
from selfattn.explainer import tracing
from selfattn.explainer.views import report
from tests.explainer.documents import both, explained, weights
from tests.explainer.tiny import tiny_explainer
from tests.explainer.web.test_browser import CHROMIUM, CHROMIUM_ARGS, shown_row, stage, state, wait_ready
from tests.tolerances import TOL

TEXT = "一只蓝色怪兽走进森林"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    ex = tiny_explainer()
    doc = explained(ex, TEXT, layers=[1], layer=1, head=0)
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
    held = tracing.trace(ex, TEXT).layers[1].stages(0)["weights"][i].numpy()
    got = shown_row(pg, "weights")
    np.testing.assert_allclose([got[j] for j in sorted(got)], held, atol=TOL["layers_page_weight"])
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
    want = tracing.trace(ex, TEXT).layers[1].stages(1)["weights"][2].numpy()
    np.testing.assert_allclose([got[j] for j in sorted(got)], want, atol=TOL["layers_page_weight"])
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


def test_the_head_search_of_a_page_without_every_layer_ranks_the_heads_it_holds_and_says_so(page):
    """Offline, the layers left out are nowhere to ask for: the search ranks the held layers' heads (their weights
    from the query to the key, as transformers-free float64 gives them) and says which layers it ranked, where it
    used to ask a server the file does not have ("Failed to fetch")."""
    pg, doc, ex, errors = page
    pg.select_option("[data-testid=find-query]", "4")
    pg.select_option("[data-testid=find-key]", "3")
    pg.click("[data-testid=find-btn]")
    pg.wait_for_selector("[data-testid=search-row]")
    rows = pg.eval_on_selector_all(
        "[data-testid=search-row]",
        "rs => rs.map(r => [Number(r.dataset.layer), Number(r.dataset.head), Number(r.dataset.weight)])",
    )
    layer = tracing.trace(ex, TEXT).layers[1]
    want = sorted(((1, h, float(layer.stages(h)["weights"][4, 3])) for h in range(2)), key=lambda r: (-r[2], r[1]))
    assert [(l, h) for l, h, _ in rows] == [(l, h) for l, h, _ in want]
    np.testing.assert_allclose([w for _, _, w in rows], [w for _, _, w in want], rtol=0, atol=TOL["layers_page_weight"])
    note = pg.inner_text("[data-testid=search-note]")
    assert "只排了这一页完整包含的层 1 的 head" in note and "--find" in note
    assert pg.inner_text("#error") == "" and not pg.is_visible("#error")
    assert errors == []


def test_a_layer_not_held_keeps_its_heads_labels_for_the_model_view():
    """The model view colours every thumbnail by its head's label (the explain sentences' verdicts, which every
    layer has): a layer whose arrays are left out keeps them."""
    from selfattn.explainer.session import Explainer

    doc = explained(Explainer.load(), TEXT, layers=[0], layer=0, head=0)
    packed = doc["layers"]
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


def test_the_page_unpacks_a_held_layer_when_it_is_shown_once_and_as_python_packed_it(tmp_path):
    """data.js (run in node): loadDoc unpacks each held layer's visibility (the model view's thumbnails read it)
    and leaves its other arrays packed; unpackLayers unpacks the layers asked for, each once however often and
    however concurrently it is asked, to Python's numbers; a layer left out stays left out."""
    import json
    import subprocess

    from selfattn.explainer.views import packing

    e, packed = both(tiny_explainer(), TEXT, layers=[0, 1], layer=1, head=0)
    assert "display" in packed and len(packed["layers"]) == 2
    (tmp_path / "doc.json").write_text(json.dumps(packed), encoding="utf-8")
    data_js = (report.STATIC_DIR / "data.js").resolve().as_uri()
    script = f"""
import {{ readFileSync }} from "node:fs";
import {{ deferred, loadDoc, unpackLayers }} from "{data_js}";
const doc = await loadDoc(JSON.parse(readFileSync({json.dumps(str(tmp_path / "doc.json"))}, "utf8")));
const before = doc.layers.map((layer, l) => [deferred(doc, l), "b64" in layer.heads[0].q, !!layer.visible.bits]);
const [a, b] = [unpackLayers(doc, [1]), unpackLayers(doc, [1, 1])];
await Promise.all([a, b]);
const one = doc.layers[1];
await unpackLayers(doc, [1]);
console.log(JSON.stringify({{
  before, after: doc.layers.map((_, l) => deferred(doc, l)), same: doc.layers[1] === one,
  weights: Array.from(one.heads[0].weights.data), unit: one.heads[0].weights.unit,
  q: Array.from(one.heads[1].q.data), x: Array.from(one.x.data),
  thumbs: doc.display.thumbnails.map((row) => row.map((t) => [t.shape, t.data.constructor.name, Array.from(t.data)])),
  selected: [doc.display.selected.weights.shape, Array.from(doc.display.selected.weights.data),
    doc.display.selected.weights.unit],
}}));
"""
    out = subprocess.run(
        ["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60, check=True
    )
    got = json.loads(out.stdout)
    assert got["before"] == [[True, True, True], [True, True, True]]  # packed but for the visibility
    assert got["after"] == [True, False] and got["same"]  # layer 1 unpacked once, layer 0 still waits
    layer = packed["layers"][1]
    np.testing.assert_array_equal(
        np.array(got["weights"]) / got["unit"], packing.unpack(layer["heads"][0]["weights"]).ravel()
    )
    np.testing.assert_array_equal(got["q"], packing.unpack(layer["heads"][1]["q"]).ravel())
    np.testing.assert_allclose(got["x"], packing.unpack(layer["x"]).ravel(), rtol=0, atol=TOL["float64"])
    # doc.display through the same unpack: each thumbnail the cells Python keeps at 0.01 % (as numbers), the
    # shown head's weights to 4 decimals; both within their tolerance of the float64 weights of Q, K and the lse
    for l, row in enumerate(got["thumbs"]):
        for h, (shape, kind, data) in enumerate(row):
            packed_thumb = packed["display"]["thumbnails"][l][h]
            assert shape == packed_thumb["shape"] and kind == "Float64Array"
            np.testing.assert_array_equal(data, packing.unpack(packed_thumb).ravel())
            np.testing.assert_allclose(
                np.reshape(data, shape),
                weights(e, l, h),
                atol=TOL["float16_thumbnail"] + TOL["rounded_to_4_decimals"],  # the capture's float16, at 0.01 %
                rtol=TOL["float16_thumbnail_rel"],
                err_msg=f"layer {l} head {h}",
            )
    shape, data, unit = got["selected"]
    shown = packed["display"]["selected"]
    np.testing.assert_allclose(
        np.reshape(data, shape) / unit,
        weights(e, shown["layer"], shown["head"]),
        rtol=0,
        atol=TOL["rounded_to_4_decimals"],
    )
