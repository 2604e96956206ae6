"""Training rows: paragraphs of whole sentences, random start positions, every sentence once per epoch."""

import random
from collections import Counter

import pytest
import torch

from selfattn.model.data import epoch_batches, paragraphs, plan_paragraphs

BOS, EOS, PAD = 2, 3, 0


def corpus_like(n, seed=0):
    """n sentences of 10–13 tokens (the corpus's lengths), each made of its own id so it can be traced."""
    rng = random.Random(seed)
    return [[100 + i] * rng.randint(10, 13) for i in range(n)]


def test_plan_fills_every_row_exactly_and_uses_each_sentence_once():
    lengths = [len(s) for s in corpus_like(3000)]
    rows = plan_paragraphs(lengths, 1025)
    assert sorted(i for row in rows for i in row) == list(range(3000))
    assert all(sum(lengths[i] for i in row) == 1023 for row in rows[:-1])  # + <bos> + <eos> = 1025
    assert 0 < sum(lengths[i] for i in rows[-1]) <= 1023


def test_plan_refuses_a_sentence_that_cannot_fit():
    with pytest.raises(ValueError, match="a sentence of 40 tokens cannot go into a row of 33 tokens"):
        plan_paragraphs([12, 40], 33)
    with pytest.raises(ValueError, match="row_len \\(<bos>, a token, <eos>\\) must be >= 3"):
        plan_paragraphs([1], 2)


def test_paragraphs_place_each_sentence_where_its_words_are(tokenizer, small_corpus):
    sentences = small_corpus.test
    out = paragraphs(tokenizer, sentences, 128)
    assert len(out) >= 9
    for row, placed in out:
        assert row[0] == tokenizer.bos_id and row[-1] == tokenizer.eos_id and len(row) <= 129
        for s, start in placed:
            assert row[start : start + len(s.words)] == tokenizer.encode_words(s.words, bos=False)
    assert sum(len(row) == 129 for row, _ in out) >= len(out) - 2  # full but for the queue's tail
    assert sorted(s.text for _, placed in out for s, _ in placed) == sorted(s.text for s in sentences)


def run_epoch(sentences, seed=0, **kw):
    args = dict(
        max_sentences=8,
        single_share=0.25,
        anchored_share=0.3,
        max_len=256,
        batch_size=16,
        batch_tokens=512,
        bos_id=BOS,
        eos_id=EOS,
        pad_id=PAD,
    )
    args.update(kw)
    return epoch_batches(sentences, generator=torch.Generator().manual_seed(seed), **args)


def test_an_epoch_reads_every_sentence_once_at_positions_the_model_has():
    sentences = corpus_like(800)
    batches = run_epoch(sentences)
    seen = Counter()
    singles = anchored = moved = 0
    for batch, start in batches:
        B, L = batch.shape
        assert start.shape == (B,) and start.dtype == torch.long
        assert int(start.min()) >= 0 and int(start.max()) + L - 1 <= 256  # input batch[:, :-1] fits
        for row, s in zip(batch.tolist(), start.tolist(), strict=True):
            row = [t for t in row if t != PAD]
            assert row[0] == BOS and row[-1] == EOS and BOS not in row[1:] and EOS not in row[:-1]
            ids = Counter(row[1:-1])
            seen.update(ids.keys())
            singles += len(ids) == 1 and s == 0
            moved += s > 0
            anchored += s == 0
    assert set(seen) == {100 + i for i in range(800)} and set(seen.values()) == {1}
    assert singles >= 200  # single_share 0.25
    assert moved > 0 and anchored > singles  # some paragraphs at 0, most not


def test_a_paragraph_holds_at_most_max_sentences_and_fits_max_len():
    for batch, _ in run_epoch(corpus_like(600), max_sentences=80, single_share=0.0, max_len=128):
        for row in batch.tolist():
            assert len([t for t in row if t != PAD]) <= 129
    for batch, _ in run_epoch(corpus_like(600), max_sentences=3, single_share=0.0):
        for row in batch.tolist():
            assert len({t for t in row if t >= 100}) <= 3


def test_epochs_follow_the_generator():
    a, b = run_epoch(corpus_like(300), seed=4), run_epoch(corpus_like(300), seed=4)
    assert len(a) == len(b)
    assert all(torch.equal(x, y) and torch.equal(s, t) for (x, s), (y, t) in zip(a, b, strict=True))
    c = run_epoch(corpus_like(300), seed=5)
    assert [x.tolist() for x, _ in a] != [x.tolist() for x, _ in c]


def test_bad_epoch_settings_are_named():
    with pytest.raises(ValueError, match="single_share must be in \\[0, 1\\], got 1.5"):
        run_epoch(corpus_like(10), single_share=1.5)
    with pytest.raises(ValueError, match="max_sentences must be >= 1, got 0"):
        run_epoch(corpus_like(10), max_sentences=0)
    with pytest.raises(ValueError, match="a sentence of 13 tokens does not fit max_len=12"):
        run_epoch([[5] * 13], max_len=12)
