"""`selfattn explain --model FOLDER` on architectures beyond the seven the explainer was first written for:
decided by trying (the class read from the config, a dry run through selfattn), not by a list.

Each model is a tiny random build of its transformers Config class, saved like a hub folder (safetensors,
a word-level tokenizer trained offline). Its weights in the explanation are transformers' own eager
`output_attentions`; a decoder's prediction is eager's; an encoder has none, and refuses the no_causal
intervention with the reason. A model whose attention bypasses transformers' attention interface (GPT-Neo,
DeBERTa-v2), is refused by name.
"""

import json

import numpy as np
import pytest
import torch
import transformers

from selfattn.cli import main
from selfattn.explainer.interventions import Intervention
from selfattn.explainer.session import Explainer
from tests.explainer.documents import explained
from tests.hf.models import QK_GAIN, VOCAB, tokenizer
from tests.tolerances import TOL

TEXT = "a blue monster walks into the forest the cat sleeps"
_C = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=128,
    pad_token_id=0,
    bos_token_id=None,
    eos_token_id=None,
)

DECODERS = {
    "phi3": lambda: transformers.Phi3Config(**_C, num_key_value_heads=2),
    "gemma": lambda: transformers.GemmaConfig(**_C, num_key_value_heads=2, head_dim=8),
    "olmo2": lambda: transformers.Olmo2Config(**_C, num_key_value_heads=2),
    "starcoder2": lambda: transformers.Starcoder2Config(**_C, num_key_value_heads=2),
    "granite": lambda: transformers.GraniteConfig(**_C, num_key_value_heads=2),
    "stablelm": lambda: transformers.StableLmConfig(**_C, num_key_value_heads=2),
    "cohere": lambda: transformers.CohereConfig(**_C, num_key_value_heads=1),  # MQA: one key/value head
    "gpt_neox": lambda: transformers.GPTNeoXConfig(**_C),
}
ENCODERS = {
    "roberta": lambda: transformers.RobertaConfig(**_C),
    "distilbert": lambda: transformers.DistilBertConfig(
        vocab_size=VOCAB, dim=32, hidden_dim=64, n_layers=2, n_heads=4, max_position_embeddings=128, pad_token_id=0
    ),
    "electra": lambda: transformers.ElectraConfig(**_C, embedding_size=16),
    # local layers see a two-sided window (selfattn window=(w, w)), every second layer is global
    "modernbert": lambda: transformers.ModernBertConfig(**_C, global_attn_every_n_layers=2, local_attention=4),
}
REFUSED = {
    "gpt_neo": (
        lambda: transformers.GPTNeoConfig(
            vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]]
        ),
        "its attention bypasses transformers' attention interface",
    ),
    "deberta_v2": (
        lambda: transformers.DebertaV2Config(**_C),
        "its attention bypasses transformers' attention interface",
    ),
}


def _build(config) -> torch.nn.Module:
    """The class transformers names for the config (causal LM when it has one the config is built for)."""
    torch.manual_seed(0)
    decoder = config.model_type in DECODERS or config.model_type == "gpt_neo"
    auto = transformers.AutoModelForCausalLM if decoder else transformers.AutoModel
    model = auto.from_config(config).eval()
    with torch.no_grad():  # peaked attention, so that heads differ
        for name, p in model.named_parameters():
            if p.dim() == 2 and any(part in name for part in ("q_proj", "k_proj", "query", "key", "q_lin", "k_lin")):
                p.mul_(QK_GAIN)
    return model


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("arch")
    out = {}
    for kind, make in {**DECODERS, **ENCODERS, **{k: v[0] for k, v in REFUSED.items()}}.items():
        folder = root / kind
        _build(make()).save_pretrained(folder, safe_serialization=True)
        tokenizer().save_pretrained(folder)
        out[kind] = folder
    return out


def _eager(folder, kind):
    auto = transformers.AutoModelForCausalLM if kind in DECODERS else transformers.AutoModel
    return auto.from_pretrained(folder, attn_implementation="eager").eval()


