"""The HTML report and the web app in real headless Chromium (Debian `chromium`, driven by playwright).

A person's path through the page — pick a head, click a token, step through the stages,
switch an intervention off — and at every step the numbers on screen must equal
`selfattn.reference` (NumPy float64 on the model's weights) within display rounding.
Also: no console error, no network request from the report, token text shown and never run,
CJK drawn with the WenQuanYi font, and a 1,000-token input that renders in seconds.

These tests never skip: without Chromium they fail, naming the set-up script
(`scripts/setup-browser.sh`, run by `make test`).
"""

from __future__ import annotations

import functools
import html
import http.server
import os
import re
import shutil
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import uvicorn
from playwright.sync_api import Page, sync_playwright

from selfattn.explainer import tracing
from selfattn.explainer.interventions import Intervention
from selfattn.explainer.views import head_sentences as heads_module
from selfattn.explainer.views import packing, report
from selfattn.explainer.web import server
from tests.explainer import truth
from tests.explainer.documents import both, explained, explanation, weights
from tests.explainer.tiny import LONG_TEXT, MAX_LEN, slash_explainer, tiny_explainer
from tests.tolerances import TOL

CHROMIUM = os.environ.get("SELFATTN_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(os.environ.get("SELFATTN_SCREENSHOTS", "/tmp"))

TEXT = "一只蓝色怪兽走进森林"
LONG_READY_S = 8.0
"""A 1,000-token page must be drawn and answering within this (2 shared CPU cores in CI)."""
LONG_TASK_MS = 3000
"""…and no single task may block the page longer than this (a frozen page would)."""


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"Chromium not found at {CHROMIUM}: run scripts/setup-browser.sh (make test does); "
            "the browser tests do not skip"
        )
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@dataclass
class Watched:
    """A page, with every console error, uncaught exception and request it made."""

    page: Page
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


@pytest.fixture
def watched(browser):
    context = browser.new_context(viewport={"width": 1360, "height": 1000})
    page = context.new_page()
    w = Watched(page)
    page.on("console", lambda m: w.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: w.errors.append(f"uncaught: {e}"))
    page.on("request", lambda r: w.requests.append(r.url))
    # the longest task that blocked the page (a frozen page shows up here)
    page.add_init_script("""
        window.__longest = 0;
        new PerformanceObserver((list) => {
          for (const e of list.getEntries()) window.__longest = Math.max(window.__longest, e.duration);
        }).observe({type: "longtask", buffered: true});
    """)
    yield w
    context.close()


@pytest.fixture(scope="module")
def explainer():
    return tiny_explainer()


