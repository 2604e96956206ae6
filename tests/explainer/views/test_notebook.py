"""The notebook API and views: `selfattn.explain(...) -> Explanation`, `head_view` / `model_view`, the page's
head view, model view, compare view and URL hash — in Python, and in real headless Chromium.

Numbers are checked against `tests.explainer.truth` (float64 on the model's weights, independent of the
explainer) or against transformers' own `output_attentions`; the example notebook runs in a real kernel
(nbclient + ipykernel) and its HTML outputs open in Chromium with no request and no console error.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import selfattn
from selfattn.explainer.views import notebook
from selfattn.explainer.views.packing import head_type_names
from tests.explainer import truth
from tests.explainer.tiny import LONG_TEXT, tiny_explainer
from tests.explainer.web.test_browser import CHROMIUM_ARGS, SCREENSHOTS, Watched, browser  # noqa: F401 (fixture)
from tests.tolerances import TOL

TEXT, OTHER = "一只蓝色怪兽走进森林", "一只红色怪兽走进森林"
NOTEBOOK = Path(__file__).resolve().parents[3] / "examples" / "tutorial.ipynb"
HIGH, LOW, HIDDEN = np.array([29, 78, 216]), np.array([255, 255, 255]), np.array([156, 163, 175])
"""The page's colour scale (format.js): white = 0 … blue = 1, shade ∝ √weight; grey = hidden."""


@pytest.fixture(scope="module")
def explainer():
    return tiny_explainer()


@pytest.fixture(scope="module")
def e(explainer):
    return selfattn.explain(TEXT, model=explainer)


@pytest.fixture
def watched(browser):  # noqa: F811
    context = browser.new_context(viewport={"width": 1360, "height": 1000})
    page = context.new_page()
    w = Watched(page)
    page.on("console", lambda m: w.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda ex: w.errors.append(f"uncaught: {ex}"))
    page.on("request", lambda r: w.requests.append(r.url))
    yield w
    context.close()


def framed(w: Watched, inline_html: str):
    """Put a `_repr_html_` output (an iframe srcdoc) into a page, as a notebook does; its frame, ready."""
    w.page.set_content(inline_html.replace('style="width: 100%', 'style="width: 1300px'))
    frame = w.page.query_selector("iframe").content_frame()
    frame.wait_for_selector("#app[data-ready='1']", state="attached", timeout=20_000)
    return frame


def assert_offline(w: Watched):
    assert [u for u in w.requests if not u.startswith(("about:", "data:"))] == []
    assert w.errors == []


# --- Python ----------------------------------------------------------------------------------


def test_selfattn_explain_is_the_function_and_the_package(e, explainer):
    import selfattn.explainer.session  # the package stays importable beside the call

    assert callable(selfattn.explain) and selfattn.explainer.session.Explainer is type(explainer)
    ids = explainer.tokenize(TEXT)[1]
    for l in range(2):
        for h in range(2):
            np.testing.assert_allclose(
                e.weights(l, h).numpy(),
                truth.stages(explainer.model, ids, l, h)["weights"],
                atol=TOL["float32_weights"],
            )
    assert e.weights(0, 0).dtype == torch.float64
    assert [r["weights"][0] for r in e.table(1, 0).rows()] == e.weights(1, 0)[:, 0].tolist()
    assert len(e.heads()) == 4 and {"layer", "head", "entropy", "type"} <= set(e.heads()[0])
    ranked = e.find("森林", "怪兽")
    assert ranked[0]["weight"] == pytest.approx(max(float(e.weights(l, h)[5, 3]) for l in range(2) for h in range(2)))
    assert json.loads(e.to_json())["tokens"] == e.labels == list(e.tokens.labels)


def test_intervene_and_compare_make_new_explanations(e, explainer):
    ids = explainer.tokenize(TEXT)[1]
    free = e.intervene(no_causal={})
    assert free.doc["experiment"]["applied"]["no_causal"] == {} and free.intervention.needs_baseline()
    assert float(free.weights(0, 0)[1, 5]) > 0 == float(e.weights(0, 0)[1, 5])  # row 1 now sees the future
    other = e.compare(OTHER)
    assert other.other.text == OTHER and json.loads(other.to_json())["compare"]["text"] == OTHER
    np.testing.assert_allclose(
        other.other.weights(1, 1).numpy(),
        truth.stages(explainer.model, explainer.tokenize(OTHER)[1], 1, 1)["weights"],
        atol=TOL["float32_weights"],
    )
    assert ids.tolist() == e.doc["token_ids"]


