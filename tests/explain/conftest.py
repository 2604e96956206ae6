import pytest
import torch

from selfattn.explain.session import Explainer
from selfattn.model.checkpoint import save_checkpoint
from selfattn.model.decoder import DecoderConfig, DecoderLM
from selfattn.model.tokenizer import WordTokenizer

WORDS = ["一只", "蓝色", "怪兽", "走进", "森林", "<script>"]


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A small random decoder (GQA, max_len 1024) saved as a checkpoint folder."""
    torch.manual_seed(0)
    tokenizer = WordTokenizer.from_words([WORDS])
    model = DecoderLM(DecoderConfig(vocab_size=tokenizer.vocab_size, d_model=32, n_layers=2, n_heads=4,
                                    n_kv_heads=2, max_len=1024))
    with torch.no_grad():  # larger weights than the init, so heads differ visibly
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(15)
    path = tmp_path_factory.mktemp("ckpt") / "tiny"
    save_checkpoint(model, tokenizer, path)
    return path


@pytest.fixture(scope="session")
def tiny(tiny_checkpoint):
    return Explainer.load(tiny_checkpoint)
