"""An Explainer is a model, one tokenizer (the `Tokenizer` protocol) and a card: no loose callables, and every way
of building one (the bundled model, a checkpoint's words, two functions, a transformers tokenizer) gives a tokenizer
of the one protocol, which the pipeline reads the same way."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import torch

from selfattn.explainer.card import Card
from selfattn.explainer.pipeline import Session, Spec
from selfattn.explainer.session import Explainer
from selfattn.explainer.source.build import TransformersTokenizer
from selfattn.explainer.tokenizing import CheckpointTokenizer, FunctionTokenizer, Tokenizer
from tests.explainer.tiny import tiny_explainer

TEXT = "一只蓝色怪兽走进森林"


def test_an_explainer_holds_a_model_a_tokenizer_and_a_card_and_no_callable():
    fields = {f.name: f.type for f in dataclasses.fields(Explainer)}
    assert list(fields)[:3] == ["model", "tokenizer", "card"]
    assert not [name for name, kind in fields.items() if "Callable" in str(kind)], fields
    card_fields = {f.name: f.type for f in dataclasses.fields(Card)}
    assert not [name for name, kind in card_fields.items() if "Callable" in str(kind)], card_fields
    assert {"name", "max_len", "kind", "loaded", "positions"} <= set(card_fields)


def test_every_way_of_building_one_gives_the_one_protocol():
    bundled = Explainer.load()
    assert isinstance(bundled.tokenizer, CheckpointTokenizer) and isinstance(bundled.tokenizer, Tokenizer)
    tiny = tiny_explainer()
    assert isinstance(tiny.tokenizer, FunctionTokenizer) and isinstance(tiny.tokenizer, Tokenizer)
    assert typing.get_type_hints(Explainer)["tokenizer"] is Tokenizer


def test_a_transformers_tokenizer_is_read_through_the_protocol():
    transformers = pytest.importorskip("transformers")
    from tests.hf import models

    config = transformers.LlamaConfig(
        vocab_size=models.VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    from selfattn import hf

    hf.register()
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.set_attn_implementation("selfattn")
    ex = Explainer.from_transformers(model, models.tokenizer())
    reader = ex.tokenizer
    assert isinstance(reader, TransformersTokenizer) and isinstance(reader, Tokenizer)
    labels, ids, extra, pieces = reader.segment("a blue monster")
    assert ids.tolist() == models.tokenizer()("a blue monster")["input_ids"]  # the tokenizer's own ids
    assert extra == {"use_cache": False} and list(pieces.ids) == ids.tolist() and len(labels) == len(ids)
    assert ex.tokenize("a blue monster")[1].tolist() == ids.tolist()  # Explainer.tokenize is the same cut
    assert ex.card.kind == "decoder" and reader.kind == ex.tokenizer.kind


def test_the_pipeline_reads_a_function_tokenizer_like_the_explainer_it_came_from():
    tiny = tiny_explainer()
    again = Explainer.from_functions(
        tiny.model, tiny.tokenize, tiny.decode, name=tiny.card.name, max_len=tiny.card.max_len
    )
    a, b = (Session(x).explain(Spec(TEXT, layer=1, head=0)) for x in (tiny, again))
    assert a.tokens.labels == b.tokens.labels and torch.equal(a.weights(1, 0), b.weights(1, 0))


def test_a_tokenizer_or_card_of_another_kind_is_refused_by_name():
    tiny = tiny_explainer()
    with pytest.raises(TypeError, match="tokenizer must be a tokenizing.Tokenizer .* got object"):
        Explainer(tiny.model, object(), tiny.card)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="card must be a card.Card, got dict"):
        Explainer(tiny.model, tiny.tokenizer, {"name": "x"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tokenize and decode must be callables"):
        FunctionTokenizer("not a function", tiny.decode)  # type: ignore[arg-type]


def test_a_token_that_decodes_to_nothing_is_shown_by_its_id():
    """A model with random weights predicts ids past its tokenizer's vocabulary; they decode to "" and would be a
    blank row of the prediction (seen on the Qwen2.5-0.5B configuration's page): shown as their id instead."""
    transformers = pytest.importorskip("transformers")
    from tests.hf import models

    tok = models.tokenizer()
    past = len(tok) + 5
    assert tok.decode([past]) == ""
    model = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            vocab_size=past + 1,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=32,
        )
    )
    reader = TransformersTokenizer(tok, model, decoder=True)
    assert reader.shown(past) == f"⟨#{past}⟩" and reader.shown(tok.convert_tokens_to_ids("blue")) != ""
    tiny = tiny_explainer()
    assert FunctionTokenizer(tiny.tokenize, lambda i: "").shown(7) == "⟨#7⟩"
