"""Roles and relations on two more tokenizer kinds (issue 27): a tiny Llama with a SentencePiece-style tokenizer
(Unigram, Metaspace pre-tokenizer) and a tiny BERT with a WordPiece one, both trained offline. On the tutorial's
sentence and on one the project never ships, the tagger's roles reach every piece of a word, the tutorial's
relations are found on the pieces, and every pair weight the explainer reports is plain eager attention's
(transformers `output_attentions` of the same weights), not the explainer's path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from selfattn.explainer import tracing
from selfattn.explainer.analysis import held
from selfattn.explainer.analysis.roles import has_roles, piece_roles
from selfattn.explainer.session import Explainer
from tests.explainer import truth
from tests.explainer.documents import explained
from tests.hf import models
from tests.tolerances import TOL

TUTORIAL = "一只蓝色怪兽走进森林"
NEVER_SHIPPED = "一条黑色小狗跑进花园"
TRAIN = [
    "一只蓝色怪兽走进森林",
    "两条红色的鱼游进大海",
    "黑色的小狗在花园里睡觉",
    "一条狗跑进来了",
    "它在森林里慢慢地走",
    "蓝色的天空很大",
] * 10
"""What the tokenizers are trained on: NEVER_SHIPPED itself is not among them, its characters are."""


def _sentencepiece():
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors, trainers
    from tokenizers import models as tm
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(tm.Unigram())
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=models.VOCAB, special_tokens=["<unk>", "<s>"], unk_token="<unk>")
    tk.train_from_iterator(TRAIN, trainer)
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", bos_token="<s>")


def _wordpiece():
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors, trainers
    from tokenizers import models as tm
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(tm.WordPiece(unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(handle_chinese_chars=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.decoder = decoders.WordPiece()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    tk.train_from_iterator(TRAIN, trainers.WordPieceTrainer(vocab_size=models.VOCAB, special_tokens=specials))
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]"
    )


KINDS = {"sentencepiece": ("llama", _sentencepiece), "wordpiece": ("bert", _wordpiece)}


@pytest.fixture(scope="module", params=list(KINDS))
def kind(request, tmp_path_factory):
    """(explainer, the same weights under eager attention, tokenizer) of one tokenizer kind."""
    arch, make = KINDS[request.param]
    tok = make()
    assert len(tok) <= models.VOCAB
    folder = tmp_path_factory.mktemp(request.param) / "model"
    models.build(arch, seed=0).save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return Explainer.load(folder), models.build(arch, attn="eager", seed=0), tok


def _eager(eager, ids) -> list[np.ndarray]:
    with torch.no_grad():
        out = eager(torch.tensor([ids]), output_attentions=True)
    return [a[0].double().numpy() for a in out.attentions]


@pytest.mark.parametrize("text", [TUTORIAL, NEVER_SHIPPED])
def test_roles_reach_every_piece_and_the_relations_are_eager_attentions(kind, text):
    ex, eager, tok = kind
    trace = tracing.trace(ex, text)
    ids = [int(i) for i in ex.tokenize(text)[1]]
    assert ids == tok(text)["input_ids"]
    words = held.words_of(trace, ex.user_words)
    assert has_roles(words)
    roles = {w.text: w.role for w in words if w.role}
    assert {"qm", "colour", "noun", "verb", "place"} <= set(roles.values()), roles
    # a word the tokenizer cuts into several pieces: each piece carries the word's role
    spans = trace.pieces.spans
    per_piece = piece_roles(spans, words)
    for w in words:
        inside = [i for i, (s, e) in enumerate(spans) if s >= 0 and e > s and w.start <= s < w.end]
        assert inside and all(per_piece[i] == w.role for i in inside), (w, inside)
    assert any(len([1 for s, e in spans if s >= 0 and e > s and w.start <= s < w.end]) > 1 for w in words)
    # the tutorial's relations, on the pieces, with the weights of plain eager attention
    controls = tracing.controls(ex, trace)  # the control first, then the contrast sentences
    found = held.held(trace, controls, ex.user_words)
    control = controls[0] if controls else None
    names = set(found[0][0]["relations"])
    assert {"noun>qm+colour", "verb>noun", "place>verb+noun"} <= names, names
    att = _eager(eager, ids)
    att_c = None if control is None else _eager(eager, [int(i) for i in ex.tokenize(control.pieces.text)[1]])
    for l, row in enumerate(found):
        for h, per_head in enumerate(row):
            for r in per_head["relations"].values():
                assert r["pair_weight"] == pytest.approx(
                    att[l][h][r["query"], r["key"]], abs=TOL["float32_weight_mean"]
                )
                c = r["control"]
                if c is not None:
                    assert c["pair_weight"] == pytest.approx(
                        att_c[l][h][c["query"], c["key"]], abs=TOL["float32_weight_mean"]
                    )
    # and the explain sentences read the same relations: every named link is one of these
    doc = explained(ex, text)
    for l, row in enumerate(doc["descriptions"]):
        for h, d in enumerate(row):
            if d.get("relation"):
                assert d["relation"] in found[l][h]["relations"]
                assert d["pair_weight"] == pytest.approx(
                    att[l][h][d["query"], d["key"]], abs=TOL["float32_weight_mean"]
                )


def test_no_credited_relations_key_gets_as_much_from_the_other_words_by_eager_weights(kind):
    """A relation is the query's, not the key's, on a SentencePiece tokenizer (Gemma's kind: Unigram pieces after a
    Metaspace) and on WordPiece: the baseline each answer records (what the other later words give the keys) equals
    plain eager attention's, and no credited relation's key gets as much from the other words."""
    from selfattn.explainer.analysis import head_types

    ex, eager, _ = kind
    trace, controls = tracing.trace_with_controls(ex, TUTORIAL)
    found = held.held(trace, controls, ex.user_words, ex.grammar)
    rows = truth.relation_rows(ex, trace, controls, lambda ids: _eager(eager, ids))
    assert rows, "the tutorial's relations are found on the pieces"
    truth.check_query_specific(found, rows, TOL["float32_hf_stages"], head_types.MIN_ROWS)