def _json(capsys, *args) -> dict:
    assert main(["explain", TEXT, *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_at_least_six_architectures_beyond_the_first_seven():
    first = {"llama", "qwen2", "qwen3", "mistral", "gemma2", "gpt2", "bert"}
    assert len(set(DECODERS) | set(ENCODERS) - first) >= 6 and ENCODERS and DECODERS


@pytest.mark.parametrize("kind", [*DECODERS, *ENCODERS])
def test_explain_folder_weights_are_eagers(kind, folders, capsys):
    folder = folders[kind]
    doc = _json(capsys, "--model", str(folder), "--layers", "0,1")  # both layers' weights in the JSON
    decoder = kind in DECODERS
    assert doc["model"]["kind"] == ("decoder" if decoder else "encoder")
    assert doc["model"]["loaded"]["class"].startswith("AutoModelForCausalLM" if decoder else "AutoModel ")
    eager = _eager(folder, kind)
    ids = torch.tensor([doc["token_ids"]])
    with torch.no_grad():
        kwargs = {} if decoder else {"attention_mask": torch.ones_like(ids)}
        out = eager(ids, output_attentions=True, **kwargs)
    for l, att in enumerate(out.attentions):
        for h in range(att.shape[1]):
            np.testing.assert_allclose(
                np.array(doc["layers"][l]["weights"][h]), att[0, h].numpy(), atol=TOL["json_weights"], rtol=0
            )
    if decoder:
        probs = torch.softmax(out.logits[0, -1].double(), -1)
        assert doc["prediction"][0]["id"] == int(probs.argmax())
        assert doc["prediction"][0]["prob"] == pytest.approx(float(probs.max()), abs=TOL["float32_vs_transformers"])
    else:
        later = sum(w for head in doc["layers"][0]["weights"] for i, row in enumerate(head) for w in row[i + 1 :])
        assert doc["prediction"] == [] and not doc["layers"][0]["causal"] and later > 0  # keys after the query seen
    want = (
        "positions.learned"
        if kind in ENCODERS and kind != "modernbert"
        else "positions.rope_qk_norm"
        if kind == "olmo2"
        else "positions.rope"
    )
    assert doc["model"]["positions_key"] == want, doc["model"]
    n_heads, n_kv = doc["model"]["n_heads"], doc["model"]["n_kv_heads"]
    assert doc["model"]["kv_of_head"] == [h // (n_heads // n_kv) for h in range(n_heads)]


def test_the_qk_norm_and_grouped_heads_are_named(folders, capsys):
    olmo = _json(capsys, "--model", str(folders["olmo2"]), "--lang", "en")
    assert olmo["model"]["positions_key"] == "positions.rope_qk_norm"  # Olmo2 normalises Q and K
    assert main(["explain", TEXT, "--model", str(folders["cohere"]), "--lang", "en"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "multi-query attention (MQA): all 4 query heads share one key/value head" in out
    assert "this head reads key/value head 0 (shared by 4 query heads)" in out
    assert main(["explain", TEXT, "--model", str(folders["phi3"]), "--lang", "en"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "grouped-query attention (GQA): 4 query heads share 2 key/value heads, 2 per group" in out
    assert "heads 0–1 read KV 0; heads 2–3 read KV 1" in out


def test_an_encoder_has_no_causal_switch_and_no_prediction(folders, capsys):
    assert main(["explain", TEXT, "--model", str(folders["roberta"]), "--lang", "en"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Encoder: every token sees every token (no causal mask)" in out and "next-token prediction:" not in out
    assert main(["explain", TEXT, "--model", str(folders["roberta"]), "--no-causal"]) == 1
    err = capsys.readouterr().err
    assert "is an encoder" in err and "no causal mask to switch off" in err and "Traceback" not in err
    ex = Explainer.load(folders["electra"])
    with pytest.raises(ValueError, match="no causal mask to switch off"):
        explained(ex, TEXT, intervention=Intervention(causal=False))
    entry = next(e for e in explained(ex, TEXT)["interventions"] if e["name"] == "no_causal")
    assert "no causal mask" in entry["unavailable"]["en"] and entry["unavailable"]["zh"]


@pytest.mark.parametrize("kind", list(REFUSED))
def test_a_model_the_explainer_cannot_see_is_refused_by_name(kind, folders, capsys):
    assert main(["explain", TEXT, "--model", str(folders[kind])]) == 1
    err = capsys.readouterr().err
    model_type = REFUSED[kind][0]().model_type  # "deberta-v2"
    assert f"model_type {model_type!r}" in err and "is not supported" in err and REFUSED[kind][1] in err, err
    last = err.strip().splitlines()[-1]  # after transformers' own progress bar
    assert "Traceback" not in err and last.startswith("selfattn explain: error:") and REFUSED[kind][1] in last


def test_an_encoder_decoder_is_refused_before_its_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(transformers.T5Config(num_layers=2).to_dict()))
    with pytest.raises(ValueError, match="'t5' is not supported: it is an encoder–decoder model"):
        Explainer.load(tmp_path)
