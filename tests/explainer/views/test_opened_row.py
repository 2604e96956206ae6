"""The row the views open on is the query of the link the shown head's sentence describes, when the causal
mask hides keys from it; else another row, saying why (issue 26 item 5)."""

from __future__ import annotations

from selfattn.explainer import tracing
from selfattn.explainer.interventions import Intervention
from selfattn.explainer.views import export
from tests.explainer.documents import explained
from tests.explainer.tiny import tiny_explainer

LINK_INSIDE = "一只蓝色怪兽走进森林。它在森林里睡觉。"
"""On the tiny model the shown head's sentence names 怪兽 → 蓝色 (position 3 of 20): a row with later keys."""
LINK_LAST = "一只蓝色怪兽走进森林"
"""…and here L1H1's 森林 → 怪兽, from the last token, which sees every key (its strongest link, not measurable on
one control sentence: the tiny vocabulary makes no contrast sentence)."""


def _described(doc):
    sel = doc["selected"]
    return doc["descriptions"][sel["layer"]][sel["head"]]


def test_the_opened_row_is_the_described_links_query():
    doc = explained(tiny_explainer(), LINK_INSIDE)
    d, L = _described(doc), len(doc["tokens"])
    q, k = d["query"], d["key"]
    assert q < L - 1  # the case this test is for: the link's query has later keys
    opened = doc["opened"]
    assert opened["row"] == q and opened["link"] == {"query": q, "key": k}
    assert opened["hidden"] == L - 1 - q  # causal: row q may not see the L − 1 − q keys after it
    names = doc["token_names"]
    assert f"“{names[q]}”" in opened["text"]["en"] and f"“{names[k]}”" in opened["text"]["en"]
    assert f"「{names[q]}」" in opened["text"]["zh"] and f"「{names[k]}」" in opened["text"]["zh"]
    assert f"the {L - 1 - q} tokens after it are masked" in opened["text"]["en"]


def test_a_link_from_the_last_token_opens_the_middle_row_and_says_why():
    doc = explained(tiny_explainer(), LINK_LAST, layer=1, head=1)
    d, L = _described(doc), len(doc["tokens"])
    assert d["query"] == L - 1  # the described link starts at the last token, whose row has no masked key
    assert "fewer than 8), not measurable" in d["text"]["en"] and "测不出" in d["text"]["zh"]
    middle = (L - 1) // 2
    opened = doc["opened"]
    assert opened["row"] == middle and opened["hidden"] == L - 1 - middle
    names = doc["token_names"]
    assert f"token {L - 1} “{names[L - 1]}”" in opened["text"]["en"] and "sees every token" in opened["text"]["en"]


def test_without_a_link_or_a_mask_the_old_rule_holds():
    ex = tiny_explainer()
    trace = tracing.trace(ex, LINK_INSIDE)
    L = len(trace.tokens)
    no_link = export.opened_query(trace.layers[0], 0, trace.tokens)
    assert no_link["row"] == (L - 1) // 2 and "link" not in no_link
    open_all = tracing.trace(ex, LINK_INSIDE, Intervention({"no_causal": {}}))
    seen = export.opened_query(open_all.layers[0], 0, open_all.tokens, (3, 2))
    assert seen["row"] == L - 1 and seen["hidden"] == 0 and "nothing is masked" in seen["text"]["en"]
    outside = export.opened_query(trace.layers[0], 0, trace.tokens, (L, 0))  # a position past the text: no link
    assert outside["row"] == (L - 1) // 2 and "link" not in outside