@pytest.fixture(scope="module")
def app_url(explainer):
    """The web app on 127.0.0.1, on a free port, in a thread of this process."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(server.create_app(explainer), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started:
        assert time.monotonic() < deadline, "the app did not start within 10 s"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/"
    srv.should_exit = True
    thread.join(10)
    sock.close()


def open_report(w: Watched, doc, tmp_path, name="report.html") -> str:
    path = report.write_html(doc, tmp_path / name)
    url = path.resolve().as_uri()
    w.page.goto(url)
    wait_ready(w.page)
    return url


# --- reading the page ----------------------------------------------------------------------


def wait_ready(page: Page, timeout_s: float = 10.0):
    page.wait_for_selector("#app[data-ready='1']:not([data-busy='1'])", state="attached", timeout=timeout_s * 1000)


def value(text: str) -> float:
    text = text.strip().replace("\u2212", "-")
    if text in ("-inf", "inf"):
        return float(text)
    if text.endswith("%"):
        return float(text[:-1]) / 100
    return float(text)


def shown_row(page: Page, name: str) -> dict[int, float]:
    """{key j: number} of one row of the stage table (row-scores, row-weights, …)."""
    cells = page.eval_on_selector_all(
        f"[data-testid=row-{name}] td", "tds => tds.map(td => [Number(td.dataset.key), td.textContent])"
    )
    assert cells, f"row {name} is not shown"
    return {j: value(text) for j, text in cells}


def shown_vector(page: Page, name: str) -> np.ndarray:
    texts = page.eval_on_selector_all(f"[data-testid=vec-{name}] .nums span", "ss => ss.map(s => s.textContent)")
    assert texts, f"vector {name} is not shown"
    return np.array([value(t) for t in texts])


def assert_row(page: Page, name: str, want: np.ndarray, atol: float):
    got = shown_row(page, name)
    keys = sorted(got)
    shown, expected = np.array([got[j] for j in keys]), want[keys]
    inf = np.isinf(expected)
    assert (shown[inf] == expected[inf]).all(), f"{name}: -inf where the reference has it"
    np.testing.assert_allclose(shown[~inf], expected[~inf], rtol=0, atol=atol, err_msg=f"row {name}")


def state(page: Page) -> dict:
    return page.eval_on_selector("#app", "a => ({...a.dataset})")


def stage(page: Page, name: str):
    page.click(f"[data-testid=stage-btn-{name}]")
    assert state(page)["stage"] == name


def prediction(page: Page, testid: str = "prediction-row") -> list[tuple[str, float]]:
    rows = page.eval_on_selector_all(
        f"[data-testid={testid}]",
        "rs => rs.map(r => [r.querySelector('.word').textContent, r.querySelector('.prob').textContent])",
    )
    return [(tok, value(p)) for tok, p in rows]


def assert_prediction(page: Page, want: list[dict], testid: str = "prediction-row"):
    shown = prediction(page, testid)
    assert [tok for tok, _ in shown] == [p.get("shown", p["token"]) for p in want]  # as a person reads it
    np.testing.assert_allclose([p for _, p in shown], [p["prob"] for p in want], rtol=0, atol=TOL["page_weight"])


def assert_clean(w: Watched, allowed_requests: set[str]):
    assert w.errors == [], f"console errors: {w.errors}"
    allowed = {u.split("#")[0] for u in allowed_requests}  # a fragment (the view state) is never requested
    stray = [u for u in w.requests if u.split("#")[0] not in allowed]
    assert stray == [], f"unexpected requests: {stray}"


# --- the report ----------------------------------------------------------------------------


def test_report_steps_through_the_reference_numbers(watched, explainer, tmp_path):
    page = watched.page
    doc = explained(explainer, TEXT, layers=[0, 1])  # both layers' d_model vectors whole (test_vectors_page: not)
    url = open_report(watched, doc, tmp_path)
    _, ids, _ = explainer.tokenize(TEXT)
    assert page.eval_on_selector_all("[data-testid=token]", "ts => ts.map(t => t.textContent)") == doc["tokens"]
    half = lambda a: a.astype(np.float16).astype(np.float64)  # noqa: E731  # the page holds q, k, v in float16

    # pick layer 0, head 1, the query 走进 (position 4): a person's clicks
    page.select_option("[data-testid=layer-select]", "0")
    page.select_option("[data-testid=head-select]", "1")
    page.click("[data-testid=token][data-index='4']")
    assert (state(page)["layer"], state(page)["head"], state(page)["row"]) == ("0", "1", "4")
    ref = truth.stages(explainer.model, ids, 0, 1)
    i = 4

    assert state(page)["stage"] == "x"
    np.testing.assert_allclose(shown_vector(page, "x"), ref["x"][i], rtol=0, atol=TOL["page_number"])
    page.click("[data-testid=stage-next]")  # Q/K/V
    page.click("[data-testid=key-table] th[data-key='2']")  # show K, V of 蓝色
    np.testing.assert_allclose(shown_vector(page, "q"), half(ref["q"][i]), rtol=0, atol=TOL["page_number"])
    np.testing.assert_allclose(shown_vector(page, "k"), half(ref["k"][2]), rtol=0, atol=TOL["page_number"])
    np.testing.assert_allclose(shown_vector(page, "v"), half(ref["v"][2]), rtol=0, atol=TOL["page_number"])
    page.click("[data-testid=stage-next]")  # QKᵀ
    assert_row(page, "scores", ref["scores"][i], TOL["page_number"])
    page.click("[data-testid=stage-next]")  # ÷√d_k
    assert_row(page, "scaled", ref["scaled"][i], TOL["page_number"])
    page.click("[data-testid=stage-next]")  # mask
    assert shown_row(page, "visible") == {j: float(v) for j, v in enumerate(ref["mask"][i])}
    assert_row(page, "masked", ref["masked"][i], TOL["page_number"])
    assert shown_row(page, "masked")[5] == -np.inf  # 森林 is in 走进's future
    page.click("[data-testid=stage-next]")  # softmax
    assert_row(page, "weights", ref["weights"][i], TOL["page_weight"])
    page.click("[data-testid=stage-next]")  # ·V
    np.testing.assert_allclose(shown_vector(page, "weighted"), ref["weighted"][i], rtol=0, atol=TOL["page_number"])
    page.click("[data-testid=stage-next]")  # output
    attn_out, block_out = truth.outputs(explainer.model, ids, 0)
    np.testing.assert_allclose(shown_vector(page, "attn_out"), attn_out[i], rtol=0, atol=TOL["page_number"])
    np.testing.assert_allclose(shown_vector(page, "output"), block_out[i], rtol=0, atol=TOL["page_number"])
    assert page.is_disabled("[data-testid=stage-next]")

    # another head through the summary grid: layer 1 head 0, softmax of the last token
    page.click("[data-testid=head-cell][data-layer='1'][data-head='0']")
    wait_ready(page)
    page.click("[data-testid=token][data-index='5']")
    stage(page, "softmax")
    assert_row(page, "weights", truth.stages(explainer.model, ids, 1, 0)["weights"][5], TOL["page_weight"])
    assert_prediction(page, doc["prediction"])
    page.screenshot(path=str(SCREENSHOTS / "selfattn-report.png"), full_page=True)
    assert_clean(watched, {url})


def test_report_shows_the_numbers_of_the_json_export_for_every_head(watched, tmp_path):
    """One source, several views: for each layer × head (grouped-query attention: 4 query heads
    on 2 key/value heads), the page's stages equal the Explanation's own (`LayerTrace.stages`, float64)."""
    page = watched.page
    e, doc = both(tiny_explainer(n_heads=4, n_kv_heads=2), TEXT)
    url = open_report(watched, doc, tmp_path)
    assert (int(state(page)["layer"]), int(state(page)["head"])) == (doc["selected"]["layer"], doc["selected"]["head"])
    stage(page, "softmax")
    i = int(state(page)["row"])  # the row the page opens on (export.opened_query): one with masked keys
    assert i == doc["opened"]["row"] and i < len(doc["tokens"]) - 1
    for l, layer in enumerate(e.trace.layers):
        for h in range(layer.n_heads):
            page.click(f"[data-testid=head-cell][data-layer='{l}'][data-head='{h}']")
            wait_ready(page)  # a layer is unpacked when first shown (data.js unpackLayers)
            st = {k: v.numpy() for k, v in layer.stages(h).items()}
            assert_row(page, "scaled", st["scaled"][i], 0.5e-4 + 1e-12)
            assert_row(page, "masked", st["masked"][i], 0.5e-4 + 1e-12)
            assert np.isinf(st["masked"][i]).any() and "−inf" in page.inner_text("[data-testid=row-masked]")
            assert_row(page, "weights", st["weights"][i], 0.5e-4 + 1e-12)
    assert_clean(watched, {url})


def test_why_the_page_opened_on_a_row_is_said_under_the_head_it_opened_on_only(watched, tmp_path):
    """export.opened_query's sentence names the shown head's link ("its sentence is about … → …"): under
    another head, whose sentence names other links, it would be a stale line under a new label."""
    page = watched.page
    doc = explained(tiny_explainer(n_heads=4, n_kv_heads=2), TEXT)
    url = open_report(watched, doc, tmp_path)
    l, h = doc["selected"]["layer"], doc["selected"]["head"]
    assert page.inner_text("#opened") == doc["opened"]["text"]["zh"] and page.is_visible("#opened")
    for other in [(l, (h + 1) % 4), (1 - l, h)]:
        page.click(f"[data-testid=head-cell][data-layer='{other[0]}'][data-head='{other[1]}']")
        wait_ready(page)
        assert int(state(page)["row"]) == doc["opened"]["row"] and not page.is_visible("#opened"), other
    page.click(f"[data-testid=head-cell][data-layer='{l}'][data-head='{h}']")
    wait_ready(page)
    assert page.inner_text("#opened") == doc["opened"]["text"]["zh"]
    assert_clean(watched, {url})


def test_report_hover_shows_what_a_token_attends_to(watched, explainer, tmp_path):
    page = watched.page
    doc = explained(explainer, TEXT, layer=0, head=0)
    url = open_report(watched, doc, tmp_path)
    _, ids, _ = explainer.tokenize(TEXT)
    weights = truth.stages(explainer.model, ids, 0, 0)["weights"]
    page.hover("[data-testid=token][data-index='3']")  # 怪兽
    titles = page.eval_on_selector_all("[data-testid=token]", "ts => ts.map(t => t.title)")
    np.testing.assert_allclose([value(t) for t in titles], weights[3], rtol=0, atol=TOL["page_weight"])
    top = int(np.argmax(weights[3]))
    assert page.text_content("[data-testid=attends]").startswith(f"“怪兽” 关注：{doc['tokens'][top]}")
    # a click on the heatmap picks that query row
    box = page.query_selector("[data-testid=heatmap]").bounding_box()
    page.mouse.move(box["x"] + box["width"] - 40, box["y"] + box["height"] - 40)
    page.mouse.down()
    page.mouse.up()
    assert state(page)["row"] == "5"
    assert page.is_visible("[data-testid=heatmap-tip]")
    # the picture can be saved, as a PNG made in the page
    with page.expect_download() as download:
        page.click("[data-testid=save-png]")
    assert download.value.suggested_filename == "attention-layer0-head0.png"
    assert Path(download.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # English on the toggle, the same numbers
    stage(page, "softmax")
    before = shown_row(page, "weights")
    page.click("[data-testid=lang-toggle]")
    assert page.text_content("h1").startswith("What is Self-Attention") and state(page)["lang"] == "en"
    assert shown_row(page, "weights") == before
    assert_clean(watched, {url} | {u for u in watched.requests if u.startswith("blob:file://")})


def test_report_shows_markup_tokens_as_text(watched, tmp_path):
    page = watched.page
    evil = ["<script>window.__pwned=1</script>", "<img src=x onerror=window.__pwned=2>", "</script>"]
    doc = explained(slash_explainer(), " / ".join(["一只", *evil, "森林"]))
    url = open_report(watched, doc, tmp_path)
    assert page.eval_on_selector_all("[data-testid=token]", "ts => ts.map(t => t.textContent)") == [
        "<bos>",
        "一只",
        *evil,
        "森林",
    ]
    assert page.evaluate("window.__pwned") is None
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate("document.scripts.length") == 2
    stage(page, "softmax")
    heads = page.eval_on_selector_all("[data-testid=key-table] th[data-key] .word", "ws => ws.map(w => w.textContent)")
    assert heads == doc["tokens"]
    assert_clean(watched, {url})


def test_report_draws_chinese_with_the_wenquanyi_font(watched, explainer, tmp_path):
    page = watched.page
    open_report(watched, explained(explainer, TEXT), tmp_path)
    # the font Chromium actually used for the token 蓝色 (DevTools protocol), not just the CSS asked for
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument")["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": "[data-testid=token][data-index='2']"})["nodeId"]
    fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    assert [f["familyName"] for f in fonts] == ["WenQuanYi Micro Hei"], fonts
    # and the glyphs are real: six characters draw six different pictures, none the missing-glyph box
    pictures = page.evaluate(
        """(chars) => chars.map((ch) => {
        const c = document.createElement("canvas"); c.width = c.height = 40;
        const g = c.getContext("2d");
        g.font = '32px ' + getComputedStyle(document.querySelector("[data-testid=token]")).fontFamily;
        g.fillText(ch, 4, 34);
        return [Array.from(g.getImageData(0, 0, 40, 40).data).join(","), g.measureText(ch).width];
    })""",
        list("一只蓝色怪兽") + ["\ue000"],
    )
    images = [p for p, _ in pictures]
    assert len(set(images[:6])) == 6 and images[6] not in images[:6]
    assert [w for _, w in pictures[:6]] == [32] * 6  # full-width ideographs
    path = SCREENSHOTS / "selfattn-cjk.png"
    page.screenshot(path=str(path), clip={"x": 0, "y": 0, "width": 900, "height": 260})
    assert path.stat().st_size > 0


def test_report_of_1000_tokens_renders_without_freezing(watched, explainer, tmp_path):
    page = watched.page
    doc = explained(explainer, LONG_TEXT, layer=0, head=1)
    L = len(doc["tokens"])
    assert L == 1001
    path = report.write_html(doc, tmp_path / "long.html")
    started = time.monotonic()
    page.goto(path.resolve().as_uri())
    wait_ready(page, LONG_READY_S)
    page.click(f"[data-testid=token][data-index='{L - 2}']")  # answers a click at once
    stage(page, "softmax")
    elapsed = time.monotonic() - started
    assert elapsed < LONG_READY_S, f"1,000 tokens took {elapsed:.1f} s"
    assert page.evaluate("window.__longest") < LONG_TASK_MS
    _, ids, _ = explainer.tokenize(LONG_TEXT)
    ref = truth.stages(explainer.model, ids, 0, 1)
    assert_row(page, "weights", ref["weights"][L - 2], TOL["page_weight"])  # the columns shown: top keys
    assert len(shown_row(page, "weights")) < 30  # …not 1,001 cells
    colours = page.evaluate("""() => {
        const c = document.querySelector("[data-testid=heatmap]");
        const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
        const seen = new Set(); for (let p = 0; p < d.length; p += 4) seen.add(d[p] + "," + d[p+1] + "," + d[p+2]);
        return seen.size; }""")
    assert colours > 20, "the heatmap looks empty"
    assert page.eval_on_selector_all("[data-testid=token]", "ts => ts.length") == L
    page.screenshot(path=str(SCREENSHOTS / "selfattn-long.png"))
    assert_clean(watched, {path.resolve().as_uri()})


# --- the web app ---------------------------------------------------------------------------


def submit(page: Page, text: str):
    page.fill("[data-testid=text-input]", text)
    with page.expect_response(lambda r: r.url.endswith("/api/explain")):
        page.click("[data-testid=submit]")
    wait_ready(page, LONG_READY_S)


def test_app_explains_a_typed_sentence_and_its_interventions(watched, explainer, app_url):
    page = watched.page
    page.goto(app_url)
    wait_ready(page)
    text = "两条红色鱼游进大海"
    submit(page, text)
    tokens, ids, _ = explainer.tokenize(text)
    assert page.eval_on_selector_all("[data-testid=token]", "ts => ts.map(t => t.textContent)") == tokens
    last = int(state(page)["row"])  # the row the page opens on (export.opened_query), which the mask hides keys from
    assert last == explained(explainer, text)["opened"]["row"] < len(tokens) - 1
    page.select_option("[data-testid=layer-select]", "0")  # the answer held the shown layer: layer 0 is fetched
    page.select_option("[data-testid=head-select]", "0")
    wait_ready(page)
    stage(page, "softmax")
    assert_row(page, "weights", truth.stages(explainer.model, ids, 0, 0)["weights"][last], TOL["page_weight"])
    assert_prediction(page, explained(explainer, text)["prediction"])

    # switch off ÷√d_k: the weights and the prediction change, and the page says from what
    with page.expect_response(lambda r: r.url.endswith("/api/explain")):
        page.check("[data-testid=toggle-no_scaling]")
    wait_ready(page)
    assert (state(page)["layer"], state(page)["head"], state(page)["stage"]) == ("0", "0", "softmax")
    no_scaling = truth.stages(explainer.model, ids, 0, 0, scaling=False)
    assert_row(page, "scaled", no_scaling["scaled"][last], TOL["page_number"])
    assert_row(page, "weights", no_scaling["weights"][last], TOL["page_weight"])
    assert_row(page, "baseline", truth.stages(explainer.model, ids, 0, 0)["weights"][last], TOL["page_weight"])
    assert_prediction(page, explained(explainer, text, intervention=Intervention(scaling=False))["prediction"])
    assert_prediction(page, explained(explainer, text)["prediction"], testid="baseline-row")
    assert "关闭 ÷√d_k" in page.text_content("[data-testid=intervention]")  # the registry's words (said)

    # a temperature, and the causal mask off: row 0 now reads the future too
    page.fill("[data-testid=temperature]", "2")
    with page.expect_response(lambda r: r.url.endswith("/api/explain")):
        page.press("[data-testid=temperature]", "Enter")
    wait_ready(page)
    with page.expect_response(lambda r: r.url.endswith("/api/explain")):
        page.check("[data-testid=toggle-no_causal]")
    wait_ready(page)
    page.click("[data-testid=token][data-index='0']")
    stage(page, "softmax")
    both = truth.stages(explainer.model, ids, 0, 0, scaling=False, causal=False, temperature=2.0)
    assert shown_row(page, "visible") == {j: 1.0 for j in range(len(tokens))}
    assert_row(page, "weights", both["weights"][0], TOL["page_weight"])
    page.screenshot(path=str(SCREENSHOTS / "selfattn-app.png"), full_page=True)
    origin = app_url.rstrip("/")
    assert_clean(watched, {app_url, f"{origin}/api/explain"})


def test_app_says_why_a_text_is_refused(watched, app_url):
    page = watched.page
    page.goto(app_url)
    wait_ready(page)
    page.fill("[data-testid=text-input]", "森林" * (MAX_LEN + 10))
    with page.expect_response(lambda r: r.url.endswith("/api/explain")) as answer:
        page.click("[data-testid=submit]")
    assert answer.value.status == 422
    page.wait_for_selector("[data-testid=error]:not([hidden])")
    assert f"reads at most {MAX_LEN}" in page.text_content("[data-testid=error]")
    assert page.get_attribute("[data-testid=text-input]", "maxlength") == "4000"
    # the browser reports the 422 itself; nothing else may go wrong
    assert [e for e in watched.errors if "422" not in e] == []


def test_app_renders_1000_tokens(watched, app_url):
    page = watched.page
    page.goto(app_url)
    wait_ready(page)
    started = time.monotonic()
    submit(page, LONG_TEXT)
    rendered = time.monotonic()
    assert page.eval_on_selector_all("[data-testid=token]", "ts => ts.length") == 1001
    assert int(state(page)["renderMs"]) < 1000 * LONG_READY_S / 2
    assert page.evaluate("window.__longest") < LONG_TASK_MS
    page.click("[data-testid=token][data-index='500']")
    assert state(page)["row"] == "500"
    print(f"1,000 tokens in the app: {rendered - started:.1f} s (server and page)")
    assert_clean(watched, {app_url, app_url.rstrip("/") + "/api/explain"})


# --- issue 12: heads that teach, experiments, every stage readable -------------------------

SHOTS = Path(os.environ.get("SELFATTN_TEACH_SHOTS", "/tmp/teach-shots"))


def shot(page: Page, name: str, selector: str | None = None):
    SHOTS.mkdir(parents=True, exist_ok=True)
    if selector:
        page.locator(selector).screenshot(path=str(SHOTS / name))
    else:
        page.screenshot(path=str(SHOTS / name), full_page=True)


def data_values(page: Page, selector: str) -> list[float]:
    return page.eval_on_selector_all(selector, "es => es.map(e => Number(e.dataset.value))")


def open_default(watched, tmp_path, lang: str):
    """(doc, page): the default model's page of TEXT opened, in `lang`."""
    from selfattn.explainer.session import Explainer

    doc = explained(Explainer.load(), TEXT)
    open_report(watched, doc, tmp_path)
    page = watched.page
    if lang == "en":
        page.click("[data-testid=lang-toggle]")
        wait_ready(page)
    return doc, page


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_default_view_of_the_default_model_names_a_tutorial_link(watched, tmp_path, lang):
    doc, page = open_default(watched, tmp_path, lang)
    sel = doc["selected"]
    d = doc["descriptions"][sel["layer"]][sel["head"]]
    assert d["kind"] == "relation"  # the probe check of this relation: test_heads.py
    shown = page.text_content("[data-testid=head-description]")
    assert d["text"][lang] in shown
    cells = page.eval_on_selector_all("[data-testid=head-cell-description]", "cs => cs.map(c => c.textContent)")
    assert cells == [h["text"][lang] for heads in doc["descriptions"] for h in heads]
    note = page.text_content("[data-testid=bos-note]")
    assert heads_module.percent(doc["first_token"]["mean"]) in note
    if lang == "zh":
        body = page.text_content("main")
        for word in ("decoder", "learned absolute", "Query \\ Key"):
            assert word not in body
    shot(page, f"default-{lang}.png")
    assert_clean(watched, {page.url})


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_tutorial_heads_evidence_folds_out_under_its_sentence(watched, tmp_path, lang):
    """The fold under the head's sentence lists, for each relation credited to it, every sentence's row: the query
    word, the key word, the weight and what the other words give that key (the held analysis' evidence); a head
    holding no relation shows no fold."""
    doc, page = open_default(watched, tmp_path, lang)
    sel = doc["selected"]
    (r,) = doc["descriptions"][sel["layer"]][sel["head"]]["verdict"]["relations"]
    assert page.is_hidden("[data-testid=evidence] li")  # folded until opened
    page.click("[data-testid=evidence] summary")
    rows = page.eval_on_selector_all("[data-testid=evidence] li", "ls => ls.map(l => l.textContent)")
    assert len(rows) == len(r["evidence"]) >= 8
    for shown, e in zip(rows, r["evidence"], strict=True):
        assert e["text"] in shown and f"{e['query']}→{e['key']} {heads_module.percent(e['weight'])}" in shown
        assert heads_module.percent(e["baseline"]) in shown
    head = page.text_content("[data-testid=evidence] p")
    assert heads_module.percent(r["baseline"]["weight"]) in head
    bare = [
        (l, h) for l, row in enumerate(doc["descriptions"]) for h, d in enumerate(row) if not d["verdict"]["relations"]
    ]
    page.select_option("[data-testid=layer-select]", str(bare[0][0]))
    page.select_option("[data-testid=head-select]", str(bare[0][1]))
    assert page.is_hidden("[data-testid=evidence]")
    assert_clean(watched, {page.url})