def test_bad_options_are_named(e):
    with pytest.raises(TypeError, match="unknown option 'no_such'"):
        selfattn.explain(TEXT, model=e.session.explainer, no_such={})
    with pytest.raises(ValueError, match="layer must be in"):
        e.weights(5, 0)
    with pytest.raises(ValueError, match="needs its tokenizer"):
        selfattn.explain(TEXT, model=torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="view must be one of"):
        e.html("nowhere")


def test_save_html_is_atomic_and_keeps_an_existing_file(e, tmp_path):
    path = e.save_html(tmp_path / "page.html")
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    with pytest.raises(FileExistsError):
        e.save_html(path)
    e.save_html(path, force=True)
    assert [p.name for p in tmp_path.iterdir()] == ["page.html"]


def test_attention_tensors_are_checked_with_clear_errors():
    w = torch.softmax(torch.randn(1, 2, 4, 4), -1)
    with pytest.raises(ValueError, match="batch of 2"):
        notebook.attention_array((torch.cat([w, w]),), list("abcd"))
    with pytest.raises(ValueError, match="3 tokens for attention over 4"):
        notebook.attention_array((w,), list("abc"))
    with pytest.raises(ValueError, match="sums to"):
        notebook.attention_array(w[0] * 0.5, list("abcd"))
    with pytest.raises(ValueError, match=r"is not a weight"):
        notebook.attention_array(-w[0], list("abcd"))
    with pytest.raises(ValueError, match="attention\\[1\\] has shape"):
        notebook.attention_array((w, w[:, :1]), list("abcd"))
    with pytest.raises(TypeError, match="tokens\\[0\\] must be a str"):
        notebook.attention_array(w, [1, 2, 3, 4])
    assert notebook.attention_array((w, w), list("abcd"))[0].shape == (2, 2, 4, 4)


# --- the page's views in Chromium --------------------------------------------------------------


def lines(frame) -> list[dict]:
    return frame.eval_on_selector_all(
        "[data-testid=hv-line]",
        "ls => ls.map(l => ({h: +l.dataset.head, i: +l.dataset.i, j: +l.dataset.j, w: +l.dataset.w,"
        " width: +l.getAttribute('stroke-width'), shown: l.style.display !== 'none'}))",
    )


def assert_head_view(frame, weights: dict[int, np.ndarray], threshold: float = 0.01):
    """One line per (head, query, key) whose weight (as the page shows it, 0.01 %) is ≥ threshold, no other,
    with width ∝ weight."""
    drawn = lines(frame)
    above = {h: np.nonzero(np.round(w, 4) >= threshold - 1e-12) for h, w in weights.items()}
    want = {(h, i, j) for h, (rows, cols) in above.items() for i, j in zip(rows, cols, strict=True)}
    assert {(d["h"], d["i"], d["j"]) for d in drawn} == want
    for d in drawn:
        assert d["w"] == pytest.approx(weights[d["h"]][d["i"], d["j"]], abs=TOL["page_weight"])
    ratio = np.array([d["width"] / d["w"] for d in drawn])
    np.testing.assert_allclose(ratio, ratio[0], rtol=TOL["drawn_ratio_rel"])


def test_head_view_draws_a_line_per_pair_above_the_threshold(watched, e):
    frame = framed(watched, e.show("head", layer=1)._repr_html_())
    weights = {h: e.weights(1, h).numpy() for h in range(2)}
    assert_head_view(frame, weights)
    frame.hover("[data-testid=hv-q][data-index='3']")  # only where 怪兽 looks
    shown = [d for d in lines(frame) if d["shown"]]
    assert shown and {d["i"] for d in shown} == {3}
    frame.click("[data-testid=hv-toggle][data-head='0']")  # head 0 off
    assert {d["h"] for d in lines(frame)} == {1}
    watched.page.screenshot(path=str(SCREENSHOTS / "selfattn-head-view.png"))
    assert_offline(watched)


