"""The HTML report as a file: self-contained, lossless data, no way for a token to become markup.

What the page *shows* is checked in a real browser (test_browser.py); here, what it *holds*.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re

import numpy as np
import pytest

from selfattn.explain.views import report
from tests.explain.tiny import slash_explainer, tiny_explainer

EVIL = "</script><script>window.__pwned=1</script>"


@pytest.fixture(scope="module")
def doc():
    return tiny_explainer().explain("一只蓝色怪兽走进森林")


def embedded(page: str) -> dict:
    """The JSON data block of a rendered page, parsed."""
    m = re.search(r'<script type="application/json" id="selfattn-data">(.*?)</script>', page, re.S)
    assert m, "no data block in the page"
    return json.loads(m.group(1))


def inline(page: str, tag: str) -> str:
    m = re.search(rf"<{tag}>(.*?)</{tag}>", page, re.S)
    assert m, f"no inline <{tag}> in the page"
    return m.group(1)


def test_pack_is_lossless(doc):
    packed = report.pack(doc)
    for l, layer in enumerate(doc["layers"]):
        for name in ("x", "attn_out", "output"):
            np.testing.assert_array_equal(report.unpack(packed["layers"][l][name]), np.array(layer[name]))
        np.testing.assert_array_equal(report.unpack(packed["layers"][l]["visible"]), np.array(layer["visible"], bool))
        for h, head in enumerate(layer["heads"]):
            for name in ("q", "k", "v", "lse"):
                got = report.unpack(packed["layers"][l]["heads"][h][name])
                np.testing.assert_array_equal(got, np.array(head[name]), err_msg=f"layer {l} head {h} {name}")
            assert "stages" not in packed["layers"][l]["heads"][h]
    # float32 captures travel as float32 (4 bytes a number), and the small fields as they were
    assert packed["layers"][0]["heads"][0]["q"]["dtype"] == "f32"
    for key in ("tokens", "token_ids", "summaries", "prediction", "selected", "intervention", "model"):
        assert packed[key] == doc[key]


def test_pack_keeps_float64_and_infinities_exactly(doc):
    d = json.loads(json.dumps(doc))
    d["layers"][0]["x"][0][0] = 0.1  # not a float32 value: the array goes as float64
    d["layers"][0]["heads"][0]["lse"][0] = "-inf"  # a row that may look at nothing
    packed = report.pack(d)
    assert packed["layers"][0]["x"]["dtype"] == "f64"
    assert report.unpack(packed["layers"][0]["x"])[0, 0] == 0.1
    assert report.unpack(packed["layers"][0]["heads"][0]["lse"])[0] == -np.inf


def test_pack_refuses_what_is_not_an_export(doc):
    with pytest.raises(ValueError, match="layers"):
        report.pack({k: v for k, v in doc.items() if k != "layers"})
    with pytest.raises(TypeError, match="export dict"):
        report.pack([doc])
    bad = json.loads(json.dumps(doc))
    bad["layers"][0]["visible"][0][0] = 2
    with pytest.raises(ValueError, match=r"layers\[0\]\.visible"):
        report.pack(bad)


def test_page_embeds_the_doc_and_nothing_from_outside(doc):
    page = report.render_html(doc)
    data = embedded(page)
    assert data["mode"] == "report"
    assert data["doc"] == json.loads(json.dumps(report.pack(doc)))
    # no address of anything anywhere: no CDN, no font link, no external script or image
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", page, re.I), "an external URL is in the page"
    assert not re.search(r"<(link|img|iframe|object|embed)\b(?![^>]*href=\"data:,\")", page), "an external resource"
    assert "WenQuanYi Micro Hei" in inline(page, "style")


def test_policy_allows_only_the_inline_script_and_style(doc):
    page = report.render_html(doc)
    m = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    policy = m.group(1).replace("&#x27;", "'")
    script, style = inline(page, "script"), inline(page, "style")
    sha = lambda text: base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()  # noqa: E731
    assert f"script-src 'sha256-{sha(script)}'" in policy
    assert f"style-src 'sha256-{sha(style)}'" in policy
    assert "connect-src 'none'" in policy and "default-src 'none'" in policy
    assert policy == report.policy(live=False)


def test_token_text_cannot_close_the_data_script():
    ex = slash_explainer()
    doc = ex.explain(f"一只 / {EVIL} / <img src=x onerror=alert(1)> / 森林")
    page = report.render_html(doc)
    assert page.count("<script") == 2  # the data block and the explorer, nothing injected
    assert "</script><script>window" not in page and "<img src=x" not in page
    assert embedded(page)["doc"]["tokens"] == ["<bos>", "一只", EVIL, "<img src=x onerror=alert(1)>", "森林"]
    assert "&lt;/script&gt;" in page.split("<title>")[1].split("</title>")[0]


def test_slots_are_filled_once(doc):
    """A token that looks like a template slot stays a token."""
    ex = slash_explainer()
    page = report.render_html(ex.explain("一只 / {{SCRIPT}} / {{DATA}}"))
    assert embedded(page)["doc"]["tokens"][2:4] == ["{{SCRIPT}}", "{{DATA}}"]
    assert page.count("selfattn explorer: one page for the HTML report") == 1


def test_write_html_refuses_to_overwrite(doc, tmp_path):
    path = tmp_path / "report.html"
    assert report.write_html(doc, path) == path
    first = path.read_text(encoding="utf-8")
    assert first.startswith("<!DOCTYPE html>")
    with pytest.raises(FileExistsError, match=re.escape(str(path))):
        report.write_html(doc, path)
    assert path.read_text(encoding="utf-8") == first
    other = tiny_explainer().explain("两条红色鱼游进大海")
    report.write_html(other, path, force=True)
    assert embedded(path.read_text(encoding="utf-8"))["doc"]["text"] == "两条红色鱼游进大海"


def test_live_page_may_talk_only_to_its_server(doc):
    page = report.render_app(doc, max_chars=4000, max_tokens=1024, error="too long")
    data = embedded(page)
    assert data["mode"] == "live" and data["limits"] == {"max_chars": 4000, "max_tokens": 1024}
    assert data["error"] == "too long" and data["api"] == "/api/explain"
    assert "connect-src 'self'" in report.policy(live=True)
    assert inline(page, "script") == report.script()  # the same modules, bundled once


def test_write_html_and_pictures_are_atomic(doc, tmp_path, monkeypatch):
    from selfattn.explain import plots

    target = tmp_path / "report.html"
    target.write_text("old", encoding="utf-8")

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("selfattn.files.os.replace", broken)
    with pytest.raises(OSError, match="disk full"):
        report.write_html(doc, target, force=True)
    with pytest.raises(OSError, match="disk full"):
        plots.save(doc, tmp_path / "pics", formats=("png",))
    assert target.read_text(encoding="utf-8") == "old"  # the old file, whole; no temp file left
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["report.html"]
