"""One reading of a token in every view (issue 26 item 5): a no-break space, a tab, a joiner and a byte that
is not a whole character are written the same in the terminal, the JSON and the page (`pieces.shown_text`)."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from selfattn.cli import main
from selfattn.explainer import pieces as P
from selfattn.explainer import tracing
from selfattn.explainer.session import Explainer
from tests.explainer.documents import explained
from tests.explainer.web.test_browser import browser, open_report, watched  # noqa: F401  (fixtures)

TEXT = "a\u00a0blue\tcat\u200dsleeps 森"
"""A no-break space (2 bytes, 2 pieces), a tab, a zero-width joiner (3 bytes), and 森 (3 bytes, 3 pieces)."""

BYTE = 0xE6
"""The first byte of 森 (E6 A3 AE): the fixed top prediction, a byte that is not a whole character."""

WANT = [
    "a",
    "⟨U+00A0⟩(1/2)",
    "⟨U+00A0⟩(2/2)",
    "bl",
    "ue",
    "⇥",
    "cat",
    "⟨U+200D⟩(1/3)",
    "⟨U+200D⟩(2/3)",
    "⟨U+200D⟩(3/3)",
    "slee",
    "ps",
    "␣",
    "森(1/3)",
    "森(2/3)",
    "森(3/3)",
]
"""The pieces as a person reads them, written out by hand from the tokenizer's cut (checked below)."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny GPT-2 with a byte-level BPE whose next token is always the byte E6: its final norm gives the
    unit vector e_0 at every position and the unembedding's column 0 scores only that byte."""
    from tokenizers import ByteLevelBPETokenizer

    folder = tmp_path_factory.mktemp("bytes")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        ["a blue monster walks into the forest", "the cat sleeps"] * 50, vocab_size=300, show_progress=False
    )
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe)
    tok.save_pretrained(folder)
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=tok.vocab_size, n_positions=64, n_embd=32, n_layer=2, n_head=4, tie_word_embeddings=False
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    byte_id = tok.convert_tokens_to_ids(chr(BYTE))  # GPT-2's alphabet writes the bytes ¡…ÿ as themselves
    with torch.no_grad():
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.zero_()
        model.transformer.ln_f.bias[0] = 1.0
        model.lm_head.weight.zero_()
        model.lm_head.weight[byte_id, 0] = 5.0
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def test_the_marks_are_the_tokenizers_own_pieces(folder):
    """WANT follows the tokenizer's own cut: these are the bytes of its pieces (read from its strings through
    GPT-2's byte alphabet), which decode to the text."""
    tok = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    raw = tok.convert_ids_to_tokens(tok(TEXT)["input_ids"])
    data = [bytes(P.BYTE_TABLE[c] for c in r) for r in raw]
    assert data == [
        b"a", b"\xc2", b"\xa0", b"bl", b"ue", b"\t", b"cat", b"\xe2", b"\x80", b"\x8d", b"slee", b"ps", b" ",
        b"\xe6", b"\xa3", b"\xae",
    ]  # fmt: skip
    assert b"".join(data).decode() == TEXT and "森".encode()[0] == BYTE


def test_terminal_json_and_page_read_the_same(folder, capsys, monkeypatch, watched, tmp_path):  # noqa: F811
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["explain", TEXT, "--model", str(folder), "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "Tokens (16): " + " / ".join(WANT) in out
    assert "\\xa0" not in out and "\\u200d" not in out and "\t" not in out and "\ufffd" not in out
    predicted = next(line for line in out.splitlines() if line.startswith("The model's next-token prediction"))
    assert predicted.split(": ", 1)[1].startswith(f"⟨{BYTE:02X}⟩ ")

    assert main(["explain", TEXT, "--model", str(folder), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tokens"] == WANT
    assert [p["label"] for p in doc["pieces"]["pieces"]] == WANT
    top = doc["prediction"][0]
    assert top["token"] == "\ufffd" and top["shown"] == f"⟨{BYTE:02X}⟩"

    ex = Explainer.load(folder)
    page_doc = explained(ex, TEXT)
    open_report(watched, page_doc, tmp_path)
    strip = watched.page.eval_on_selector_all("[data-testid=token]", "ts => ts.map(t => t.textContent)")
    assert strip == WANT
    words = watched.page.eval_on_selector_all("[data-testid=prediction-row] .word", "ws => ws.map(w => w.textContent)")
    assert words == [p["shown"] for p in page_doc["prediction"]] and words[0] == f"⟨{BYTE:02X}⟩"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("\u00a0", "⟨U+00A0⟩"),
        ("\t", "⇥"),
        ("\n", "↵"),
        ("a\u200db", "a⟨U+200D⟩b"),
        ("  x ", "␣␣x␣"),
        ("a b", "a b"),
        ("\u3000", "⟨U+3000⟩"),
        ("   ", "␣␣␣"),
        ("森", "森"),
    ],
)
def test_shown_text_marks_what_cannot_be_seen(text, want):
    assert P.shown_text(text) == want


def test_the_notebook_head_view_reads_tokens_the_same_way(watched):  # noqa: F811
    """head_view's tokens (bertviz's form: the tokenizer's strings) in the same notation as the other views."""
    import selfattn
    from tests.explainer.views.test_notebook import framed

    tokens = ["a", "\u00a0", "\t", "Ġcat", "x\u200dy"]
    w = torch.softmax(torch.randn(1, 2, 5, 5), -1).double()
    frame = framed(watched, selfattn.head_view(w, tokens)._repr_html_())
    drawn = frame.eval_on_selector_all("[data-testid=hv-q]", "ts => ts.map(t => t.textContent)")
    assert drawn == ["a", "⟨U+00A0⟩", "⇥", "␣cat", "x⟨U+200D⟩y"]


def test_a_links_keys_are_named_by_the_words_and_characters_they_make_up(folder):
    """A head's sentence names a link's keys as the text reads them: "一只+蓝色", not the nine byte pieces
    一(1/3)+一(2/3)+…; a character whose pieces are all keys by the character; other pieces by their own names."""
    from selfattn.explainer.views.head_sentences import _groups
    from selfattn.explainer.views.head_words import keys_named

    trace = tracing.trace(Explainer.load(folder), "一只蓝色怪兽")
    pieces = trace.pieces
    tokens = P.names(trace.tokens)
    words = {g.text: list(g.members) for g in pieces.group_of("words")}
    chars = {g.text: list(g.members) for g in pieces.group_of("characters")}
    assert list(words)[:2] == ["一只", "蓝色"] and len(words["一只"]) == 6  # three bytes a character
    groups = _groups(pieces)
    assert keys_named(tokens, words["一只"] + words["蓝色"], groups) == "一只+蓝色"
    assert keys_named(tokens, chars["只"] + words["蓝色"], groups) == "只+蓝色"
    part = chars["只"][1:] + chars["蓝"][:1]  # no whole character: the pieces
    assert keys_named(tokens, part, groups) == "+".join(tokens[k] for k in part) == "只(2/3)+只(3/3)+蓝(1/3)"
    assert keys_named(tokens, words["一只"]) == "+".join(tokens[k] for k in words["一只"])  # without groups
