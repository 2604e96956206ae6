"""A (model, tokenizer) pair is named once, by where it was loaded from; `e.tokens` are the tokenizer's own
pieces with their leading space, `e.labels` / `e.names` what the views show (issue 26 item 5)."""

from __future__ import annotations

import transformers
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

import selfattn
from tests.explainer.views.test_one_reading import folder  # noqa: F401  (a tiny transformers GPT-2 with byte-level BPE)

TEXT = "the cat sleeps in the house"


def _pair(folder):  # noqa: F811
    tok = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = transformers.GPT2LMHeadModel.from_pretrained(folder, local_files_only=True)
    return model, tok


def test_a_pair_is_named_by_where_it_was_loaded_from(folder):  # noqa: F811
    model, tok = _pair(folder)
    e = selfattn.explain(TEXT, (model, tok))
    card = e.doc["model"]
    assert card["name"] == str(folder) == model.name_or_path
    assert card["name"] != type(model).__name__ and type(model).__name__ in card["architecture"]


def test_a_model_built_in_memory_says_so():
    config = transformers.GPT2Config(vocab_size=300, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    words = Tokenizer(WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    words.pre_tokenizer = Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=words)  # no name_or_path either
    e = selfattn.explain("a a", (model, tok))
    assert e.doc["model"]["name"] == "GPT2LMHeadModel (in memory)"


def test_tokens_keep_the_tokenizers_leading_space_and_labels_are_apart(folder):  # noqa: F811
    model, tok = _pair(folder)
    e = selfattn.explain(TEXT, (model, tok))
    ids = tok(TEXT)["input_ids"]
    assert e.doc["token_ids"] == ids
    decoded = e.decoded()
    assert decoded == [tok.decode([i]) for i in ids]
    raw = tok.convert_ids_to_tokens(ids)
    spaced = [i for i, r in enumerate(raw) if r.startswith("Ġ")]
    assert spaced and all(decoded[i] == " " + raw[i][1:] for i in spaced)  # Ġ is GPT-2's written space
    assert e.labels == e.doc["tokens"] and all(not e.labels[i].startswith(" ") for i in spaced)
    assert e.labels == [t.strip(" ") or "␣" * len(t) for t in decoded]  # ASCII words: the piece unspaced
    again = e.labels.index("the", 1)
    assert e.names == e.doc["token_names"] and [n for n in e.names if n.startswith("the")] == ["the@0", f"the@{again}"]
    assert str(e.table()).count("the@") == 2 * 2  # the repeated word named apart in the table's header and rows
