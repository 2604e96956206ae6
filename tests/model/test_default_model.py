"""The model that ships inside the package, checked on the held-out test split it was trained beside."""

import math

import pytest

from selfattn.model import load_default
from selfattn.model.checkpoint import DEFAULT_DIR
from selfattn.model.corpus import make_corpus
from selfattn.model.evaluate import lm_metrics, measure_agreement, ref_agreement
from selfattn.model.generate import generate_text
from selfattn.model.grammar import grammar_errors
from selfattn.model.probe import attention_probe
from selfattn.model.train import default_command

MAX_BYTES = 5 * 1024 * 1024


@pytest.fixture(scope="module")
def shipped():
    model, tokenizer, info = load_default()
    corpus = make_corpus(**info["corpus"])
    return model, tokenizer, info, corpus


def test_ships_inside_the_package_and_is_small():
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (DEFAULT_DIR / name).is_file()
    assert (DEFAULT_DIR / "model.safetensors").stat().st_size <= MAX_BYTES


def test_records_how_to_rebuild_it(shipped):
    _, _, info, _ = shipped
    assert info["preset"] == "default"
    assert info["command"] == default_command("default", info["seed"])


def test_test_split_is_held_out(shipped):
    _, _, _, corpus = shipped
    train_pairs = {(s.colour, s.creature.noun) for s in corpus.train}
    assert not train_pairs & {(s.colour, s.creature.noun) for s in corpus.test}


def test_measure_word_agreement_on_held_out_sentences(shipped):
    model, tokenizer, info, corpus = shipped
    result = measure_agreement(model, tokenizer, corpus.test)
    assert result["n"] == len(corpus.test) >= 500
    assert result["accuracy"] >= 0.95, result["errors"]
    assert all(acc >= 0.9 for acc in result["by_measure"].values()), result["by_measure"]
    assert result["accuracy"] == info["metrics"]["measure_agreement"]["accuracy"]
    ref = ref_agreement(model, tokenizer, corpus.test)
    assert ref["accuracy"] >= 0.95 and ref["n"] >= 100


def test_an_untrained_model_fails_the_same_agreement_test(shipped):
    """Without the noun -> measure-word dependency the best guess is the commonest measure word."""
    import torch

    from selfattn.model.decoder import DecoderLM

    model, tokenizer, _, corpus = shipped
    torch.manual_seed(0)
    untrained = DecoderLM(model.config).eval()
    assert measure_agreement(untrained, tokenizer, corpus.test)["accuracy"] < 0.5


def test_the_recorded_perplexity_is_the_real_one(shipped):
    model, tokenizer, info, corpus = shipped
    val = lm_metrics(model, tokenizer, corpus.val)
    assert math.isclose(val["perplexity"], info["metrics"]["val"]["perplexity"], rel_tol=1e-5)
    assert val["perplexity"] < 4.0


def test_attention_probe(shipped):
    model, tokenizer, info, corpus = shipped
    probe = attention_probe(model, tokenizer, corpus.test)
    noun = next(c for c in probe["claims"] if c["query"] == "noun")
    assert noun["targets"] == ["qm", "colour"] and noun["n_heads"] == model.config.n_layers * model.config.n_heads
    assert noun["heads_hit"] == info["probe"]["noun"]["heads_hit"] >= 1
    for head in noun["heads"]:
        assert 0.0 <= head["hit_rate"] <= 1.0


def test_generates_grammatical_continuations(shipped):
    model, tokenizer, _, _ = shipped
    g = generate_text(model, tokenizer, "一只蓝色", greedy=True)
    assert g.stopped == "eos"
    assert grammar_errors(tokenizer.tokenize(g.text)) == [], g.text
    for prompt in ("一条", "两位金色", "一头"):
        g = generate_text(model, tokenizer, prompt, greedy=True)
        assert grammar_errors(tokenizer.tokenize(g.text)) == [], g.text
