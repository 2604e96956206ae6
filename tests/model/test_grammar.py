from selfattn.model.grammar import grammar_errors, is_grammatical


def test_accepts_the_grammar_and_names_each_violation():
    good = ["一只", "蓝色", "怪兽", "走进", "森林", "。", "这只", "怪兽", "在", "森林", "里", "睡觉", "。"]
    assert is_grammatical(good)
    bad = ["一条", "蓝色", "怪兽", "游进", "花园", "。", "它们", "在", "山洞", "上", "睡觉", "。"]
    errors = grammar_errors(bad)
    assert any("怪兽 takes 只, not 条" in e for e in errors)
    assert any("游进" in e and "water" in e for e in errors)
    assert any("expected 它" in e for e in errors)
    assert any("not 山洞" in e for e in errors)


def test_unfinished_or_unknown_words():
    assert grammar_errors(["一只", "蓝色"]) == ["ends after 2 words; expected a creature"]
    assert "is not a colour" in grammar_errors(["一只", "可爱"])[0]
    assert (
        "extra words"
        in grammar_errors(["一只", "蓝色", "猫", "走进", "花园", "。", "它", "很", "开心", "。", "它"])[-1]
    )
