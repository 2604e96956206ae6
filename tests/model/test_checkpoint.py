import json

import pytest
import torch

from selfattn.model.checkpoint import load_checkpoint, save_checkpoint
from selfattn.model.decoder import DecoderConfig, DecoderLM


def test_round_trip_gives_the_same_logits(tokenizer, tmp_path):
    torch.manual_seed(0)
    model = DecoderLM(DecoderConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2)).eval()
    files = save_checkpoint(model, tokenizer, tmp_path / "ck", training={"seed": 1})
    assert sorted(files) == ["config.json", "model.safetensors", "tokenizer.json"]
    loaded, tok, info = load_checkpoint(tmp_path / "ck")
    ids = torch.tensor(tokenizer.encode("一只蓝色怪兽走进森林"))
    assert torch.equal(loaded(ids), model(ids))
    assert loaded.lm_head.weight is loaded.tok_emb.weight
    assert tok.tokens == tokenizer.tokens and info == {"seed": 1}
    with pytest.raises(FileExistsError, match="already exists"):
        save_checkpoint(model, tokenizer, tmp_path / "ck")
    save_checkpoint(model, tokenizer, tmp_path / "ck", force=True)


def test_broken_checkpoints_are_named(tokenizer, tmp_path):
    model = DecoderLM(DecoderConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2))
    folder = tmp_path / "ck"
    save_checkpoint(model, tokenizer, folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["model"]["n_layers"] = 2
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError, match=r"missing tensor 'blocks\.1\.ln_1\.weight' \(shape \(16,\)\) and \d+ more"):
        load_checkpoint(folder)
    config["model"]["n_layers"] = 1
    config["model"]["d_model"] = 20
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError, match=r"tensor 'tok_emb\.weight' has shape \(\d+, 16\), the model expects \(\d+, 20\)"):
        load_checkpoint(folder)
    (folder / "model.safetensors").write_bytes(b"corrupt")
    config["model"]["d_model"] = 16
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError, match="model.safetensors is not a readable safetensors file"):
        load_checkpoint(folder)
    with pytest.raises(FileNotFoundError, match="checkpoint folder not found"):
        load_checkpoint(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="vocab_size"):
        save_checkpoint(DecoderLM(DecoderConfig(vocab_size=7, d_model=8, n_layers=1, n_heads=2)), tokenizer, tmp_path / "x")
