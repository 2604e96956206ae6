"""One language per page (issue 26 item 5): the Chinese page says nothing in English but proper names —
model and class names, the tutorial's title, formula names and symbols, units and the language button."""

from __future__ import annotations

import re

import pytest

from selfattn.explainer.session import Explainer
from selfattn.explainer.views import report
from tests.explainer.documents import explained
from tests.explainer.views.test_one_reading import folder  # noqa: F401  (a tiny transformers GPT-2)
from tests.explainer.web.test_browser import browser, open_report, watched  # noqa: F401  (fixtures)

ALLOWED = {
    # symbols and formula names: Q/K/V, X, W_Q…, q·k, d_k, softmax, the stages' variables
    *"QKVXijkqvwd",
    "W_Q",
    "W_K",
    "W_V",
    "W_O",
    "d_k",
    "d_model",
    *("QK", "softmax", "exp", "log", "lse", "inf"),
    *("score", "scaled", "masked", "weights", "sink"),  # sink: exp(sink) in the softmax's denominator
    # terms the Chinese tutorial itself uses as they are
    *("Self-Attention", "token", "head", "mask", "logit", "bit", "ms", "MLP", "LayerNorm", "RMSNorm", "RoPE", "GQA"),
    "BOS",  # the model's beginning-of-sequence token, as every model card and TransformerLens name it
    "Spearman",  # a person's name: Spearman's rank correlation (斯皮尔曼 is rarer in the field than the name)
    # names: the package, the library, a file format, commands and flags the learner types, the language button
    *("selfattn", "transformers", "PNG", "English", "explain", "serve", "html", "layers", "find"),
    *("Python", "float16"),  # where the page's numbers come from and the precision it holds q and k in
}
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_'\-]*")
DIM = re.compile(r"d\d+")
"""A vector's dimension, d13: a symbol."""
MARK = re.compile(r"⟨[^⟩]*⟩")
"""A mark of `pieces.shown_text` (⟨U+0008⟩, ⟨E6⟩): notation, not words."""


def english(zh: str, names: set[str]) -> set[str]:
    """The ASCII words of a Chinese text that are neither allowed nor one of `names`."""
    return {
        w
        for w in WORD.findall(MARK.sub("", re.sub(r"\{\w+\}", "", zh)))
        if w not in ALLOWED | names and not DIM.fullmatch(w)
    }


@pytest.mark.parametrize(("entry", "page"), [("main.js", "explorer.html"), ("attention.js", "attention.html")])
def test_every_chinese_sentence_of_the_pages_is_chinese(entry, page):
    """Every text the pages name (views shown later too), in Chinese."""
    found = {k: english(v["zh"], set()) for k, v in report.page_texts(entry=entry, page=page).items()}
    assert {k: w for k, w in found.items() if w} == {}


def test_the_chinese_page_of_a_transformers_model_says_its_class_in_chinese(folder, watched, tmp_path):  # noqa: F811
    ex = Explainer.load(folder)
    doc = explained(ex, "a blue cat sleeps", lang="zh")
    cls = "GPT2LMHeadModel"
    assert doc["model"]["architecture"] == f"{cls} (transformers, attention by selfattn)"
    assert doc["model"]["architecture_zh"] == f"{cls}（transformers 的模型类，注意力由 selfattn 计算）"
    open_report(watched, doc, tmp_path)
    body = watched.page.evaluate("document.body.innerText")
    assert doc["model"]["architecture_zh"] in body and "attention by" not in body
    names = {cls, doc["model"]["name"], *doc["tokens"]}  # the model's and the text's own
    assert english(body, names) == set(), [line for line in body.splitlines() if english(line, names)]
    watched.page.click("#lang")  # the button switches the page to English, where the class reads in English
    assert doc["model"]["architecture"] in watched.page.evaluate("document.body.innerText")
