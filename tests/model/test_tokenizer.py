import json

import pytest

from selfattn.model.tokenizer import SPECIAL_TOKENS, WordTokenizer, cache_dir


def test_the_tutorial_sentence_is_cut_into_its_five_words(tokenizer):
    assert tokenizer.segment("一只蓝色怪兽走进森林") == ["一只", "蓝色", "怪兽", "走进", "森林"]
    ids = tokenizer.encode("一只蓝色怪兽走进森林", eos=True)
    assert ids[0] == tokenizer.bos_id and ids[-1] == tokenizer.eos_id
    assert [tokenizer.tokens[i] for i in ids[1:-1]] == ["一只", "蓝色", "怪兽", "走进", "森林"]
    assert tokenizer.decode(ids) == "一只蓝色怪兽走进森林"


def test_jieba_cuts_every_corpus_sentence_as_written(small_corpus, tokenizer):
    for s in small_corpus.train[:300] + small_corpus.test:
        assert tuple(tokenizer.segment(s.text)) == s.words


def test_specials_come_first_and_characters_back_up_words(tokenizer):
    assert tuple(tokenizer.tokens[:4]) == SPECIAL_TOKENS == ("<pad>", "<unk>", "<bos>", "<eos>")
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2, 3)
    # 色彩 is one jieba word, not in the vocabulary; its characters are (from 蓝色 and 彩虹)
    assert tokenizer.segment("色彩") == ["色彩"]
    assert "色彩" not in tokenizer
    assert tokenizer.tokenize("色彩") == ["色", "彩"]
    # characters never seen become <unk>
    assert tokenizer.tokenize("一只可爱猫") == ["一只", "<unk>", "<unk>", "猫"]
    assert tokenizer.encode_words(["蓝森林"], bos=False) == [tokenizer.id_of(c) for c in "蓝森林"]


def test_whitespace_is_dropped(tokenizer):
    assert tokenizer.tokenize(" 一只 蓝色\n怪兽 ") == ["一只", "蓝色", "怪兽"]


def test_json_round_trip_keeps_vocabulary_and_segmentation(tokenizer, tmp_path):
    path = tokenizer.save(tmp_path / "tokenizer.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["tokens"] == tokenizer.tokens and "怪兽" in data["user_words"]
    loaded = WordTokenizer.load(path)
    assert loaded.tokens == tokenizer.tokens and loaded.user_words == tokenizer.user_words
    text = "两条紫色龙飞上天空。这些龙在天空中唱歌。"
    assert loaded.encode(text) == tokenizer.encode(text)


def test_broken_files_and_vocabularies_are_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        WordTokenizer.load(bad)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something-else"}), encoding="utf-8")
    with pytest.raises(ValueError, match="not a selfattn.word-tokenizer file"):
        WordTokenizer.load(other)
    with pytest.raises(FileNotFoundError, match="missing.json"):
        WordTokenizer.load(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="must start with"):
        WordTokenizer(["a", "b"])
    with pytest.raises(ValueError, match="'猫' appears twice"):
        WordTokenizer(list(SPECIAL_TOKENS) + ["猫", "猫"])
    with pytest.raises(ValueError, match="token id 999"):
        WordTokenizer(list(SPECIAL_TOKENS) + ["猫"]).decode([999])


def test_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "selfattn" and cache_dir().is_dir()


@pytest.mark.parametrize("words", [[1, None], ["a", 3], [[]], [""]])
def test_user_words_must_be_strings_named_by_position(words):
    with pytest.raises(TypeError, match=r"user_words\[\d\] must be a non-empty str"):
        WordTokenizer(["<pad>", "<unk>", "<bos>", "<eos>", "a"], words)


def test_one_dictionary_read_cuts_and_tags_as_fresh_jieba_instances_do(small_corpus, monkeypatch):
    """The cutters and taggers share one read of jieba's dictionary (a copy per word list, one tag table): they cut
    and tag as a jieba.Tokenizer / POSTokenizer built from nothing with the same words, and a new word list reads
    no dictionary file."""
    import jieba
    import jieba.posseg

    from selfattn import jieba_words
    from selfattn.explainer.analysis import roles

    words = ("蓝色怪兽", "走进", "一只")  # 蓝色怪兽: not jieba's word, and a longer word over two of its own
    fresh = jieba.Tokenizer()
    fresh.tmp_dir = str(cache_dir())
    for w in words:
        fresh.add_word(w, freq=jieba_words.USER_WORD_FREQ)
    fresh_tagger = jieba.posseg.POSTokenizer(fresh)
    texts = [s.text for s in small_corpus.test[:50]]
    texts += ["一只蓝色怪兽走进森林，它看见一棵大树。", "Mary 去了 store 2 次"]
    ours = jieba_words.dictionary(words)
    assert ours is not jieba_words.dictionary(()) and roles._tagger(words).tokenizer is ours
    for text in texts:
        assert list(ours.cut(text, HMM=False)) == list(fresh.cut(text, HMM=False))
        tagged = [(p.word, p.flag) for p in roles._tagger(words).cut(text, HMM=True)]
        assert tagged == [(p.word, p.flag) for p in fresh_tagger.cut(text, HMM=True)]
    assert "蓝色怪兽" not in jieba_words.dictionary(()).FREQ  # the default dictionary got no word

    reads = []
    monkeypatch.setattr(jieba.Tokenizer, "initialize", lambda self, *a: reads.append("initialize"))
    monkeypatch.setattr(jieba.posseg.POSTokenizer, "load_word_tag", lambda self, f: reads.append("load_word_tag"))
    other = ("怪兽走进",)
    assert list(jieba_words.dictionary(other).cut("怪兽走进森林", HMM=False))[0] == "怪兽走进"
    assert [p.word for p in roles._tagger(other).cut("怪兽走进森林")][0] == "怪兽走进"
    assert reads == []


def test_the_tag_table_is_read_once_where_the_tagger_imports_jieba_posseg():
    """In a fresh process the tagger takes a copy of the table the jieba.posseg import read (one read); its tags
    are those of a table read afresh."""
    import subprocess
    import sys

    script = (  # a fresh interpreter: jieba.posseg not imported before the tagger
        "import sys\n"
        "from selfattn.explainer.analysis import roles\n"
        "assert 'jieba.posseg' not in sys.modules\n"
        "reads = []\n"
        "sys.setprofile(lambda f, e, a: e == 'call' and f.f_code.co_name == 'load_word_tag' and reads.append(1))\n"
        "tagger = roles._tagger(())\n"
        "sys.setprofile(None)\n"
        "assert reads == [1], reads\n"
        "import jieba, jieba.posseg as pseg\n"
        "fresh = pseg.POSTokenizer(jieba.Tokenizer()).word_tag_tab\n"
        "assert tagger.word_tag_tab == fresh and tagger.word_tag_tab is not pseg.dt.word_tag_tab\n"
        "print(len(fresh))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) > 100_000
