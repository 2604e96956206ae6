"""bertviz's argument forms, as its README writes them, give the page of the selfattn forms with the same
meaning; what the page cannot show is a ValueError that says what to pass instead.

The weights come from a tiny transformers BERT run with eager attention (a sentence pair, bertviz's
encoder example). That the selfattn forms draw those weights is tested in tests/explainer/views/test_notebook.py
(in a browser); here each bertviz form is compared with its selfattn form, page for page.
"""

import pytest
import torch

import selfattn
from selfattn.explainer.views import notebook

transformers = pytest.importorskip("transformers")

TOKENS = ["[CLS]", "the", "Ġcat", "[SEP]", "▁it", "sat</w>", "[SEP]"]
SENTENCE_B_START = 4


def _bert(attn_implementation: str):
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=60, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64
    )
    model = transformers.BertModel(config).eval()
    model.set_attn_implementation(attn_implementation)
    return model


@pytest.fixture(scope="module")
def attention():
    ids = torch.tensor([[2, 5, 7, 3, 9, 4, 3]])
    with torch.no_grad():
        out = _bert("eager")(ids, token_type_ids=torch.tensor([[0, 0, 0, 0, 1, 1, 1]]), output_attentions=True)
    assert len(out.attentions) == 3 and out.attentions[0].shape == (1, 4, 7, 7)
    return out.attentions


PRETTY = ["[CLS]", "the", " cat", "[SEP]", " it", "sat", "[SEP]"]
"""TOKENS as bertviz's prettify_tokens shows them."""


def _page(view) -> str:
    assert isinstance(view, notebook.Inline)
    return view.html


def test_the_readme_head_view_forms(attention):
    plain = _page(selfattn.head_view(attention, PRETTY))
    assert _page(selfattn.head_view(attention, TOKENS)) == plain  # prettify_tokens=True by default
    assert _page(selfattn.head_view(attention, TOKENS, SENTENCE_B_START)) == plain  # all pairs: bertviz's "All"
    assert _page(selfattn.head_view(attention=attention, tokens=TOKENS, sentence_b_start=4)) == plain
    assert _page(selfattn.head_view(encoder_attention=attention, encoder_tokens=TOKENS)) == plain
    assert _page(selfattn.head_view(attention, TOKENS, heads=[0, 1, 2, 3])) == plain
    assert _page(selfattn.head_view(attention, TOKENS, include_layers=[0, 1, 2])) == plain
    assert _page(selfattn.head_view(attention, TOKENS, prettify_tokens=False)) == _page(
        selfattn.head_view(attention, TOKENS, None, False)
    )
    assert _page(selfattn.head_view(attention, TOKENS, prettify_tokens=False)) != plain  # the marks kept
    assert _page(selfattn.head_view(attention, TOKENS, layer=1, heads=[2])) == _page(
        selfattn.head_view(attention, PRETTY, layer=1, head=2)
    )
    assert _page(selfattn.head_view(attention, TOKENS, None, True, 1, [2])) == _page(
        selfattn.head_view(attention, PRETTY, layer=1, head=2)
    )
    assert _page(selfattn.head_view(attention, TOKENS, layer=2, heads=[3, 1])) == _page(  # the README's form
        selfattn.head_view(attention, TOKENS, layer=2, heads=[1, 3])
    )  # what the page draws of those heads: tests/explainer/views/test_notebook.py, in Chromium
    returned = selfattn.head_view(attention, TOKENS, html_action="return")
    assert returned.data == plain and returned.data.startswith("<!DOCTYPE html>")


