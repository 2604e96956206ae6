"""Long-input metrics: what `paragraph_metrics` and `paragraph_probe` compute, checked by brute force."""

import math

import pytest
import torch

from selfattn.model.corpus import MEASURES, with_measure
from selfattn.model.data import paragraphs
from selfattn.model.decoder import DecoderConfig, DecoderLM
from selfattn.model.evaluate import paragraph_loss, paragraph_metrics
from selfattn.model.tutorial_probe import CLAIMS, paragraph_probe
from tests.tolerances import TOL

MAX_LEN = 96


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    m = DecoderLM(DecoderConfig(vocab_size=tokenizer.vocab_size, d_model=24, n_layers=2, n_heads=2, max_len=MAX_LEN))
    with torch.no_grad():  # logits of some spread, so that choices are not ties
        m.tok_emb.weight.normal_(std=0.5)
    return m.eval()


def test_late_agreement_is_the_full_pass_argmax(model, tokenizer, small_corpus):
    """paragraph_metrics scores the six measure words from a sliced KV cache; score them by full passes."""
    sentences = small_corpus.test[:40]
    result = paragraph_metrics(model, tokenizer, sentences)
    hits = n = 0
    with torch.no_grad():
        for row, placed in paragraphs(tokenizer, sentences, MAX_LEN):
            for s, start in placed:
                if start < MAX_LEN // 2:
                    continue
                end = start + s.index("noun") + 1
                scores = []
                for m in MEASURES:
                    ids = row[:start] + tokenizer.encode_words(with_measure(s, m), bos=False)
                    logp = torch.log_softmax(model(torch.tensor(ids[:end])[None, :-1])[0], -1)
                    scores.append(sum(float(logp[t - 1, ids[t]]) for t in range(start, end)))
                hits += MEASURES[max(range(6), key=scores.__getitem__)] == s.creature.measure
                n += 1
    late = result["late"]
    assert late["sentences"] == n > 5 and late["from"] == MAX_LEN // 2
    assert late["measure_agreement"] == pytest.approx(hits / n)


def test_perplexity_by_position_adds_up_to_the_paragraph_loss(model, tokenizer, small_corpus):
    result = paragraph_metrics(model, tokenizer, small_corpus.test)
    whole = paragraph_loss(model, tokenizer, small_corpus.test)
    buckets = result["by_position"]
    assert [b["from"] for b in buckets] == [0, 32] and buckets[-1]["to"] == MAX_LEN
    assert sum(b["tokens"] for b in buckets) == result["tokens"] == whole["tokens"]
    total = sum(math.log(b["perplexity"]) * b["tokens"] for b in buckets)
    assert total / whole["tokens"] == pytest.approx(whole["loss"], rel=TOL["loss_from_perplexity_rel"])
    assert result["late"]["perplexity"] > 1 and result["late"]["alone_perplexity"] > 1


def test_paragraph_probe_reports_every_head(model, tokenizer, small_corpus):
    probe = paragraph_probe(model, tokenizer, small_corpus.test)
    assert probe["n"] == paragraph_metrics(model, tokenizer, small_corpus.test)["late"]["sentences"] > 0
    assert [c["query"] for c in probe["claims"]] == [q for q, _ in CLAIMS]
    for claim in probe["claims"]:
        assert len(claim["heads"]) == claim["n_heads"] == 4
        for head in claim["heads"]:
            assert 0 <= head["hit_rate"] <= 1 and 0 <= head["mean_weight"] <= 1 and head["lift"] >= 0
