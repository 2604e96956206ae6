"""What a learner reads: repeated tokens told apart, --find by position, the heads table at 80 columns, the
page's language, errors in zh, a bounded --json, the summaries read at the capture point, the pictures'
size and fonts."""

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from rich.console import Console

from selfattn.cli import main
from selfattn.explainer import pieces as P
from selfattn.explainer import tracing
from selfattn.explainer.analysis import summary
from selfattn.explainer.catalogue import TEXTS
from selfattn.explainer.views import export, packing, plots, tables
from selfattn.explainer.web import server
from tests.explainer.documents import explained, explanation
from tests.explainer.tiny import tiny_explainer
from tests.tolerances import TOL

TWICE = "一只蓝色怪兽走进森林。它在森林里睡觉。"  # 森林 and 。 each twice


def test_repeated_tokens_carry_their_position_everywhere(tiny, tiny_checkpoint, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # wide enough for the whole step tables: every query row printed
    doc = explained(tiny, TWICE)
    tokens = doc["tokens"]
    assert tokens.count("森林") == 2
    at = [i for i, t in enumerate(tokens) if t == "森林"]
    assert [doc["token_names"][i] for i in at] == [f"森林@{i}" for i in at]
    assert doc["token_names"][1] == "一只"  # a token seen once keeps its text
    assert doc["pieces"]["names"] == doc["token_names"]
    assert main(["explain", TWICE, "--model", str(tiny_checkpoint), "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert f'A repeated token carries its position: 森林@{at[0]} is the "森林" at position {at[0]}.' in out
    assert f"森林@{at[0]}" in out and f"森林@{at[1]}" in out
    top = [line for line in out.splitlines() if line.startswith(f'  "森林@{at[1]}" →')]
    assert len(top) == 1  # each query row is named apart


def test_find_takes_positions_and_names(tiny):
    doc = explained(tiny, TWICE, find=("9", "森林@5"))
    assert (doc["search"]["query"], doc["search"]["key"]) == (9, 5)
    doc = explained(tiny, TWICE, find=(9, 5))
    assert (doc["search"]["query"], doc["search"]["key"]) == (9, 5)
    same = explained(tiny, TWICE, find=("森林@9", "怪兽"))
    assert (same["search"]["query"], same["search"]["key"]) == (9, 3)
    with pytest.raises(ValueError, match="'森林@7' names no token"):
        explained(tiny, TWICE, find=("森林@7", "怪兽"))


def test_find_on_the_command_line_takes_positions(tiny_checkpoint, capsys):
    assert main(["explain", TWICE, "--model", str(tiny_checkpoint), "--find", "9", "森林@5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["search"]["query"], doc["search"]["key"]) == (9, 5)


def test_the_heads_table_splits_at_80_columns_instead_of_dropping_heads():
    ex = tiny_explainer(n_heads=16, n_kv_heads=4)
    e = explanation(ex, "一只蓝色怪兽走进森林")
    doc = e.doc
    console = Console(record=True, width=80)
    tables.render(e, console, lang="en")
    out = console.export_text()
    grid = out[out.index(TEXTS["tables.types"]["en"][:20]) :]
    for h in range(16):
        assert re.search(rf"\bH{h}\b", grid), f"H{h} missing"
    assert all(len(line) <= 80 for line in out.splitlines())
    assert "[H0–" in grid  # said as blocks of heads
    # every head's type of the JSON is in the grid, in the order of its heads
    short = doc["head_types"]["short"]
    for l, row in enumerate(doc["descriptions"]):
        line = next(x for x in grid.splitlines() if x.split() and x.split()[0] == str(l))
        first = [c.lstrip(">").rstrip("*") for c in line.split()[1:]]
        want = [short[d["kind"]]["en"] if d["kind"] in short else "—" for d in row][: len(first)]
        assert first == want, (l, first, want)
    flat = " ".join(out.split())  # the console wraps long sentences
    assert "grouped-query attention (GQA): 16 query heads share 4 key/value heads, 4 per group" in flat


def test_html_carries_the_language_and_the_json_its_lang(tiny_checkpoint, tmp_path, capsys):
    page = tmp_path / "r.html"
    assert (
        main(["explain", "一只蓝色怪兽走进森林", "--model", str(tiny_checkpoint), "--html", str(page), "--lang", "en"])
        == 0
    )
    capsys.readouterr()
    data = json.loads(re.search(r'id="selfattn-data">(.*?)</script>', page.read_text(), re.S).group(1))
    assert data["doc"]["lang"] == "en"
    assert explained(tiny_explainer(), "一只", lang="zh")["lang"] == "zh"
    with pytest.raises(ValueError, match="lang must be 'zh' or 'en', got 'fr'"):
        explained(tiny_explainer(), "一只", lang="fr")


def test_server_errors_speak_the_pages_language():
    client = TestClient(server.create_app(tiny_explainer()))
    r = client.post("/api/explain", json={"text": "  ", "lang": "zh"})
    assert r.status_code == 422 and r.json()["detail"].startswith("无法解释这段文字：text is empty")
    assert r.json()["messages"]["en"].startswith("text is empty")
    r = client.post("/api/explain", json={"text": "一只", "layer": "1", "lang": "zh"})
    assert r.status_code == 422 and r.json()["detail"].startswith("请求无效：layer")
    r = client.post("/api/explain", json={"text": "  "})
    assert r.json()["detail"].startswith("text is empty")  # English without a lang, as before
    page = client.get("/", params={"text": "一只\x07怪兽", "lang": "zh"}).text
    data = json.loads(re.search(r'id="selfattn-data">(.*?)</script>', page, re.S).group(1))
    assert data["error"].startswith("无法解释这段文字：") and data["doc"]["lang"] == "zh"


def test_the_page_budget_holds_the_shown_layer_and_its_neighbours_and_says_how_to_get_the_others(monkeypatch, capsys):
    ex = tiny_explainer()
    full = explained(ex, "一只蓝色怪兽走进森林")
    assert "omitted" not in full and all("heads" in layer for layer in full["layers"])
    layers = tracing.trace(ex, "一只蓝色怪兽走进森林").layers
    one = export.layer_page_bytes(layers[0])
    monkeypatch.setattr(export, "MAX_PAGE_BYTES", one)  # room for one layer only
    doc = explained(ex, "一只蓝色怪兽走进森林", layer=1, head=0)
    assert doc["layers"][0]["omitted"] and "heads" in doc["layers"][1]
    bounds = export.layer_page_bytes(layers[0], full=False) + export.layer_page_bytes(layers[1])  # 1 shown: whole
    assert doc["omitted"]["layers"] == [0] and doc["omitted"]["held"] == [1] and doc["omitted"]["bytes"] == bounds
    assert "layers 1 are written in full" in doc["omitted"]["message"] and "--layers" in doc["omitted"]["message"]
    assert "heads" in explained(ex, "一只蓝色怪兽走进森林", layers=None)["layers"][0]  # all, when asked


def test_the_command_says_which_layers_its_page_holds(tiny_checkpoint, tmp_path, monkeypatch, capsys):
    from selfattn.explainer.session import Explainer

    trace = explanation(Explainer.load(str(tiny_checkpoint)), "一只蓝色怪兽走进森林").trace
    shown = packing.packed_bytes(packing.pack_layer(trace.layers[1], full=True)[0])
    monkeypatch.setattr(export, "MAX_PAGE_BYTES", shown + 100)  # room for the shown layer (1) only
    page = tmp_path / "r.html"
    args = ["explain", "一只蓝色怪兽走进森林", "--model", str(tiny_checkpoint), "--layer", "1", "--head", "0"]
    assert main([*args, "--html", str(page), "--lang", "zh"]) == 0
    out = capsys.readouterr().out.replace("\n", "")
    data = json.loads(re.search(r'id="selfattn-data">(.*?)</script>', page.read_text(), re.S).group(1))
    assert data["doc"]["omitted"]["layers"] == [0] and data["doc"]["omitted"]["text"]["zh"] in out
    assert main(args) == 0 and "--layers" not in capsys.readouterr().out  # no page: nothing to say of one


def test_the_command_packs_its_page_on_one_thread_and_gives_the_threads_back(tiny_checkpoint, tmp_path, monkeypatch):
    """`selfattn explain --html` packs its page with torch on PACKING_THREADS thread(s) (small operations, which a busy
    core slows down), then puts the process's count back; the page holds the numbers the API's document packs."""
    from selfattn import cli
    from selfattn.explainer import pipeline
    from selfattn.explainer.session import Explainer

    seen = []
    document = pipeline.Session.document
    monkeypatch.setattr(
        pipeline.Session,
        "document",
        lambda self, *a, **k: seen.append(torch.get_num_threads()) or document(self, *a, **k),
    )
    before = torch.get_num_threads()
    page = tmp_path / "r.html"
    assert main(["explain", "一只蓝色怪兽走进森林", "--model", str(tiny_checkpoint), "--html", str(page)]) == 0
    assert seen == [min(cli.PACKING_THREADS, before)] and torch.get_num_threads() == before
    data = json.loads(re.search(r'id="selfattn-data">(.*?)</script>', page.read_text(), re.S).group(1))
    api = export.document(explanation(Explainer.load(str(tiny_checkpoint)), "一只蓝色怪兽走进森林"))
    assert data["doc"]["layers"] == api["layers"]  # packed alike, byte for byte


def test_the_page_budget_counts_the_layers_packed_not_their_bound(monkeypatch):
    """The bound (`layer_page_bytes`) is what a layer could take before compression; a page holds the layers
    whose packed arrays fit: here both, where the bound lets one in; one byte less, only the shown one."""
    ex = tiny_explainer()
    text = "一只蓝色怪兽走进森林"
    trace = tracing.trace(ex, text)
    bounds = [export.layer_page_bytes(trace.layers[0], full=False), export.layer_page_bytes(trace.layers[1])]
    # packed as layers="auto" packs them: layer 1 (the shown one) whole
    packed = [packing.packed_bytes(packing.pack_layer(trace.layers[l], full=l == 1)[0]) for l in (0, 1)]
    assert max(bounds) < sum(packed) < sum(bounds)
    monkeypatch.setattr(export, "MAX_PAGE_BYTES", sum(packed) + 50)  # with room for the labels (`types`)
    doc = explained(ex, text, layer=1, head=0)
    assert "omitted" not in doc and all("heads" in layer for layer in doc["layers"])
    assert sum(bounds) > sum(packed) + 50  # what the bound alone would not have held
    monkeypatch.setattr(export, "MAX_PAGE_BYTES", sum(packed) - 100)
    doc = explained(ex, text, layer=1, head=0)
    assert doc["layers"][0]["omitted"] and doc["omitted"]["held"] == [1] and doc["omitted"]["bytes"] == sum(bounds)


def test_the_layers_get_what_the_thumbnails_and_words_of_every_head_leave_of_a_page():
    def budget(n_layers, n_heads, display_bytes, length=128):
        trace = SimpleNamespace(layers=[SimpleNamespace(n_heads=n_heads, length=length)] * n_layers)
        return export.layers_budget(trace, {"thumbnails": "x" * display_bytes})

    assert budget(30, 9, 10) == export.MAX_PAGE_BYTES  # 270 heads of tiny thumbnails leave the layers their most
    assert export.ALL_LAYERS_UP_TO == 128 and budget(30, 9, 10, length=129) == export.LONG_PAGE_BYTES
    assert export.LONG_PAGE_BYTES < export.MAX_PAGE_BYTES
    smol = budget(30, 9, 800_000)  # SmolLM2: 270 heads of 64 × 64 thumbnails at 0.01 % (0.8 MB at 128 tokens)
    shown = len(json.dumps({"thumbnails": "x" * 800_000}, separators=(",", ":")))
    assert smol == export.PAGE_BYTES - shown - export.PAGE_FIXED_BYTES - 270 * export.HEAD_WORDS_BYTES
    many = budget(32, 32, 11_000_000)  # 1,024 heads of 64 × 64 thumbnails: 11 MB of the page
    thumbnails = len(json.dumps({"thumbnails": "x" * 11_000_000}, separators=(",", ":")))
    assert many == export.PAGE_BYTES - thumbnails - export.PAGE_FIXED_BYTES - 1024 * export.HEAD_WORDS_BYTES
    assert budget(32, 32, 30_000_000) == 0  # the shown layer alone, whatever it takes


def test_a_long_texts_page_holds_what_fits_the_long_budget_and_says_why(monkeypatch):
    """Beyond ALL_LAYERS_UP_TO tokens a page of layers="auto" holds what fits LONG_PAGE_BYTES: both layers of a small
    model; with room for one, the shown one, and a note that names the text's length and how to get the others."""
    ex = tiny_explainer()
    text = "一只蓝色怪兽走进森林。" * 22
    doc = explained(ex, text, layer=1, head=0)
    assert len(doc["tokens"]) > export.ALL_LAYERS_UP_TO
    assert "omitted" not in doc and all("heads" in layer for layer in doc["layers"])
    trace = tracing.trace(ex, text)
    shown = packing.packed_bytes(packing.pack_layer(trace.layers[1], full=True)[0])
    monkeypatch.setattr(export, "LONG_PAGE_BYTES", shown + 100)  # room for the shown layer only
    doc = explained(ex, text, layer=1, head=0)
    assert doc["layers"][0]["omitted"] and doc["omitted"]["held"] == [1]
    n = len(doc["tokens"])
    assert doc["omitted"]["message"].startswith(f"a text of {n} tokens, over 128: its page holds ")
    assert "layers 1 are written in full" in doc["omitted"]["message"] and "--layers" in doc["omitted"]["message"]
    assert doc["omitted"]["text"]["zh"].startswith(f"文本有 {n} 个 token，超过 128 个")
    monkeypatch.setattr(export, "MAX_PAGE_BYTES", 1)  # the shown layer, whatever it takes
    short = explained(ex, "一只蓝色怪兽走进森林", layer=1, head=0)  # the other note for a short text
    assert short["omitted"]["message"].startswith("every layer's arrays may take up to")


@pytest.mark.parametrize("text", ["一只蓝色怪兽走进森林", "一只蓝色怪兽走进森林。" * 12])
def test_summaries_read_at_the_capture_point_are_the_recomputed_ones(text):
    ex = tiny_explainer(n_heads=4, n_kv_heads=2)
    trace = tracing.trace(ex, text)
    for layer in trace.layers:
        digested = layer.digest
        assert digested is not None
        layer.digest = None  # the other way: recomputed from Q, K and the lse
        again = summary.layer_digest(layer)
        layer.digest = digested
        np.testing.assert_allclose(digested.means.numpy(), again.means.numpy(), atol=TOL["float32_weight_statistics"])
        assert torch.equal(digested.rows, again.rows)
        L = layer.length
        T = min(L, summary.THUMBNAIL)
        for h in range(layer.n_heads):
            w = layer.stages(h)["weights"].numpy()  # float64
            bins = np.arange(L) * T // L
            want = np.zeros((T, T))
            for i in range(L):
                for j in range(L):
                    want[bins[i], bins[j]] += w[i, j]
            count = np.bincount(bins, minlength=T)
            want /= count[:, None] * count[None, :]
            np.testing.assert_allclose(
                digested.thumbnails[h].float().numpy(),
                want,
                atol=TOL["float16_thumbnail"],
                rtol=TOL["float16_thumbnail_rel"],
            )
            rows = [i for i in range(L) if layer.visible[i].sum() >= 2]
            entropy = np.mean([-(w[i][w[i] > 0] * np.log2(w[i][w[i] > 0])).sum() for i in rows])
            assert digested.summary(h)["entropy"] == pytest.approx(entropy, abs=TOL["float32_weight_statistics"])


def test_the_first_token_note_only_for_a_special_first_token():
    ex = tiny_explainer()
    assert "first_token" in explained(ex, "一只蓝色怪兽走进森林")  # <bos>
    p = P.from_strings("蓝色怪兽", ["蓝色", "怪兽"], [3, 4])
    assert not p.special[0]  # a text token at position 0: no first-token note (predictions.starts_with_special)


def _big_explanation(n_layers=24, n_heads=14, L=80):
    """What the grid reads of an Explanation (its card, tokens, shown head, answers and each head's rule), for a
    model of the Qwen2.5-0.5B size: no model run."""
    T = min(L, summary.THUMBNAIL)
    rng = np.random.default_rng(0)
    thumb = torch.from_numpy(np.tril(rng.random((T, T)))).half()
    s = {"entropy": 1.0, "max_weight": 0.5, "first_token": 0.1, "previous": 0.2, "self": 0.1, "rows": L - 1}
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    layer = SimpleNamespace(head_rule=lambda h: (0.125, None, causal))
    return SimpleNamespace(
        card=SimpleNamespace(name="big", n_layers=n_layers, n_heads=n_heads),
        tokens=SimpleNamespace(names=[f"t{i}" for i in range(L)], labels=[f"t{i}" for i in range(L)]),
        shown=SimpleNamespace(layer=3, head=5),
        answers=SimpleNamespace(
            summaries=[[s] * n_heads for _ in range(n_layers)], thumbnails=[[thumb] * n_heads for _ in range(n_layers)]
        ),
        trace=SimpleNamespace(layers=[layer] * n_layers),
    )


def test_the_grid_fits_a_screen_and_its_title_sits_above_the_first_row():
    import matplotlib

    e = _big_explanation()
    with matplotlib.rc_context(plots.rc(False)):
        fig = plots._grid(e, "en")
        fig.canvas.draw()
        width, height = fig.canvas.get_width_height()
        assert max(width, height) <= plots.MAX_PIXELS * fig.dpi / plots.DPI + 1
        renderer = fig.canvas.get_renderer()
        title = fig._suptitle.get_window_extent(renderer)
        first_row = max(ax.get_tightbbox(renderer).y1 for ax in fig.axes[: e.card.n_heads])
        assert title.y0 >= first_row, (title.y0, first_row)


def test_no_cjk_font_names_every_font_looked_for(monkeypatch):
    for family in ("Noto Sans CJK SC", "WenQuanYi Micro Hei", "PingFang SC", "Hiragino Sans GB", "Heiti SC"):
        assert family in plots.CJK_FONTS
    assert {"Microsoft YaHei", "SimHei"} <= set(plots.CJK_FONTS)
    monkeypatch.setattr(plots, "CJK_FONTS", ("No Such Font CJK", "Another Missing Font"))
    monkeypatch.setattr(plots, "FONT_FILES", ())
    with pytest.raises(ValueError, match="looked for No Such Font CJK, Another Missing Font"):
        plots.fonts(True)
    assert plots.fonts(False) == ["DejaVu Sans"]