def test_report_stages_q_dot_k_and_v_mixing_equal_python(watched, explainer, tmp_path):
    doc = explained(explainer, TEXT)
    open_report(watched, doc, tmp_path)
    page = watched.page
    trace = tracing.trace_with_controls(explainer, TEXT)[
        0
    ]  # the text as explain traces it: one batch with its controls
    l, h, i = 1, 0, 4
    page.select_option("[data-testid=layer-select]", str(l))
    page.select_option("[data-testid=head-select]", str(h))
    page.click(f"[data-testid=token][data-index='{i}']")
    stage(page, "scores")
    j = int(page.eval_on_selector(".keys th.focus", "th => th.dataset.key"))
    layer = trace.layers[l]
    q, k = layer.q[h, i].double().numpy(), layer.k[layer.kv_head(h), j].double().numpy()
    half = lambda a: a.astype(np.float16).astype(np.float64)  # noqa: E731  # the page holds q, k, v in float16
    products = data_values(page, "[data-testid=qk-products] td[data-dim]")
    np.testing.assert_allclose(products, half(q) * half(k), rtol=0, atol=TOL["page_data"])
    total = data_values(page, "[data-testid=qk-sum]")[0]  # the score: Python's from the exact q, k, to 4 decimals
    assert total == pytest.approx(float(layer.stages(h, [i])["scores"][0, j]), abs=TOL["page_number"])
    rounding = TOL["float16_product_rel"] * float(np.abs(q * k).sum())  # the products' float16, added up
    assert sum(products) == pytest.approx(total, abs=rounding + TOL["page_number"])
    shot(page, "stage-qk.png", "[data-testid=stepper]")
    stage(page, "weighted")
    weighted = layer.stages(h, [i])["weighted"][0].numpy()
    rows = page.eval_on_selector_all(
        "[data-testid=mix-row]",
        """rs => rs.map(r => [Number(r.dataset.value),
        Array.from(r.querySelectorAll('.seg')).reduce((s, e) => s + Number(e.dataset.value), 0)])""",
    )
    assert len(rows) == len(weighted)
    w, v = layer.stages(h, [i])["weights"][0].numpy(), layer.v[layer.kv_head(h)].double().numpy()
    bars = np.array([bars for _, bars in rows])
    shown = np.round(w, 4)  # the page holds each weight as it shows it (0.01 %) and V in float16
    np.testing.assert_allclose(bars, shown @ half(v), rtol=0, atol=TOL["page_data"])  # its w_j·V_j[d], added up
    rounding = TOL["rounded_to_4_decimals"] * np.abs(v).sum(0) + TOL["float16_rel"] * (w @ np.abs(v))
    assert (np.abs(bars - weighted) <= rounding + TOL["page_data"]).all()  # beside Python's Σ w·V, by that rounding
    np.testing.assert_allclose([out for out, _ in rows], weighted, rtol=0, atol=TOL["page_number"])
    meaning = data_values(page, "[data-testid=meaning-seg]")
    assert sum(meaning) == pytest.approx(1.0, abs=TOL["rounded_to_4_decimals"] * len(w))
    summary_text = page.text_content("[data-testid=vec-weighted-summary]")
    assert f"{np.linalg.norm(weighted):.4f}" in summary_text
    shot(page, "stage-mix.png", "[data-testid=stepper]")
    assert_clean(watched, {page.url})


