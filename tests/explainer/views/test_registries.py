"""A head type and a view are each one registry entry (views/head_types.REGISTRY, views/registry.VIEWS): a toy
of each, registered at run time, shows up in the CLI's tables, the page (headless Chromium) and the notebook,
and is gone once removed."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import selfattn
from selfattn.cli import main
from selfattn.explainer import tracing
from selfattn.explainer.analysis import head_types
from selfattn.explainer.session import Explainer
from selfattn.explainer.views import registry
from tests.explainer.documents import explained
from tests.explainer.planted import plant
from tests.explainer.tiny import tiny_explainer
from tests.explainer.views.test_notebook import assert_offline, framed, watched  # noqa: F401 (fixture)
from tests.explainer.web.test_browser import browser, wait_ready  # noqa: F401 (fixture)
from tests.tolerances import TOL

TEXT = "。" * 12  # 13 tokens, no word with a role: the planted head's toy pattern is measured on 11 rows
TOY_COLOUR = "#00aa55"
TOY_TYPE = head_types.HeadType(
    "toy",
    lambda k: (k.j == k.i - 2) & k.rows,  # the key two back: the planted head's
    {
        "short": {"zh": "玩具", "en": "toyish"},
        "label": {"zh": "玩具类型", "en": "toy type"},
        "does": {"zh": "看往前第二个", "en": "looks two tokens back"},
        "heads": {"zh": "玩具 head", "en": "toy heads"},
    },
    colour=TOY_COLOUR,
    style="bold red",
)
TOY_VIEW = registry.View(
    "toy",
    label={"zh": "玩具视图", "en": "Toy view"},
    title={"zh": "玩具视图：每个 head", "en": "Toy view: every head"},
    hint={"zh": "和模型视图画的一样。", "en": "Drawn as the model view is."},
    render="model",
    pages=registry.PAGES,
)


@pytest.fixture
def toys():
    head_types.register(TOY_TYPE)
    registry.register(TOY_VIEW)
    try:
        yield
    finally:
        head_types.unregister("toy")
        registry.unregister("toy")


@pytest.fixture(scope="module")
def explainer():
    """The tiny decoder with L0H0 planted to look two tokens back (`planted.plant`): the toy type's head. (A
    toy of every visible key, chance 1, is never credited now: rows where every key is a target carry no
    evidence against chance.)"""
    ex = tiny_explainer()
    plant(ex.model, back=2)
    return ex


def _toy_heads(doc: dict) -> list[tuple[int, int]]:
    return [(l, h) for l, row in enumerate(doc["descriptions"]) for h, d in enumerate(row) if d["kind"] == "toy"]


def test_a_toy_head_type_is_measured_named_and_coloured(toys, explainer):
    doc = explained(explainer, TEXT)
    L = len(doc["tokens"])
    toy = _toy_heads(doc)
    assert toy, "the random tiny model has heads with no clearer type: they are the toy's"
    for l, h in toy:
        m = doc["descriptions"][l][h]["scores"]["toy"]
        # the planted head: the weight two back, by a float64 softmax of its own q·k (not through the float32 lse,
        # whose rounding at |lse| ~ 100 is 1e-5 of a weight), uniform's 1/(i + 1)
        layer = tracing.trace(explainer, TEXT).layers[l]
        q, k = layer.q[h].double(), layer.k[layer.kv_head(h)].double()
        scores = (q @ k.T * layer.scale).masked_fill(~layer.visible, float("-inf"))
        w = torch.softmax(scores, dim=-1).numpy()
        assert m["score"] == pytest.approx(np.mean([w[i, i - 2] for i in range(2, L)]), abs=TOL["float32_weights"])
        assert m["score"] > 0.99 and m["chance"] == pytest.approx(np.mean([1 / (i + 1) for i in range(2, L)]))
        assert m["rows"] == L - 2 and m["p"] < 1e-6  # every row from the third on
        assert "looks two tokens back" in doc["descriptions"][l][h]["text"]["en"]
    legend = doc["head_types"]
    assert legend["types"][-1] == "toy" and legend["colours"]["toy"] == TOY_COLOUR
    assert legend["labels"]["toy"] == {"zh": "玩具类型", "en": "toy type"}
    assert legend["short"]["toy"]["en"] == "toyish"


def test_the_cli_tables_show_the_toy_type(toys, explainer, monkeypatch, capsys):
    monkeypatch.setattr(Explainer, "load", classmethod(lambda cls, path=None, dtype=None: explainer))
    assert main(["heads", "--json", "--probe-length", "12"]) == 0
    t = json.loads(capsys.readouterr().out)
    typed = [c for row in t["heads"] for c in row if c["type"] == "toy"]
    assert typed and "toy" in t["types"]
    assert main(["heads", "--probe-length", "12", "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "toyish 100" in out  # a cell: the type's short word and its share
    assert any(line.startswith("toy heads: ") for line in out.splitlines())
    assert main(["heads", "--probe-length", "12", "--lang", "zh"]) == 0
    assert "玩具 100" in capsys.readouterr().out
    l, h = _toy_heads(explained(explainer, TEXT))[0]
    assert main(["explain", TEXT, "--layer", str(l), "--head", str(h), "--lang", "en"]) == 0
    assert "looks two tokens back" in " ".join(capsys.readouterr().out.split())


def test_the_notebook_offers_the_toy_view(toys, explainer):
    e = selfattn.explain(TEXT, model=explainer)
    assert "toy" in {h["type"] for h in e.heads()}
    page = e.show("toy")._repr_html_()
    assert "玩具视图" in page and "toy type" in page
    assert "玩具视图" in e._repr_html_()  # the default page has the tab too
    with pytest.raises(ValueError, match="'nosuch'"):
        e.show("nosuch")


def test_the_page_draws_the_toy_view_and_type(toys, explainer, watched):  # noqa: F811
    e = selfattn.explain(TEXT, model=explainer)
    frame = framed(watched, e.show("toy")._repr_html_())
    st = frame.eval_on_selector("#app", "a => ({...a.dataset})")
    assert st["view"] == "toy" and "view=toy" in st["hash"]
    assert frame.is_visible("[data-testid=view-toy]") and not frame.is_visible("[data-testid=view-model]")
    assert frame.inner_text("#toy-title") == "玩具视图：每个 head"
    assert frame.inner_text("[data-testid=view-btn-toy]") == "玩具视图"
    types = frame.eval_on_selector_all("#toy-body [data-testid=mv-thumb]", "bs => bs.map(b => b.dataset.type)")
    # the model view types each head on the page's own weights (packing.head_type_names); heads() reads
    # `selfattn heads`' taxonomy (probe + text): the toy type is drawn, one thumbnail per head
    assert len(types) == len(e.heads()) and "toy" in types
    key = frame.eval_on_selector(
        "#toy-body .mv-key[data-type=toy]", "k => [k.textContent, getComputedStyle(k).borderLeftColor]"
    )
    rgb = [int(TOY_COLOUR[i : i + 2], 16) for i in (1, 3, 5)]
    assert key == ["玩具类型", f"rgb({rgb[0]}, {rgb[1]}, {rgb[2]})"]
    frame.click("#lang")
    assert frame.inner_text("[data-testid=view-btn-toy]") == "Toy view"
    assert frame.inner_text("#toy-body .mv-key[data-type=toy]") == "toy type"
    frame.click("[data-testid=view-btn-model]")
    assert frame.eval_on_selector("#app", "a => a.dataset.view") == "model"
    frame.click("[data-testid=view-btn-toy]")
    assert frame.eval_on_selector("#app", "a => a.dataset.view") == "toy"
    frame.click("#toy-body [data-testid=mv-thumb][data-layer='1'][data-head='0']")  # opens the head, as the model view
    wait_ready(frame)  # its layer unpacked first, where the page had not shown it yet
    st = frame.eval_on_selector("#app", "a => ({...a.dataset})")
    assert (st["view"], st["layer"], st["head"]) == ("explore", "1", "0")
    assert_offline(watched)


def test_the_attention_page_has_the_toy_view(toys, watched):  # noqa: F811
    w = np.random.default_rng(0).dirichlet(np.ones(5), size=(2, 3, 5))
    frame = framed(watched, selfattn.model_view(w, list("abcde"))._repr_html_())  # Latin tokens: an English page
    assert frame.inner_text("[data-testid=view-btn-toy]") == "Toy view"
    frame.click("[data-testid=view-btn-toy]")
    assert frame.eval_on_selector("#app", "a => a.dataset.view") == "toy"
    assert len(frame.query_selector_all("#toy-body [data-testid=mv-thumb]")) == 6
    assert frame.query_selector("#toy-body .mv-key[data-type=toy]") is not None
    assert_offline(watched)


def test_removed_entries_are_gone(explainer):
    assert "toy" not in head_types.REGISTRY and "toy" not in registry.VIEWS
    doc = explained(explainer, TEXT)
    assert "toy" not in doc["head_types"]["types"] and not _toy_heads(doc)
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.VIEWS["model"])
    with pytest.raises(ValueError, match="needs words\\['label'\\]"):
        head_types.HeadType("bad", None, {"short": {"zh": "", "en": ""}})
    with pytest.raises(ValueError, match="render must be one of"):
        registry.View("bad", TOY_VIEW.label, TOY_VIEW.title, TOY_VIEW.hint, render="nowhere")
