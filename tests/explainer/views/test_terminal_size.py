"""The terminal at a real model's size: the shown head's step tables first at any length (a long text's widest rows
windowed around the row opened on, every row still reading 100 % with the weight outside the window), then one
compact table of every head's type; every head's sentence only behind --every-head. A 24-layer × 14-head model
(the Qwen2.5-0.5B shape) at 80 columns prints at most MAX_LINES lines by default."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from rich.console import Console

from selfattn.explainer.api import from_loaded
from selfattn.explainer.catalogue import TEXTS
from selfattn.explainer.pipeline import Session, Spec
from selfattn.explainer.views import tables
from tests.hf import models
from tests.tolerances import TOL

PERCENT = 100
"""A weight as the terminal prints it: a percentage."""
MAX_LINES = 150
"""The issue's bound for a 24 × 14 model at 80 columns."""
SHORT = "a blue monster walks into the forest"
LONG = " ".join([SHORT, "the cat sleeps in the house", "two red fish swim into the sea"] * 2)


@pytest.fixture(scope="module")
def wide():
    """(eager model, Explainer on the same weights): 24 layers × 14 heads on 2 key/value heads, random weights."""
    config = transformers.LlamaConfig(
        vocab_size=models.VOCAB,
        hidden_size=56,
        intermediate_size=64,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    eager = transformers.LlamaForCausalLM(config).eval()
    eager.set_attn_implementation("eager")
    explained = transformers.LlamaForCausalLM(config).eval()
    explained.load_state_dict(eager.state_dict())
    return eager, from_loaded(explained, models.tokenizer())


def _printed(ex, text: str, **kwargs) -> tuple[str, object]:
    session = Session(ex)
    e = session.explain(Spec(text))
    console = Console(record=True, width=80, file=open("/dev/null", "w"))  # noqa: SIM115
    tables.render(e, console, lang="en", **kwargs)
    return console.export_text(), e


def test_a_24_by_14_model_at_80_columns_prints_the_steps_first_in_at_most_150_lines(wide):
    _, ex = wide
    out, e = _printed(ex, SHORT)
    lines = out.splitlines()
    assert len(lines) <= MAX_LINES, len(lines)
    assert max(len(line) for line in lines) <= 80
    steps, types = out.index(TEXTS["tables.scores"]["en"]), out.index(TEXTS["tables.types"]["en"][:20])
    assert steps < types  # the step tables of the shown head come first
    assert "--every-head" in out[types:] and f"L{e.card.n_layers - 1}" not in out[:steps]
    every, _ = _printed(ex, SHORT, every_head=True)
    assert all(f"layer {l} · head {h}" in every.lower() for l in (0, 23) for h in (0, 13))


def test_a_long_text_shows_a_window_of_its_steps_whose_rows_read_100_percent(wide):
    eager, ex = wide
    out, e = _printed(ex, LONG)
    L = len(e.tokens)
    assert L > tables.MAX_TABLE_TOKENS
    assert f"{L} tokens" in out and f"⟨{TEXTS['tables.outside']['en']}⟩" in out
    block = out[out.index(TEXTS["tables.weights"]["en"]) :].split("\n")
    rows = [line.split() for line in block[3:] if line.strip() and not line.startswith("Top")]
    rows = rows[: next(i for i, r in enumerate(rows) if len(r) < 3 or not r[1][0].isdigit())]
    assert len(rows) >= tables.WINDOW_MIN
    ids = ex.cut(LONG)[1]
    with torch.no_grad():
        want = eager(ids[None], output_attentions=True).attentions[e.shown.layer][0, e.shown.head].double().numpy()
    names = list(e.tokens.names)
    first = names.index(rows[0][0])
    for i, r in enumerate(rows):
        shown = np.array([float(x) for x in r[1:]])
        assert abs(shown.sum() - PERCENT) <= len(shown) * TOL["terminal_percent"], r  # 100 % with ⟨outside⟩
        window = want[first + i, first : first + len(shown) - 1] * PERCENT
        percent_of_float32 = TOL["float32_real_model"] * PERCENT  # float32 against eager, as a percentage
        np.testing.assert_allclose(shown[:-1], window, atol=TOL["terminal_percent"] + percent_of_float32)
