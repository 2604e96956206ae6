"""One role system: every view reads the part-of-speech roles of the text's own words (`analysis.roles`, jieba),
carried to whatever pieces the tokenizer cut (`Explanation.roles`, doc["roles"]): on a byte-level BPE that cuts
怪 and 兽 into byte pieces, each piece of 怪兽 is filed under the noun's role in the "·V as meaning" view, as the
head sentences credit 走进→怪兽; the terminal's meaning table sums the same roles."""

from __future__ import annotations

import io

import pytest
import torch
import transformers
from rich.console import Console

from selfattn.explainer.api import from_loaded
from selfattn.explainer.pipeline import Session, Spec
from selfattn.explainer.session import Explainer
from selfattn.explainer.views import tables
from tests.tolerances import TOL

TEXT = "一只蓝色怪兽走进森林"


@pytest.fixture(scope="module")
def byte_level():
    """A tiny random GPT-2 with a byte-level BPE trained offline on English only: every Chinese character is cut
    into its UTF-8 bytes (怪 → 怪(1/3) 怪(2/3) 怪(3/3))."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["a blue monster walks into the forest"] * 20, vocab_size=280, show_progress=False)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe)
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=tok.vocab_size + 10, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    return from_loaded(transformers.GPT2LMHeadModel(config).eval(), tok)


def test_each_byte_piece_of_a_word_takes_its_words_role(byte_level):
    e = Session(byte_level).explain(Spec(TEXT))
    labels = list(e.tokens.labels)
    monster = [i for i, label in enumerate(labels) if label.startswith(("怪(", "兽("))]
    assert len(monster) == 6, labels  # three byte pieces each: the tokenizer knows no Chinese
    assert [e.roles[i] for i in monster] == ["noun"] * 6
    verb = [i for i, label in enumerate(labels) if label.startswith(("走(", "进("))]
    assert {e.roles[i] for i in verb} == {"verb"}
    assert e.doc["roles"] == list(e.roles)


def test_the_default_model_and_the_terminal_read_the_same_roles():
    e = Session(Explainer.load()).explain(Spec(TEXT + "。这只怪兽在森林里睡觉。", layer=0, head=3))
    got = dict(zip(e.tokens.names, e.roles, strict=True))
    assert got["一只"] == "qm" and got["蓝色"] == "colour" and got["走进"] == "verb" and got["睡觉"] == "verb"
    assert got["怪兽@3"] == got["怪兽@8"] == "noun" and got["森林@5"] == got["森林@10"] == "place"  # clause 2 too
    short = Session(Explainer.load()).explain(Spec(TEXT, layer=0, head=3))
    console = Console(file=io.StringIO(), width=200)
    tables.render(short, console, lang="en")
    meaning = console.file.getvalue().split('·V as "meanings"')[1]
    row = next(line.split() for line in meaning.splitlines() if line.strip().startswith("走进"))
    w = short.weights(0, 3)[4]  # 走进's row: the noun 怪兽 is key 3, the only "creature"
    assert float(row[3]) == pytest.approx(
        100 * float(w[3]), abs=TOL["percent_rounded_to_1_decimal"]
    )  # quantity, colour, creature