def test_report_head_search_and_keyboard(watched, explainer, tmp_path):
    doc = explained(explainer, TEXT, find=("走进", "怪兽"))
    open_report(watched, doc, tmp_path)
    page = watched.page
    page.select_option("[data-testid=find-query]", "4")
    page.select_option("[data-testid=find-key]", "3")
    page.click("[data-testid=find-btn]")
    rows = page.eval_on_selector_all(
        "[data-testid=search-row]",
        "rs => rs.map(r => [Number(r.dataset.layer), Number(r.dataset.head), Number(r.dataset.weight)])",
    )
    want = doc["search"]["heads"]
    assert [(l, h) for l, h, _ in rows] == [(r["layer"], r["head"]) for r in want]
    np.testing.assert_allclose([w for _, _, w in rows], [r["weight"] for r in want], rtol=0, atol=TOL["page_data"])
    shot(page, "search.png", "[data-testid=search]")
    page.click("[data-testid=search-row] button")
    wait_ready(page)
    assert (int(state(page)["layer"]), int(state(page)["head"])) == (want[0]["layer"], want[0]["head"])

    # keyboard: a token is focused with Tab-reachable focus, chosen with Enter, moved with the arrows
    page.focus("[data-testid=token][data-index='2']")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Enter")
    assert state(page)["row"] == "3"
    assert page.get_attribute("[data-testid=token][data-index='3']", "aria-label")
    page.focus("[data-testid=heatmap]")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowLeft")
    assert state(page)["row"] == "4"
    label = page.get_attribute("[data-testid=heatmap]", "aria-label")
    assert "走进" in label
    page.focus("[data-testid=head-cell][data-layer='1'][data-head='1']")
    page.keyboard.press("Enter")
    assert (state(page)["layer"], state(page)["head"]) == ("1", "1")
    assert_clean(watched, {page.url})


