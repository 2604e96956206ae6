import math
import random

import pytest

from selfattn.model import corpus as C
from selfattn.model.grammar import grammar_errors


def test_same_seed_same_corpus_other_seed_other_corpus():
    a = C.make_corpus(300, 50, 50, seed=3)
    b = C.make_corpus(300, 50, 50, seed=3)
    other = C.make_corpus(300, 50, 50, seed=4)
    assert [s.text for s in a.train + a.val + a.test] == [s.text for s in b.train + b.val + b.test]
    assert [s.text for s in a.train] != [s.text for s in other.train]


def test_splits_hold_out_colour_noun_pairs(small_corpus):
    c = small_corpus
    held = c.val_pairs | c.test_pairs
    assert not c.val_pairs & c.test_pairs
    assert all((s.colour, s.creature.noun) not in held for s in c.train)
    assert all((s.colour, s.creature.noun) in c.val_pairs for s in c.val)
    assert all((s.colour, s.creature.noun) in c.test_pairs for s in c.test)
    texts = [s.text for s in c.train + c.val + c.test]
    assert len(set(texts)) == len(texts)
    # every noun keeps most of its colours in training, and has one held-out colour per split
    assert len(c.test_pairs) == len(c.val_pairs) == len(C.CREATURES)


def test_every_sentence_follows_the_grammar(small_corpus):
    for s in small_corpus.train + small_corpus.val + small_corpus.test:
        assert len(s.words) == len(s.roles)
        assert grammar_errors(s.words) == [], s.text
        qm = s.words[s.index("qm")]
        assert qm == s.quantity + s.creature.measure


def test_dependencies_reach_back_several_words(small_corpus):
    """Clause 2 repeats the noun and place, and its pronoun / 这+measure agrees with noun and quantity."""
    seen_ref_noun = seen_pronoun = False
    for s in small_corpus.train:
        plural = C.QUANTITIES[s.quantity]
        if "ref_noun" in s.roles:
            seen_ref_noun = True
            assert s.words[s.index("ref_noun")] == s.creature.noun
            assert s.index("ref_noun") - s.index("noun") >= 4
            assert s.words[s.index("ref_measure")] == ("这些" if plural else "这" + s.creature.measure)
        if "ref" in s.roles:
            seen_pronoun = True
            assert s.words[s.index("ref")] == s.creature.pronoun + ("们" if plural else "")
        if "place2" in s.roles:
            assert s.words[s.index("place2")] == s.place
    assert seen_ref_noun and seen_pronoun


def test_the_tutorial_sentence_is_in_the_language():
    monster = next(c for c in C.CREATURES if c.noun == "怪兽")
    rng = random.Random(0)
    starts = {C.make_sentence(rng, monster, "蓝色").words[:5] for _ in range(500)}
    assert ("一只", "蓝色", "怪兽", "走进", "森林") in starts


def test_every_creature_has_a_place_for_every_way_it_moves():
    for c in C.CREATURES:
        assert c.measure in C.MEASURES
        for kind in c.moves:
            assert C.places_for(c, kind), (c.noun, kind)


def test_with_measure_swaps_only_the_first_measure_word(small_corpus):
    s = small_corpus.test[0]
    other = next(m for m in C.MEASURES if m != s.creature.measure)
    swapped = C.with_measure(s, other)
    assert swapped[0] == s.quantity + other and swapped[1:] == s.words[1:]
    assert grammar_errors(swapped)
    with pytest.raises(ValueError, match="'本'"):
        C.with_measure(s, "本")


def test_distinct_sentences_counts_the_language():
    """Enumerate one small creature's sentences by drawing until no new one appears."""
    cat = next(c for c in C.CREATURES if c.noun == "猫")
    rng = random.Random(0)
    seen = {C.make_sentence(rng, cat, "蓝色").text for _ in range(20000)}
    assert len(seen) == C.distinct_sentences(cat) == 3 * (4 * 3) * 2 * 10


def test_log_prob_by_hand():
    cat = next(c for c in C.CREATURES if c.noun == "猫")
    words = ("一只", "蓝色", "猫", "走进", "花园", "。", "它", "很", "开心", "。")
    roles = ("qm", "colour", "noun", "verb", "place", "punct", "ref", "hen", "feeling", "punct")
    s = C.Sentence(words, roles, "一", cat, "蓝色", "走进", "花园")
    # 一: 2/4 · pair: 1/280 · land (only way) · 走进: 1/4 · 花园 among 3 town places · ref form 1/2 ·
    # clause-2 form 1/2 · feeling 1/5
    expected = (2 / 4) * (1 / 280) * (1 / 4) * (1 / 3) * (1 / 2) * (1 / 2) * (1 / 5)
    assert math.isclose(math.exp(C.log_prob(s)), expected, rel_tol=1e-12)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="n_train must be >= 0, got -1"):
        C.make_corpus(n_train=-1)
    with pytest.raises(TypeError, match="n_val must be an int"):
        C.make_corpus(n_val=1.5)
    room = sum(C.distinct_sentences(c) for c in C.CREATURES)  # one held-out colour per noun
    with pytest.raises(
        ValueError,
        match=f"the test split asks for 1000000 distinct sentences, but its 28 "
        f"\\(colour, noun\\) pairs make only {room}",
    ):
        C.make_corpus(n_train=10, n_val=0, n_test=10**6)


def test_corpus_module_is_pure_python():
    import subprocess
    import sys

    code = "import sys, selfattn.model.corpus; print('torch' in sys.modules or 'jieba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
