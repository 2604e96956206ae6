"""A predicted piece that begins a character is shown with the character it begins (issue 26 item 5): on the
real SmolLM2 (byte-level BPE) the completed character is the one plain transformers generate() gives, greedily."""

from __future__ import annotations

import re

import pytest
import torch
from transformers import AutoTokenizer

from selfattn.explainer import pieces as P
from selfattn.explainer.session import Explainer
from tests.explainer.documents import explained
from tests.explainer.source.test_real_model import GGUF, _folder

TEXT = "我们今天去"
"""SmolLM2's top five after it hold four pieces that begin a Chinese character (看 … as one byte E7)."""

COMPLETED = re.compile(r"^(.) \((\d)/(\d): ⟨([0-9A-F ]+)⟩\)$")


@pytest.fixture(scope="module")
def smol():
    return Explainer.load(_folder() / GGUF)


def test_a_partial_prediction_is_completed_as_greedy_generate_completes_it(smol):
    doc = explained(smol, TEXT, layers="selected", prepend_bos=False)  # the tokenizer's ids, no BOS added
    tok = AutoTokenizer.from_pretrained(str(_folder()), gguf_file=GGUF)
    context = tok(TEXT)["input_ids"]
    assert context == doc["token_ids"]
    partial = [p for p in doc["prediction"] if "\ufffd" in tok.decode([p["id"]])]
    assert len(partial) >= 2, doc["prediction"]  # the text is chosen for them: the test must see some
    model = smol.model
    model.set_attn_implementation("eager")  # plain transformers, not selfattn's attention
    try:
        for p in partial:
            assert "\ufffd" not in p["shown"]
            with torch.no_grad():
                out = model.generate(
                    torch.tensor([[*context, p["id"]]]), max_new_tokens=3, do_sample=False, pad_token_id=0
                )
            new = out[0, len(context) :].tolist()
            text = tok.decode(new)
            char = text[0]  # the character the piece begins, as generate() spells it
            assert char != "\ufffd", (p, text)
            m = COMPLETED.match(p["shown"])
            assert m is not None, p["shown"]
            k, n = int(m.group(2)), int(m.group(3))
            assert m.group(1) == char and n == len(char.encode("utf-8"))
            assert bytes.fromhex(m.group(4)) == char.encode("utf-8")[:k]
    finally:
        model.set_attn_implementation("selfattn")


def test_no_completion_under_an_intervention_nor_for_a_whole_character(smol):
    from selfattn.explainer.interventions import Intervention

    changed = Intervention({"temperature": {"t": 1.01}}, layer=0, head=0)  # applied, changing next to nothing
    assert changed
    doc = explained(smol, TEXT, layers="selected", intervention=changed)
    shown = [p["shown"] for p in doc["prediction"]]
    assert all(COMPLETED.match(s) is None and "\ufffd" not in s for s in shown)
    assert re.fullmatch(r"⟨E[0-9A-F]⟩", shown[1]), shown  # the bytes alone: the model under a change completes none


@pytest.mark.parametrize(
    ("data", "want"),
    [
        (b"\xe9", (b"", b"\xe9", 3)),
        (b" \xe9\x83", (b" ", b"\xe9\x83", 3)),
        (b"\xf0\x9f", (b"", b"\xf0\x9f", 4)),
        (b"ab", None),
        (b"\x83\xbd", None),  # continues a character of the text: begins none
        (b"\xe9\x83\xbd", None),  # a whole character (都)
        (b"\xff", None),
    ],
)
def test_partial_tail_reads_utf8(data, want):
    assert P.partial_tail(data) == want
    assert P.shown_completed(b" ", b"\xe9", "都", 3) == "␣都 (1/3: ⟨E9⟩)"