def test_app_one_head_experiment_and_temperatures(watched, explainer, app_url):
    page = watched.page
    page.goto(app_url)
    wait_ready(page)
    for typed in ("1", "0.37"):
        page.fill("[data-testid=temperature]", typed)
        assert page.eval_on_selector("[data-testid=temperature]", "e => e.checkValidity()")
    with page.expect_response(lambda r: r.url.endswith("/api/explain")):
        page.press("[data-testid=temperature]", "Enter")
    wait_ready(page)
    assert "0.37" in page.text_content("[data-testid=intervention]")
    page.fill("[data-testid=temperature]", "1")
    with page.expect_response(lambda r: r.url.endswith("/api/explain")):
        page.press("[data-testid=temperature]", "Enter")
    wait_ready(page)

    # one head of one layer, causal mask off: only that step changes; the page says how, with Python's numbers
    page.select_option("[data-testid=layer-select]", "1")
    wait_ready(page)
    page.select_option("[data-testid=head-select]", "1")
    page.check("[data-testid=toggle-only-head]")
    wait_ready(page)
    with page.expect_response(lambda r: r.url.endswith("/api/explain")):
        page.check("[data-testid=toggle-no_causal]")
    wait_ready(page)
    iv = Intervention(causal=False, layer=1, head=1)
    changed, doc = both(explainer, TEXT, layer=1, head=1, intervention=iv)
    base = explanation(explainer, TEXT, layer=1, head=1)
    assert page.text_content("[data-testid=experiment]") == doc["experiment"]["text"]["zh"]
    page.click("[data-testid=token][data-index='2']")
    stage(page, "softmax")
    deltas = (weights(changed, 1, 1) - weights(base, 1, 1))[2]
    got = shown_values(page, "delta")
    np.testing.assert_allclose(  # each weight held as shown (0.01 %): two roundings
        [got[j] for j in sorted(got)], deltas[sorted(got)], rtol=0, atol=TOL["page_weight_difference"]
    )
    assert page.is_visible("[data-testid=diffmap]")
    shot(page, "experiment.png")
    shot(page, "experiment-maps.png", "[data-testid=compare]")
    # the other heads of that layer are unchanged
    page.select_option("[data-testid=head-select]", "0")
    assert_row(page, "weights", weights(base, 1, 0)[2], TOL["page_weight"])

    # the app's search (the answer holds one layer: the server ranks) gives Python's ranking
    page.select_option("[data-testid=find-query]", "4")
    page.select_option("[data-testid=find-key]", "3")
    with page.expect_response(lambda r: r.url.endswith("/api/explain")):
        page.click("[data-testid=find-btn]")
    page.wait_for_selector("[data-testid=search-row]")
    rows = page.eval_on_selector_all(
        "[data-testid=search-row]", "rs => rs.map(r => [Number(r.dataset.layer), Number(r.dataset.head)])"
    )
    want = explained(explainer, TEXT, intervention=iv, find=(4, 3))["search"]["heads"]
    assert [tuple(r) for r in rows] == [(r["layer"], r["head"]) for r in want]
    origin = app_url.rstrip("/")
    assert_clean(watched, {app_url, f"{origin}/api/explain"})