def test_a_long_head_view_draws_only_the_strongest_and_says_so(watched, explainer, tmp_path):
    e = selfattn.explain(LONG_TEXT, model=explainer, layer=0, head=1)
    frame = framed(watched, e.show("head", layer=0)._repr_html_())
    threshold = float(frame.get_attribute("[data-testid=hv-svg]", "data-threshold"))
    frame.click("[data-testid=lang-toggle]")
    assert threshold > 0.01 and "only the" in frame.text_content("[data-testid=hv-note]")
    assert_head_view(frame, {h: e.weights(0, h).numpy() for h in range(2)}, threshold)
    assert len(lines(frame)) <= 3000 + 10  # ties at the threshold may add a few
    assert_offline(watched)


def thumbnail_pixels(frame) -> dict[tuple[int, int], np.ndarray]:
    got = frame.eval_on_selector_all(
        "[data-testid=mv-thumb]",
        """bs => bs.map(b => { const c = b.querySelector("canvas");
            const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
            return [+b.dataset.layer, +b.dataset.head, c.width, Array.from(d)]; })""",
    )
    return {(l, h): np.array(px).reshape(n, n, 4)[..., :3] for l, h, n, px in got}


def expected_colours(w: np.ndarray, visible: np.ndarray) -> np.ndarray:
    s = np.sqrt(np.clip(np.round(w, 4), 0, 1))[..., None]
    return np.where(visible[..., None], np.round(LOW + (HIGH - LOW) * s), HIDDEN)


def test_model_view_thumbnails_are_the_weights_and_open_a_head(watched, e):
    frame = framed(watched, e.show("model")._repr_html_())
    L = len(e.tokens)
    causal = np.tril(np.ones((L, L), dtype=bool))
    pixels = thumbnail_pixels(frame)
    assert set(pixels) == {(l, h) for l in range(2) for h in range(2)}
    for (l, h), px in pixels.items():
        np.testing.assert_allclose(
            px, expected_colours(e.weights(l, h).numpy(), causal), atol=TOL["colour_channel"], err_msg=f"{l}/{h}"
        )
    types = frame.eval_on_selector_all("[data-testid=mv-thumb]", "bs => bs.map(b => b.dataset.type)")
    page_types = [  # the types of the weights themselves (`packing.head_type_names`)
        t
        for layer in e.trace.layers
        for t in head_type_names(
            np.stack([layer.stages(h, weighted=False)["weights"].numpy() for h in range(layer.n_heads)]),
            e.doc["token_ids"],
            causal=layer.causal,
        )
    ]
    # the model view reads the explain sentences' answer (`analysis.verdicts`): the weights' type, or a relation
    # the text holds against its control where the weights give none
    said = [d["verdict"]["type"] for row in e.doc["descriptions"] for d in row]
    assert types == [t or "" for t in said]
    assert all(v == p or (v == "relation" and p is None) for v, p in zip(said, page_types, strict=True))
    watched.page.screenshot(path=str(SCREENSHOTS / "selfattn-model-view.png"))
    frame.click("[data-testid=mv-thumb][data-layer='0'][data-head='1']")
    st = frame.eval_on_selector("#app", "a => ({...a.dataset})")
    assert (st["view"], st["layer"], st["head"]) == ("explore", "0", "1")
    assert_offline(watched)


def test_compare_view_shows_both_rows_and_their_difference(watched, e):
    c = e.compare(OTHER)
    frame = framed(watched, c._repr_html_())
    frame.click("[data-testid=token][data-index='3']")  # the query 怪兽
    l, h = e.shown
    rows = {
        name: frame.eval_on_selector_all(
            f"[data-testid=cmp-row-{name}] td", "ts => ts.map(t => t.lastChild.textContent)"
        )
        for name in ("a", "b", "d")
    }
    pct = lambda texts: np.array([float(t.replace("\u2212", "-")[:-1]) / 100 for t in texts])  # noqa: E731
    a, b = e.weights(l, h)[3].numpy(), c.other.weights(l, h)[3].numpy()
    np.testing.assert_allclose(pct(rows["a"]), a, atol=TOL["page_weight"])
    np.testing.assert_allclose(pct(rows["b"]), b, atol=TOL["page_weight"])
    np.testing.assert_allclose(pct(rows["d"]), b - a, atol=TOL["page_weight_difference"])
    watched.page.screenshot(path=str(SCREENSHOTS / "selfattn-compare-view.png"))
    assert_offline(watched)