def test_the_readme_model_view_forms(attention):
    plain = _page(selfattn.model_view(attention, PRETTY))
    assert _page(selfattn.model_view(attention, TOKENS)) == plain
    assert _page(selfattn.model_view(attention, TOKENS, SENTENCE_B_START)) == plain
    assert _page(selfattn.model_view(attention, TOKENS, display_mode="light")) == plain
    assert _page(selfattn.model_view(encoder_attention=attention, encoder_tokens=TOKENS)) == plain
    assert selfattn.model_view(attention, TOKENS, html_action="return").data == plain
    first = torch.stack([a[0, :2] for a in attention[:2]])  # layers 0-1, heads 0-1: (2, 2, L, L)
    assert _page(selfattn.model_view(attention, TOKENS, include_layers=[0, 1], include_heads=[0, 1])) == _page(
        selfattn.model_view(first, PRETTY)
    )


def test_include_layers_draws_those_layers_under_their_own_numbers(attention):
    """bertviz's include_layers=[1, 2]: the page holds layers 1 and 2 (not 0), numbered 1 and 2, and opens on
    the last of them, as bertviz's head_view does; what the page draws of them: test_notebook, in Chromium."""
    import json
    import re

    def data(view) -> dict:
        block = re.search(r'<script type="application/json" id="selfattn-data">(.*?)</script>', view.html, re.S)
        return json.loads(block.group(1))

    some = data(selfattn.head_view(attention, TOKENS, include_layers=[2, 1]))
    every = data(selfattn.head_view(attention, TOKENS))
    assert some["layer_numbers"] == [1, 2] and every["layer_numbers"] == [0, 1, 2]
    assert some["start"]["layer"] == 2 == every["start"]["layer"]
    assert some["weights"]["shape"][0] == 2
    only = torch.stack([a[0] for a in attention[1:]])  # layers 1-2, as given directly
    assert some["weights"]["b64"] == data(selfattn.head_view(only, TOKENS))["weights"]["b64"]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda a: selfattn.head_view(a, TOKENS, include_layers=[1, 2], layer=0), r"layer 0 is not among.*\[1, 2\]"),
        (lambda a: selfattn.head_view(a, TOKENS, include_layers=[1, 3]), r"include_layers must hold .*\[0, 2\]"),
        (lambda a: selfattn.model_view(a, TOKENS, include_heads=[3]), r"include_heads=\[3\]"),
        (lambda a: selfattn.head_view(a, TOKENS, heads=[0, 4]), r"heads must hold head indices in \[0, 3\]"),
        (lambda a: selfattn.head_view(a, TOKENS, heads=[1], head=1), "not both"),
        (lambda a: selfattn.head_view(a, TOKENS, html_action="show"), "html_action must be 'view' or 'return'"),
        (lambda a: selfattn.model_view(a, TOKENS, display_mode="blue"), "display_mode must be"),
        (lambda a: selfattn.head_view(a, TOKENS, sentence_b_start=7), r"sentence_b_start must be in \[1, 6\]"),
        (lambda a: selfattn.head_view(a, TOKENS, layer=3), r"layer 3 is not among the layers drawn.*\[0, 1, 2\]"),
        (
            lambda a: selfattn.model_view(
                encoder_attention=a,
                decoder_attention=a,
                cross_attention=a,
                encoder_tokens=TOKENS,
                decoder_tokens=TOKENS,
            ),
            "encoder–decoder views",
        ),
        (lambda a: selfattn.head_view(a, TOKENS, encoder_attention=a), "not both"),
    ],
)
def test_what_the_page_cannot_show_is_named(attention, call, match):
    with pytest.raises(ValueError, match=match):
        call(attention)


def test_an_sdpa_model_is_told_to_load_eager_attention():
    """transformers' default attention (SDPA) returns an empty tuple even with output_attentions=True."""
    with torch.no_grad():
        out = _bert("sdpa")(torch.tensor([[2, 5, 7, 3, 9, 4, 3]]), output_attentions=True)
    assert not out.attentions  # what the user has at hand
    for view in (selfattn.head_view, selfattn.model_view):
        with pytest.raises(ValueError, match='SDPA.*attn_implementation="eager"'):
            view(out.attentions, TOKENS)
    with pytest.raises(ValueError, match='attention is None.*attn_implementation="eager"'):
        selfattn.head_view(None, TOKENS)