def shown_values(page: Page, name: str) -> dict[int, float]:
    cells = page.eval_on_selector_all(
        f"[data-testid=row-{name}] td", "tds => tds.map(td => [Number(td.dataset.key), Number(td.dataset.value)])"
    )
    assert cells, f"row {name} is not shown"
    return dict(cells)


# --- issue 16: the page as modules, inlined; every number Python's -----------------------------

VIOLATIONS = """
    window.__violations = [];
    document.addEventListener("securitypolicyviolation", (e) => window.__violations.push(e.violatedDirective));
"""


def test_report_policy_holds_and_refuses_what_it_does_not_know(watched, explainer, tmp_path):
    """The page's own script and style run under its policy without one violation; a script it does not
    know by hash, and any request, are refused."""
    page = watched.page
    page.add_init_script(VIOLATIONS)
    url = open_report(watched, explained(explainer, TEXT), tmp_path)
    assert page.evaluate("window.__violations") == []
    page.evaluate("""() => { const s = document.createElement("script"); s.textContent = "window.__ran = 1";
        document.body.append(s); }""")
    assert page.evaluate("window.__ran") is None
    assert page.evaluate("""() => fetch("http://127.0.0.1:9/").then(() => "sent", () => "refused")""") == "refused"
    page.wait_for_function("window.__violations.length >= 2")
    assert sorted(set(page.evaluate("window.__violations"))) == ["connect-src", "script-src-elem"]
    assert [u for u in watched.requests if u != url] == []
    assert [e for e in watched.errors if "Content Security Policy" not in e] == []