def test_the_url_hash_reopens_the_view(watched, e, tmp_path):
    page = watched.page
    path = e.save_html(tmp_path / "page.html")
    page.goto(path.as_uri() + "#view=head&layer=0&head=1&query=2")
    page.wait_for_selector("#app[data-ready='1']", state="attached")
    st = page.eval_on_selector("#app", "a => ({...a.dataset})")
    assert (st["view"], st["layer"], st["head"], st["row"]) == ("head", "0", "1", "2")
    page.click("[data-testid=view-btn-model]")
    page.click("[data-testid=mv-thumb][data-layer='1'][data-head='0']")
    page.click("[data-testid=token][data-index='4']")
    link = page.url
    assert link.endswith("#view=explore&layer=1&head=0&query=4")
    other = page.context.new_page()
    other.goto(link)
    other.wait_for_selector("#app[data-ready='1']", state="attached")
    st = other.eval_on_selector("#app", "a => ({...a.dataset})")
    assert (st["view"], st["layer"], st["head"], st["row"]) == ("explore", "1", "0", "4")
    page.goto(path.as_uri() + "#view=nowhere&layer=99&head=x")  # nonsense is ignored, not an error
    page.wait_for_selector("#app[data-ready='1']", state="attached")
    assert page.eval_on_selector("#app", "a => a.dataset.view") == "explore"
    assert watched.errors == []


def test_head_view_takes_the_attentions_of_a_transformers_model(watched):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=4)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.set_attn_implementation("eager")
    ids = torch.tensor([[3, 14, 15, 9, 26, 5]])
    with torch.no_grad():
        out = model(ids, output_attentions=True)
    assert isinstance(out.attentions, tuple) and out.attentions[0].shape == (1, 4, 6, 6)
    tokens = [f"t{i}" for i in ids[0].tolist()]
    frame = framed(watched, selfattn.head_view(out.attentions, tokens, layer=1)._repr_html_())
    assert_head_view(frame, {h: out.attentions[1][0, h].double().numpy() for h in range(4)})
    frame.click("[data-testid=view-btn-model]")
    pixels = thumbnail_pixels(frame)
    for (l, h), px in pixels.items():
        w = out.attentions[l][0, h].double().numpy()
        np.testing.assert_allclose(px, expected_colours(w, np.ones_like(w, dtype=bool)), atol=TOL["colour_channel"])
    assert frame.eval_on_selector("#app", "a => a.dataset.hash") == "#view=model&layer=1&head=0&query=0"
    assert_offline(watched)


def test_bertviz_heads_draw_those_heads_and_lang_picks_the_page_language(watched):
    """bertviz's README form head_view(attention, tokens, layer=…, heads=[…]): those heads' lines, no other;
    English tokens open the page in English, Chinese ones in Chinese, lang= says which."""
    torch.manual_seed(0)
    w = torch.softmax(torch.randn(2, 4, 5, 5) * 3, -1).double()  # (layers, heads, L, L)
    tokens = ["the", "cat", "sat", "on", "it"]
    frame = framed(watched, selfattn.head_view(w, tokens, layer=1, heads=[1, 3])._repr_html_())
    assert_head_view(frame, {h: w[1, h].numpy() for h in (1, 3)})
    pressed = frame.eval_on_selector_all("[data-testid=hv-toggle]", "bs => bs.map(b => b.getAttribute('aria-pressed'))")
    assert pressed == ["false", "true", "false", "true"]
    assert frame.eval_on_selector("#app", "a => a.dataset.lang") == "en"
    frame = framed(watched, selfattn.head_view(w, ["一只", "蓝色", "怪兽", "走进", "森林"])._repr_html_())
    assert frame.eval_on_selector("#app", "a => a.dataset.lang") == "zh"
    frame = framed(watched, selfattn.model_view(w, tokens, lang="zh")._repr_html_())
    assert frame.eval_on_selector("#app", "a => a.dataset.lang") == "zh"
    with pytest.raises(ValueError, match="lang must be 'zh' or 'en', got 'fr'"):
        selfattn.head_view(w, tokens, lang="fr")
    with pytest.raises(ValueError, match=r"heads must hold head indices in \[0, 3\], got \[1, 4\]"):
        selfattn.head_view(w, tokens, heads=[1, 4])
    assert_offline(watched)


