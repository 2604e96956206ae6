"""The model that ships inside the package, checked on the held-out test split it was trained beside."""

import math

import pytest

from selfattn.model import load_default
from selfattn.model.checkpoint import DEFAULT_DIR
from selfattn.model.corpus import make_corpus
from selfattn.model.data import paragraphs
from selfattn.model.evaluate import lm_metrics, measure_agreement, paragraph_metrics, ref_agreement
from selfattn.model.generate import generate_text
from selfattn.model.grammar import grammar_errors
from selfattn.model.train import PRESETS, default_command, fourier_positions
from selfattn.model.tutorial_probe import attention_maps, attention_probe
from tests.tolerances import TOL

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


def test_reads_1024_tokens(shipped):
    import torch

    model, tokenizer, _, corpus = shipped
    assert model.max_len == 1024
    row, placed = paragraphs(tokenizer, corpus.test, model.max_len)[0]
    ids = torch.tensor(row[:-1])  # <bos> + 1,023 tokens of test sentences
    assert ids.shape == (1024,) and len(placed) > 70
    logits, weights = attention_maps(model, ids)
    assert torch.isfinite(logits).all() and weights[0].shape == (model.config.n_heads, 1024, 1024)
    text = "".join(s.text for s, _ in placed)
    assert tokenizer.encode(text, bos=True) == row[:-1]  # the same paragraph, typed as text


def test_every_position_embedding_was_trained(shipped):
    import torch

    model, _, info, _ = shipped
    positions = info["positions"]
    assert positions["max_len"] == 1024 and positions["untrained"] == 0 and positions["min_tokens"] > 0
    preset = PRESETS["default"]
    start = fourier_positions(
        preset.max_len, preset.d_model, preset.pos_sigma, torch.Generator().manual_seed(info["seed"])
    )
    moved = (model.pos_emb.weight.detach() - start).norm(dim=-1) / start.norm(dim=-1)  # (1024,)
    assert float(moved.min()) == pytest.approx(positions["min_relative_change"], abs=TOL["four_decimals"])
    assert float(moved.min()) > 0.25  # the last position as much as the first


def test_long_inputs(shipped):
    """Test sentences packed into paragraphs of 1,024 tokens: the numbers recorded are the real ones."""
    model, tokenizer, info, corpus = shipped
    result = paragraph_metrics(model, tokenizer, corpus.test)
    recorded = info["metrics"]["paragraphs"]
    late = result["late"]
    assert late["sentences"] == recorded["late"]["sentences"] >= 400 and late["from"] == 512
    assert late["measure_agreement"] == recorded["late"]["measure_agreement"] >= 0.9
    assert math.isclose(late["perplexity"], recorded["late"]["perplexity"], rel_tol=1e-5)
    assert late["perplexity"] < 1.6 * late["alone_perplexity"]
    assert all(b["perplexity"] < 5.0 for b in result["by_position"]), result["by_position"]