def test_report_works_inside_a_sandboxed_iframe_srcdoc(watched, explainer):
    """How a notebook shows it: the whole page in <iframe sandbox="allow-scripts" srcdoc=…>."""
    page = watched.page
    doc = explained(explainer, TEXT, layer=0, head=1)
    framed = html.escape(report.render_html(doc), quote=True)
    page.set_content(f'<iframe sandbox="allow-scripts" srcdoc="{framed}" width="1300" height="900"></iframe>')
    frame = page.frames[1]
    frame.wait_for_selector("#app[data-ready='1']", state="attached", timeout=10_000)
    frame.click("[data-testid=token][data-index='4']")
    frame.click("[data-testid=stage-btn-softmax]")
    _, ids, _ = explainer.tokenize(TEXT)
    assert_row(frame, "weights", truth.stages(explainer.model, ids, 0, 1)["weights"][4], TOL["page_weight"])
    assert_row(frame, "scores", truth.stages(explainer.model, ids, 0, 1)["scores"][4], TOL["page_number"])
    assert [u for u in watched.requests if not u.startswith(("about:", "data:"))] == []
    assert watched.errors == []


def test_report_shows_what_python_computed(watched, explainer, tmp_path, monkeypatch):
    """The page prints the stages Python ships, whatever they are: change them in Python (here: shifted,
    and the weights of every row reversed) and the page shows the changed numbers, not ones of its own."""
    real = packing.head_stages

    def changed(*args, **kwargs):
        st = real(*args, **kwargs)
        return st | {
            "scores": st["scores"] + 100,
            "scaled": st["scaled"] + 200,
            "masked": st["masked"] + 300,
            "weights": st["weights"].flip(-1),
            "weighted": st["weighted"] + 1,
        }

    monkeypatch.setattr(packing, "head_stages", changed)
    page = watched.page
    url = open_report(watched, explained(explainer, TEXT, layer=1, head=0), tmp_path)
    _, ids, _ = explainer.tokenize(TEXT)
    ref = truth.stages(explainer.model, ids, 1, 0)
    i = 3
    page.click(f"[data-testid=token][data-index='{i}']")
    stage(page, "softmax")
    assert_row(page, "scores", ref["scores"][i] + 100, TOL["page_number"])
    assert_row(page, "scaled", ref["scaled"][i] + 200, TOL["page_number"])
    assert_row(page, "masked", ref["masked"][i] + 300, TOL["page_number"])
    assert_row(page, "weights", ref["weights"][i][::-1], TOL["page_weight"])
    titles = page.eval_on_selector_all("[data-testid=token]", "ts => ts.map(t => t.title)")
    np.testing.assert_allclose([value(t) for t in titles], ref["weights"][i][::-1], rtol=0, atol=TOL["page_weight"])
    stage(page, "weighted")
    np.testing.assert_allclose(shown_vector(page, "weighted"), ref["weighted"][i] + 1, rtol=0, atol=TOL["page_number"])
    assert_clean(watched, {url})


