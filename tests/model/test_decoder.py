import pytest
import torch

from selfattn.model.decoder import DecoderConfig, DecoderLM
from selfattn.modules import KVCache, MultiHeadSelfAttention
from tests.tolerances import TOL

V = 37


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return DecoderLM(DecoderConfig(vocab_size=V, d_model=24, n_layers=2, n_heads=3, max_len=20)).eval()


def test_shapes_and_the_building_blocks(model):
    ids = torch.randint(0, V, (2, 7))
    assert model(ids).shape == (2, 7, V)
    assert model(ids[0]).shape == (7, V)
    assert torch.allclose(model(ids[0]), model(ids)[0], atol=TOL["float32_same_model"])
    assert all(isinstance(b.attn, MultiHeadSelfAttention) and b.attn.causal for b in model.blocks)
    assert model.lm_head.weight is model.tok_emb.weight


def test_a_position_never_sees_the_future(model):
    ids = torch.randint(0, V, (1, 9))
    changed = ids.clone()
    changed[0, 6:] = (changed[0, 6:] + 1) % V
    a, b = model(ids), model(changed)
    assert torch.allclose(a[:, :6], b[:, :6], atol=TOL["float32_same_model"])
    assert not torch.allclose(a[:, 6:], b[:, 6:], atol=TOL["must_differ"])


def test_kv_cache_in_pieces_equals_one_full_pass(model):
    ids = torch.randint(0, V, (2, 11))
    full = model(ids)
    cache = model.new_cache()
    assert len(cache) == 2 and all(isinstance(c, KVCache) for c in cache)
    parts, start = [], 0
    for size in (3, 1, 1, 4, 2):
        parts.append(model(ids[:, start : start + size], cache=cache))
        start += size
    assert cache[0].length == 11
    assert torch.allclose(torch.cat(parts, dim=1), full, atol=TOL["float32"])


def test_start_places_the_input_at_later_positions(model):
    ids = torch.randint(0, V, (3, 5))
    # the same tokens elsewhere read differently
    assert not torch.allclose(model(ids, start=7), model(ids), atol=TOL["must_differ"])
    per_row = model(ids, start=torch.tensor([0, 7, 15]))  # one start per row
    alone = [model(ids[b : b + 1], start=s) for b, s in enumerate((0, 7, 15))]
    assert torch.allclose(per_row, torch.cat(alone), atol=TOL["float32_same_model"])
    assert torch.allclose(per_row[0], model(ids[0]), atol=TOL["float32_same_model"])


def test_start_must_fit_and_not_meet_a_cache(model):
    ids = torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match="21 positions \\(start 16 \\+ input 5\\) exceed max_len=20"):
        model(ids, start=16)
    with pytest.raises(ValueError, match="21 positions \\(start 16 \\+ input 5\\) exceed max_len=20"):
        model(ids, start=torch.tensor([0, 16]))
    with pytest.raises(ValueError, match="start must be >= 0, got -1"):
        model(ids, start=torch.tensor([-1, 0]))
    with pytest.raises(ValueError, match="shape \\(B,\\) = \\(2,\\)"):
        model(ids, start=torch.tensor([1, 2, 3]))
    with pytest.raises(TypeError, match="start must be an int or a \\(B,\\) int tensor, got float"):
        model(ids, start=1.0)
    with pytest.raises(ValueError, match="pass start or cache, not both"):
        model(ids, cache=model.new_cache(), start=3)


def test_bad_inputs_are_named(model):
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 37\), got \[0, 37\]"):
        model(torch.tensor([[0, 37]]))
    with pytest.raises(ValueError, match="21 positions .* exceed max_len=20"):
        model(torch.zeros(1, 21, dtype=torch.long))
    with pytest.raises(TypeError, match="int64 or int32"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="cache has 1 layers"):
        model(torch.zeros(1, 3, dtype=torch.long), cache=[KVCache()])
    with pytest.raises(ValueError, match="activation must be one of"):
        DecoderConfig(vocab_size=5, activation="swish")
    with pytest.raises(ValueError, match="d_model must be >= 1, got 0"):
        DecoderConfig(vocab_size=5, d_model=0)
    with pytest.raises(ValueError, match="unknown DecoderConfig fields"):
        DecoderConfig.from_dict({"vocab_size": 5, "width": 3})


def test_a_few_steps_of_training_lower_the_loss():
    torch.manual_seed(0)
    m = DecoderLM(DecoderConfig(vocab_size=V, d_model=32, n_layers=1, n_heads=2, max_len=16))
    ids = torch.arange(12).repeat(8, 1) % V  # a pattern to learn
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(m(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.2 * losses[0]


def test_caches_out_of_sync_are_refused_by_name(model):
    """issue 18 item 4: after a step stopped between layers (lengths [6, 4]) the next step ran with wrong
    logits, and one KVCache object given for both layers was accepted."""
    ids = torch.randint(0, V, (1, 6))
    cache = model.new_cache()
    model(ids[:, :4], cache=cache)
    q, k, v = model.blocks[0].attn.project(model.blocks[0].ln_1(torch.zeros(1, 2, 24)))
    cache[0].append(k, v)  # layer 0 went on, layer 1 did not
    with pytest.raises(ValueError, match=r"the cache's layers are out of sync: they hold \[6, 4\] positions"):
        model(ids[:, 4:], cache=cache)
    assert [len(c) for c in cache] == [6, 4]  # a refused call writes nothing
    one = KVCache()
    with pytest.raises(ValueError, match=r"cache\[0\] and cache\[1\] are one KVCache object"):
        model(ids, cache=[one, one])
    assert len(one) == 0
    with pytest.raises(TypeError, match=r"cache\[1\] must be a KVCache, got dict"):
        model(ids, cache=[KVCache(), {}])
    with pytest.raises(TypeError, match="cache must be a list of KVCache, one per layer"):
        model(ids, cache=KVCache())


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_a_step_stopped_between_layers_leaves_every_layer_as_it_was(model, monkeypatch, error):
    ids = torch.randint(0, V, (2, 9))
    cache = model.new_cache()
    model(ids[:, :5], cache=cache)

    def stopped(*args, **kwargs):
        raise error("stopped in layer 1")

    with monkeypatch.context() as m:
        m.setattr(model.blocks[1].attn, "forward", stopped)
        with pytest.raises(error, match="stopped in layer 1"):
            model(ids[:, 5:], cache=cache)
    assert [len(c) for c in cache] == [5, 5]
    rest = model(ids[:, 5:], cache=cache)  # the step again: the logits of one full pass
    torch.testing.assert_close(rest, model(ids)[:, 5:], rtol=0, atol=TOL["float32_same_model"])
