import pytest
import torch

from selfattn.model.checkpoint import load_checkpoint
from selfattn.model.decoder import DecoderConfig, DecoderLM
from selfattn.model.generate import generate, generate_text, next_token

V = 41


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(1)
    m = DecoderLM(DecoderConfig(vocab_size=V, d_model=32, n_layers=2, n_heads=4, max_len=40, tie_embeddings=False))
    with torch.no_grad():  # logits of about unit spread: neither uniform nor one-hot
        m.lm_head.weight.normal_(std=0.2)
    return m.eval()


@pytest.mark.parametrize(
    "kwargs", [dict(greedy=True), dict(temperature=0.7, seed=3), dict(temperature=1.3, top_k=5, seed=11)]
)
def test_kv_cache_generation_equals_uncached_token_for_token(model, kwargs):
    prompt = torch.tensor([[2, 7, 9], [2, 30, 4]])
    cached = generate(model, prompt, 25, use_cache=True, **kwargs)
    uncached = generate(model, prompt, 25, use_cache=False, **kwargs)
    assert cached.shape == (2, 28)
    assert torch.equal(cached, uncached)
    assert torch.equal(cached[:, :3], prompt)


def test_sampling_is_seeded_and_top_k_one_is_greedy(model):
    prompt = torch.tensor([2, 5])
    a = generate(model, prompt, 20, seed=5)
    assert torch.equal(a, generate(model, prompt, 20, seed=5))
    assert not torch.equal(a, generate(model, prompt, 20, seed=6))
    assert torch.equal(generate(model, prompt, 20, top_k=1, seed=9), generate(model, prompt, 20, greedy=True))


def test_top_k_samples_only_among_the_k_best():
    logits = torch.tensor([[0.0, 5.0, 4.0, -1.0, 3.0]]).repeat(200, 1)
    g = torch.Generator().manual_seed(0)
    picked = next_token(logits, top_k=2, generator=g)
    assert set(picked.tolist()) == {1, 2}


def test_generation_stops_at_eos_and_pads_finished_rows_with_it(model):
    prompt = torch.tensor([[2, 7], [2, 8]])
    free = generate(model, prompt, 12, greedy=True)
    eos = int(free[0, 2])  # row 0's first new token
    out = generate(model, prompt, 12, greedy=True, eos_id=eos)
    assert torch.all(out[0, 2:] == eos)
    hits = (free[1, 2:] == eos).nonzero()
    if len(hits):  # row 1 also said eos: both stop there
        k = 2 + int(hits[0])
        assert out.shape[1] == k + 1 and torch.equal(out[1], free[1, : k + 1])
    else:  # row 1 never did: it runs to the end
        assert torch.equal(out[1], free[1])


def test_bad_settings_are_named(model):
    p = torch.tensor([2, 3])
    with pytest.raises(ValueError, match="temperature must be >= 0.01, got -1"):
        generate(model, p, 5, temperature=-1)
    with pytest.raises(ValueError, match="top_k must be >= 1, got 0"):
        generate(model, p, 5, top_k=0)
    with pytest.raises(TypeError, match="top_k must be an int"):
        generate(model, p, 5, top_k=2.5)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 0, got -2"):
        generate(model, p, -2)
    with pytest.raises(ValueError, match="2 tokens \\+ 40 new tokens needs 41 positions; the model has max_len=40"):
        generate(model, p, 40)


def test_generate_text_with_a_trained_checkpoint(tiny_run):
    _, folder = tiny_run
    lm, tok, _ = load_checkpoint(folder)
    g = generate_text(lm, tok, "一只蓝色", 30, greedy=True)
    assert g.prompt_tokens == ["一只", "蓝色"] and g.unknown == []
    odd = generate_text(lm, tok, "一只☃蓝色", 2, greedy=True)
    assert odd.prompt_tokens == ["一只", "<unk>", "蓝色"] and odd.unknown == ["☃"]
    assert g.text.startswith("一只蓝色") and g.text == "一只蓝色" + g.continuation
    assert g.stopped in ("eos", "max_new_tokens")
    assert g.continuation == "".join(g.new_tokens)
    assert generate_text(lm, tok, "一只蓝色", 30, greedy=True, use_cache=False) == g
    s1 = generate_text(lm, tok, "两条", 30, temperature=0.8, top_k=10, seed=4)
    assert s1 == generate_text(lm, tok, "两条", 30, temperature=0.8, top_k=10, seed=4, use_cache=False)
    assert s1.to_dict()["seed"] == 4
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1, got 0"):
        generate_text(lm, tok, "一只", 0)
    with pytest.raises(TypeError, match="text must be a str"):
        generate_text(lm, tok, 5)
