"""The BOS before a text (`Explainer.bos`, `Explainer.cut(text, prepend_bos)`), as TransformerLens' `to_tokens`:
written out case by case from the tokenizer's own ids, and said in the model card, the terminal and the cache."""

import io

import pytest
import torch

import selfattn
from selfattn.explainer import api, catalogue, pipeline
from selfattn.explainer.session import Explainer

transformers = pytest.importorskip("transformers")

from ...hf import models  # noqa: E402 - needs transformers
from .test_detect_bos import bare_tokenizer  # noqa: E402

TEXT = "the cat sleeps in the house"
CLS = 2


def explainer(tok, bos) -> Explainer:
    m = models.build("llama", "eager")
    m.config.bos_token_id = bos
    return api.explainer_of((m, tok), None)


def ids_of(ex: Explainer, prepend_bos) -> list[int]:
    return [int(i) for i in ex.cut(TEXT, prepend_bos)[1]]


@pytest.fixture(scope="module")
def bare():
    return bare_tokenizer()


@pytest.fixture(scope="module")
def own():
    return models.tokenizer()  # puts [CLS] (id 2) first, as Llama's puts <s>


def test_a_tokenizer_that_puts_none_gets_the_models_bos(bare):
    ex, plain = explainer(bare, CLS), bare(TEXT)["input_ids"]
    assert plain[0] != CLS
    assert ids_of(ex, None) == ids_of(ex, True) == [CLS, *plain]
    assert ids_of(ex, False) == plain
    assert ex.bos() == {"prepend_bos": True, "id": CLS, "token": "[CLS]", "added": True, "removed": False}
    pieces = ex.cut(TEXT)[3]
    assert pieces.special[0] and not any(pieces.special[1:]) and pieces.labels[1:] == ex.cut(TEXT, False)[3].labels


def test_a_tokenizer_that_puts_the_bos_first_keeps_it_or_loses_it(own):
    ex, plain = explainer(own, CLS), own(TEXT)["input_ids"]
    assert plain[0] == CLS
    assert ids_of(ex, None) == ids_of(ex, True) == plain  # never twice
    assert ids_of(ex, False) == plain[1:]  # TransformerLens removes the tokenizer's BOS
    assert ex.bos(False)["removed"] and not ex.bos()["added"]


def test_a_first_token_that_is_not_the_models_bos_is_kept(own):
    ex, plain = explainer(own, 1), own(TEXT)["input_ids"]  # the model's BOS is another id
    assert ids_of(ex, None) == ids_of(ex, False) == plain
    assert ex.bos(False) == {"prepend_bos": False, "id": CLS, "token": "[CLS]", "added": False, "removed": False}


def test_a_model_without_bos(bare):
    ex, plain = explainer(bare, None), bare(TEXT)["input_ids"]
    assert ids_of(ex, None) == ids_of(ex, False) == plain
    with pytest.raises(ValueError, match="has no BOS token"):
        ex.cut(TEXT, True)
    with pytest.raises(TypeError, match="prepend_bos must be True, False or None"):
        ex.cut(TEXT, 1)


def test_every_output_says_it_and_the_cache_keeps_them_apart(bare):
    ex = explainer(bare, CLS)
    session = pipeline.Session(ex)
    with_bos = session.explain(pipeline.Spec(TEXT))
    without = session.explain(pipeline.Spec(TEXT, prepend_bos=False))  # the same cache: its own trace
    asked = session.explain(pipeline.Spec(TEXT, prepend_bos=True))
    assert without.doc["token_ids"] == bare(TEXT)["input_ids"]
    assert with_bos.doc["token_ids"] == asked.doc["token_ids"] == [CLS, *bare(TEXT)["input_ids"]]
    assert with_bos.trace is asked.trace  # True is the default here: one trace
    card = with_bos.doc["model"]["bos"]
    assert card["added"] and "[CLS]" in card["text"]["en"] and "TransformerLens" in card["text"]["en"]
    assert without.doc["model"]["bos"]["text"]["en"] == catalogue.text("tables.bos_none", "en", token="")
    from rich.console import Console

    from selfattn.explainer.views import tables

    console = Console(file=io.StringIO(), width=200)
    tables.render(with_bos, console, lang="en")
    assert card["text"]["en"] in console.file.getvalue()
    assert '"bos"' in with_bos.to_json()
    e = selfattn.explain(TEXT, model=ex, prepend_bos=False)
    assert e.card.bos["prepend_bos"] is False and torch.equal(e.tokens.ids, without.tokens.ids)


def test_the_heads_taxonomy_says_it(bare, tmp_path, capsys):
    from rich.console import Console

    from selfattn.explainer import experiments
    from selfattn.explainer.views import research_tables

    ex = explainer(bare, CLS)
    t = experiments.taxonomy(ex, TEXT, prepend_bos=False)
    assert t["bos"]["prepend_bos"] is False and not t["bos"]["added"]
    console = Console(file=io.StringIO(), width=200)
    research_tables.taxonomy(t, console, lang="en")
    assert t["bos"]["text"]["en"] in console.file.getvalue()
    assert experiments.taxonomy(ex, TEXT)["bos"]["added"]  # the default: the model's BOS first
    from selfattn.cli import main

    folder = models.save("llama", tmp_path / "llama")
    assert main(["heads", TEXT, "--model", str(folder), "--no-prepend-bos", "--json"]) == 0
    assert '"prepend_bos": false' in capsys.readouterr().out