def test_the_modules_run_as_es_modules_and_show_what_the_bundle_shows(watched, explainer, tmp_path):
    """The same page with web/static's files loaded natively (<script type="module" src="main.js">, over
    http) shows the numbers of the bundled report: the bundle is those modules, nothing else."""
    doc = explained(explainer, TEXT, layer=1, head=1)
    bundled = report.render_html(doc)
    native = bundled.replace(f"<script>{report.script()}</script>", '<script type="module" src="main.js"></script>')
    native = re.sub(r"script-src &#x27;sha256-[^&]+&#x27;", "script-src &#x27;self&#x27;", native)  # the meta's policy
    assert report.script() not in native and "script-src &#x27;self&#x27;" in native
    site = tmp_path / "site"
    shutil.copytree(report.STATIC_DIR, site)
    (site / "index.html").write_text(native, encoding="utf-8")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    shown = {}
    try:
        for name, url in (("bundled", None), ("native", f"http://127.0.0.1:{httpd.server_address[1]}/index.html")):
            page = watched.page
            if url is None:
                open_report(watched, doc, tmp_path)
            else:
                page.goto(url)
                wait_ready(page)
            page.click("[data-testid=token][data-index='5']")
            stage(page, "softmax")
            shown[name] = {row: shown_row(page, row) for row in ("scores", "scaled", "masked", "weights")}
    finally:
        httpd.shutdown()
    assert shown["native"] == shown["bundled"]
    assert any(u.endswith("/render/heatmap.js") for u in watched.requests)  # the modules really were loaded
    assert watched.errors == []


def test_a_long_row_shows_its_stored_keys_and_says_what_it_does_not_hold(watched, explainer, tmp_path):
    """1,000 tokens: each row stores its top keys (packing.TOP_KEYS), the first token and itself; a key
    picked outside them shows its weight (0.01 %) and "…" for its scores, with the reason."""
    page = watched.page
    doc = explained(explainer, LONG_TEXT, layer=0, head=1, layers=[0])
    url = open_report(watched, doc, tmp_path)
    L = len(doc["tokens"])
    _, ids, _ = explainer.tokenize(LONG_TEXT)
    ref = truth.stages(explainer.model, ids, 0, 1)
    i = L - 2
    page.click(f"[data-testid=token][data-index='{i}']")
    stage(page, "softmax")
    for name in ("scores", "scaled", "masked"):
        assert_row(page, name, ref[name][i], TOL["page_number"])
    stored = set(shown_row(page, "scores"))
    assert {0, i} <= stored and len(stored) == packing.TOP_KEYS + 2
    focus = int(page.eval_on_selector(".keys th.focus", "th => th.dataset.key"))
    outside = max(j for j in range(focus) if j not in stored)
    page.focus("[data-testid=heatmap]")
    for _ in range(focus - outside):
        page.keyboard.press("ArrowLeft")
    assert int(page.eval_on_selector(".keys th.focus", "th => th.dataset.key")) == outside
    cell = f"[data-testid=row-scores] td[data-key='{outside}']"
    assert (
        page.text_content(cell) == "…" and page.get_attribute(cell, "title") == doc_texts(page)["page.not_stored"]["zh"]
    )
    weight = page.text_content(f"[data-testid=row-weights] td[data-key='{outside}']")
    assert value(weight) == pytest.approx(ref["weights"][i][outside], abs=TOL["page_weight"])
    assert_clean(watched, {url})


def doc_texts(page: Page) -> dict:
    return page.evaluate("JSON.parse(document.getElementById('selfattn-data').textContent).texts")


def test_report_opens_in_the_language_it_was_written_in(watched, explainer, tmp_path):
    """`selfattn explain --lang en --html`: the export says its language, and the page opens in it."""
    page = watched.page
    doc = explained(explainer, TEXT) | {"lang": "en"}
    url = open_report(watched, doc, tmp_path)
    assert page.text_content("h1").startswith("What is Self-Attention") and state(page)["lang"] == "en"
    assert_clean(watched, {url})


def test_a_repeated_token_carries_its_position_on_the_page(watched, tmp_path):
    page = watched.page
    doc = explained(slash_explainer(), " / ".join(["一只", "森林", "一只", "森林"]))
    assert any("@" in name for name in doc["token_names"])  # Python's views name repeats by position
    url = open_report(watched, doc, tmp_path)
    shown = page.eval_on_selector_all("[data-testid=token]", "ts => ts.map(t => t.textContent)")
    assert shown == doc["token_names"] and len(set(shown)) == len(shown)
    assert_clean(watched, {url})
