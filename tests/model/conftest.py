"""Shared fixtures for the model tests: a small corpus, its tokenizer, one tiny trained checkpoint."""

from __future__ import annotations

import pytest

from selfattn.model.corpus import all_words, make_corpus
from selfattn.model.tokenizer import WordTokenizer


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """These models are tiny: a second intra-op thread gains little, and on a machine whose two
    cores are shared with other work, spinning OpenMP threads made these tests 5x slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def small_corpus():
    return make_corpus(n_train=600, n_val=100, n_test=100, seed=7)


@pytest.fixture(scope="session")
def tokenizer(small_corpus):
    c = small_corpus
    return WordTokenizer.from_words([s.words for s in c.train + c.val + c.test], user_words=all_words())


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """The "tiny" preset trained once for the session: (summary, checkpoint folder)."""
    from selfattn.model.train import run_training

    out = tmp_path_factory.mktemp("tiny") / "ckpt"
    summary = run_training("tiny", out, seed=0, progress=False)
    return summary, out