def test_include_layers_are_shown_and_linked_under_their_own_numbers(watched):
    """bertviz's include_layers=[1, 3] of 4 layers: the menu, the head view's title, the model view's rows and
    the URL hash name layers 1 and 3, and each draws that layer's weights (lines and thumbnails)."""
    torch.manual_seed(1)
    w = torch.softmax(torch.randn(4, 2, 5, 5) * 3, -1).double()  # (layers, heads, L, L)
    tokens = ["the", "cat", "sat", "on", "it"]
    frame = framed(watched, selfattn.head_view(w, tokens, include_layers=[1, 3])._repr_html_())
    assert frame.eval_on_selector_all("#layer option", "os => os.map(o => o.textContent)") == ["1", "3"]
    assert frame.eval_on_selector("#app", "a => a.dataset.hash") == "#view=head&layer=3&head=0&query=0"
    assert_head_view(frame, {h: w[3, h].numpy() for h in range(2)})
    frame.select_option("#layer", label="1")
    frame.wait_for_function("document.querySelector('#app').dataset.layer === '1'")
    assert_head_view(frame, {h: w[1, h].numpy() for h in range(2)})
    frame.click("[data-testid=view-btn-model]")
    rows = frame.eval_on_selector_all(".mv-grid tr th:first-child", "ths => ths.map(t => t.textContent)")
    assert [r for r in rows if r] == ["layer 1", "layer 3"]
    for (l, h), px in thumbnail_pixels(frame).items():  # l: the row drawn, 0 and 1
        want = w[(1, 3)[l], h].numpy()
        np.testing.assert_allclose(
            px, expected_colours(want, np.ones_like(want, dtype=bool)), atol=TOL["colour_channel"]
        )
    frame.click("[data-testid=mv-thumb][data-layer='1'][data-head='1']")
    frame.wait_for_function("document.querySelector('#app').dataset.view === 'head'")
    assert frame.eval_on_selector("#app", "a => a.dataset.hash") == "#view=head&layer=3&head=1&query=0"
    assert_head_view(frame, {1: w[3, 1].numpy()})
    assert_offline(watched)


# --- the example notebook, in a real kernel ----------------------------------------------------


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    import nbclient
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    src = str(Path(selfattn.__file__).resolve().parents[1])
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = src + (os.pathsep + env_path if env_path else "")  # the kernel imports this tree
    try:
        client = nbclient.NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path_factory.mktemp("nb"))}}
        )
        client.execute()
    finally:
        os.environ["PYTHONPATH"] = env_path
    return nb


def test_the_example_notebook_runs_and_its_pages_open_offline(executed, watched):
    outputs = [
        o["data"]["text/html"]
        for c in executed.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if "text/html" in o.get("data", {})
    ]
    pages = [o for o in outputs if o.startswith('<iframe sandbox="allow-scripts" srcdoc=')]
    assert len(pages) >= 7, len(pages)
    for n, out in enumerate(pages):
        assert "require(" not in html.unescape(out) and "https://" not in html.unescape(out).split("<script>")[0]
        frame = framed(watched, out)
        assert frame.eval_on_selector("#app", "a => a.dataset.ready") == "1"
        if n == 0:
            watched.page.screenshot(path=str(SCREENSHOTS / "selfattn-notebook-output.png"))
        assert_offline(watched)
    # the real model's page: SmolLM2's tokens and numbers, as Python computed them
    real = [o for o in pages if "LlamaForCausalLM" in html.unescape(o)]
    assert len(real) == 1
    frame = framed(watched, real[0])
    tokens = frame.eval_on_selector_all("[data-testid=token]", "ts => ts.map(t => t.textContent)")
    assert "".join(tokens).replace(" ", "").endswith("becauseitwastired")  # pieces shown without their leading space
    assert_offline(watched)
