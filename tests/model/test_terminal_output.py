"""What `selfattn vocab --model` and `selfattn generate --model` print for a checkpoint's tokens.

issue 18 item 13: terminal escapes in a checkpoint's tokens (OSC-8 hyperlinks, clear-screen, U+202E)
reached the terminal raw; `explain` escapes them. Every token is shown as its escape instead.
"""

from __future__ import annotations

import pytest
import torch

from selfattn.cli import main
from selfattn.model.checkpoint import save_checkpoint
from selfattn.model.decoder import DecoderConfig, DecoderLM
from selfattn.model.tokenizer import SPECIAL_TOKENS, WordTokenizer
from selfattn.render.print_generate import format_generation
from selfattn.render.print_vocab import format_vocabulary

LINK = "\x1b]8;;https://evil.example\x07click\x1b]8;;\x07"
CLEAR = "\x1b[2J\x1b[H"
RTL = "\u202egnp.exe"
HOSTILE = (LINK, CLEAR, RTL, "\x9b31m")  # the last: a C1 control sequence introducer
RAW = ("\x1b", "\x07", "\u202e", "\x9b")


@pytest.fixture(scope="module")
def hostile_checkpoint(tmp_path_factory):
    """A checkpoint whose vocabulary holds escape sequences, and whose model always predicts the hyperlink."""
    tokenizer = WordTokenizer(list(SPECIAL_TOKENS) + ["一只", *HOSTILE])
    torch.manual_seed(0)
    model = DecoderLM(
        DecoderConfig(vocab_size=tokenizer.vocab_size, d_model=8, n_layers=1, n_heads=2, tie_embeddings=False)
    )
    with torch.no_grad():  # ln_f gives all ones; the head scores only the hyperlink token
        model.ln_f.weight.zero_()
        model.ln_f.bias.fill_(1.0)
        model.lm_head.weight.zero_()
        model.lm_head.weight[tokenizer.id_of(LINK)] = 1.0
    folder = tmp_path_factory.mktemp("hostile") / "ck"
    save_checkpoint(model, tokenizer, folder)
    return folder


def test_vocab_prints_escapes_not_raw_control_characters(hostile_checkpoint, capsys):
    assert main(["vocab", "--model", str(hostile_checkpoint)]) == 0
    out = capsys.readouterr().out
    assert not any(ch in out for ch in RAW), repr(out)
    assert out.startswith("9 tokens: ") and "\\x1b]8;;https://evil.example\\x07click" in out
    assert "\\u202egnp.exe" in out and "\\x1b[2J" in out and "\\x9b31m" in out


def test_generate_prints_escapes_not_raw_control_characters(hostile_checkpoint, capsys):
    assert main(["generate", "一只", "--model", str(hostile_checkpoint), "--greedy", "--max-new-tokens", "3"]) == 0
    out = capsys.readouterr().out
    assert not any(ch in out for ch in RAW), repr(out)
    escaped = "\\x1b]8;;https://evil.example\\x07click\\x1b]8;;\\x07"
    assert out.splitlines()[0] == "一只" + escaped * 3
    assert out.splitlines()[1].startswith("一只 ‖ " + " / ".join([escaped] * 3))


def test_the_views_keep_ordinary_text_as_it_is():
    class Gen:
        text = "一只蓝色怪兽\n走进森林"
        prompt_tokens = ["一只", "蓝色"]
        new_tokens = ["怪兽", "走进"]
        stopped = "eos"
        unknown: list[str] = []

    assert format_generation(Gen) == "一只蓝色怪兽\n走进森林\n一只 / 蓝色 ‖ 怪兽 / 走进   (stopped: eos)"
    assert format_vocabulary(["<pad>", "一只", "。"]) == "3 tokens: <pad> 一只 。"


def test_generate_says_which_characters_of_the_prompt_the_model_reads_as_unk(capsys):
    """A prompt the default vocabulary does not hold is continued from <unk>s: the CLI says so and names them."""
    assert main(["generate", "一只蓝色的猫x", "--greedy", "--max-new-tokens", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("一只 / 蓝色 / <unk> / 猫 / <unk> ‖ ")
    assert lines[2].startswith("note: 2 of the prompt's 5 tokens are <unk> to this model (的 x): ")
    assert main(["generate", "一只蓝色", "--greedy", "--max-new-tokens", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2  # a prompt it knows: no note
