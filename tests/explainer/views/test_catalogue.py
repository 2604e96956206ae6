"""The one catalogue of sentences (selfattn/explainer/locale/zh.json and en.json, read by
`selfattn.explainer.catalogue`): every key is its room's prefix and a name, both languages hold every key with
the same `{fields}`, a sentence has one key, every key the code names is there and every key there is named.

Each rule is a function over plain dicts, so that the last test can plant a bad catalogue and see each refused."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from selfattn.explainer import catalogue
from selfattn.explainer.catalogue import LANGS, LOCALE_DIR, PREFIXES, TEXTS

SOURCE = Path(catalogue.__file__).resolve().parents[1]  # src/selfattn: every module, script and template
CODE = (".py", ".js", ".html")
ANY_PREFIX = "|".join(PREFIXES)
KEY = re.compile(rf"""["']((?:{ANY_PREFIX})\.[\w.]+)["']""")
"""A key as the code writes it: a string literal that starts with a declared prefix and a dot."""
FILE_SUFFIXES = (".json", ".png", ".svg", ".safetensors", ".html")
NOT_KEYS = {"model.n_heads": "a field's path in a schema test (tests/explainer/views/test_schema.py), not a sentence"}
BUILT = [
    re.compile(r"""\b(?:text|both|sentences|t)\(\s*f["'`]"""),  # text(f"findings.on_{x}")
    re.compile(r"""\bTEXTS\[\s*f["']"""),
    re.compile(rf"""["'](?:{ANY_PREFIX})\.\w*["']\s*\+"""),  # "tables." + key
    re.compile(r"""\bt\(\s*`[^`]*\$\{"""),  # t(`page.${name}`)
]
"""A key put together from pieces: no search for the key would find its reader."""

SHARED = {
    "zh": [
        {"common.layer", "page.hv_layer"},  # en: "layer" in a table, "Layer" heading a select
        {"experiments.legend", "experiments.title"},  # en: "experiments" / "Experiments"
        {"heads.type.relation.label", "heads.type.relation.does"},  # en: "tutorial link" / "a tutorial link"
        {"heads.type.self.short", "heads.type.self.label"},  # en: "self" / "itself"
        {"interventions.no_causal.label", "interventions.no_causal.said"},  # en: "no …" / "… switched off"
        {"interventions.no_scaling.label", "interventions.no_scaling.said"},
    ],
    "en": [
        {"common.list", "page.list_sep"},  # zh: "、" between words, "，" between clauses
        {"common.sink", "heads.type.first.short"},  # zh: 汇点 (a sink logit) / 首 (the first token's head)
        {"experiments.top", "research.top"},  # zh: 第 {k} 名 (one rank) / 前 {k} 名 (the first k)
        {"heads.legend.spread", "page.mv_untyped"},  # zh: 没有明确类型 / 无明显类型
        {"heads.type.broad.short", "heads.type.broad.label"},  # zh: 均匀 / 很分散
        {"heads.type.local.short", "heads.type.local.label"},  # zh: 局部 / 附近
        {"interventions.no_scaling.label", "page.st_scaled_off"},  # zh: 关闭 ÷√d_k / 不除以 √d_k
        {"page.baseline", "page.no_intervention"},  # zh: 无干预 / 干预：无
        {"page.stages", "page.view_explore"},  # zh: 逐步计算 / 逐步讲解
        {"server.experiment", "server.invalid", "server.refused"},  # zh says what failed; en the reason only
    ],
}
"""Keys whose sentences are the same words in one language and different ones in the other (so they are not
one sentence): each such group is declared here, with the other language's difference."""


def _locale() -> dict[str, dict[str, str]]:
    """{lang: {key: sentence}} as the files hold them."""
    return {lang: json.loads((LOCALE_DIR / f"{lang}.json").read_text(encoding="utf-8")) for lang in LANGS}


def _fields(sentence: str) -> list[str]:
    return sorted(re.findall(r"\{(\w+)\}", sentence))


def missing_keys(locale: dict[str, dict[str, str]]) -> list[tuple[str, str]]:
    """(lang, key) for each key some language holds and `lang` does not."""
    every = set().union(*(set(d) for d in locale.values()))
    return sorted((lang, key) for lang, d in locale.items() for key in every - set(d))


def unprefixed(keys, prefixes=PREFIXES) -> list[str]:
    """Keys that are not a declared prefix, a dot and a name."""
    return sorted(k for k in keys if not re.fullmatch(r"(\w+)\.[\w.]+", k) or k.split(".")[0] not in prefixes)


def field_mismatches(locale: dict[str, dict[str, str]]) -> list[str]:
    """Keys whose `{fields}` differ between languages, or whose braces are not all `{name}` fields."""
    bad = set()
    for key in set.intersection(*(set(d) for d in locale.values())):
        if len({tuple(_fields(d[key])) for d in locale.values()}) > 1:
            bad.add(key)
        if any(re.search(r"[{}]", re.sub(r"\{\w+\}", "", d[key])) for d in locale.values()):
            bad.add(key)  # a brace outside a `{name}` field: a format spec, or a typo
    return sorted(bad)


def duplicates(locale: dict[str, dict[str, str]], shared=SHARED) -> list[tuple[str, list[str]]]:
    """(lang, keys) for each sentence a language holds under more than one key, unless the group is declared in
    `shared` and its keys differ in every other language (the same words in every language are never allowed)."""
    out = []
    for lang, d in locale.items():
        by_sentence = defaultdict(list)
        for key, said in d.items():
            by_sentence[said].append(key)
        for keys in by_sentence.values():
            if len(keys) < 2:
                continue
            others = [{locale[o][k] for k in keys if k in locale[o]} for o in locale if o != lang]
            if set(keys) not in shared.get(lang, []) or any(len(o) < len(keys) for o in others):
                out.append((lang, sorted(keys)))
    return sorted(out)


def keys_in_code(root: Path = SOURCE) -> dict[str, set[str]]:
    """{key: the files that name it} for every key-shaped string literal under root."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(root.rglob("*")):
        if path.suffix in CODE and path.is_file():
            for m in KEY.finditer(path.read_text(encoding="utf-8")):
                if not m.group(1).endswith(FILE_SUFFIXES) and m.group(1) not in NOT_KEYS:
                    found[m.group(1)].add(str(path.relative_to(root)))
    return found


def built_keys(root: Path = SOURCE) -> list[str]:
    """'file:line' for each key put together from pieces."""
    out = []
    for path in sorted(root.rglob("*")):
        if path.suffix in CODE and path.is_file():
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if any(p.search(line) for p in BUILT):
                    out.append(f"{path.relative_to(root)}:{i}: {line.strip()}")
    return out


# --- the catalogue as it is --------------------------------------------------------------------------------


def test_both_languages_hold_every_key():
    locale = _locale()
    assert set(locale) == set(LANGS) and not missing_keys(locale), missing_keys(locale)
    assert TEXTS == {key: {lang: locale[lang][key] for lang in LANGS} for key in locale["zh"]}


def test_every_key_is_its_rooms_prefix_and_a_name():
    assert not unprefixed(TEXTS), unprefixed(TEXTS)


def test_both_languages_fill_the_same_fields():
    assert not field_mismatches(_locale()), field_mismatches(_locale())


def test_a_sentence_has_one_key():
    assert not duplicates(_locale()), duplicates(_locale())
    for lang, groups in SHARED.items():  # the declared groups are all still there: none left behind
        for keys in groups:
            assert keys <= set(TEXTS) and len({TEXTS[k][lang] for k in keys}) == 1, (lang, keys)


def test_every_key_the_code_names_is_in_the_catalogue():
    named = keys_in_code()
    unknown = {k: sorted(v) for k, v in named.items() if k not in TEXTS}
    assert not unknown, unknown


def test_every_key_in_the_catalogue_is_named_by_the_code():
    named = keys_in_code()
    assert not set(TEXTS) - set(named), sorted(set(TEXTS) - set(named))


def test_no_key_is_put_together_from_pieces():
    assert not built_keys(), built_keys()


def test_text_fills_fields_and_names_what_is_wrong():
    assert catalogue.text("page.search_row", "en", layer=0, head=1, weight="42.00%") == "layer 0 · head 1: 42.00%"
    assert catalogue.both("common.layer_n", layer=3) == {"zh": "层 3", "en": "layer 3"}
    with pytest.raises(KeyError, match="nosuchkey"):
        catalogue.text("nosuchkey", "zh")
    with pytest.raises(ValueError, match="'fr'"):
        catalogue.text("page.title", "fr")
    assert catalogue.sentences("interventions.block.said")["en"] == "link {query} → {key} blocked"  # not filled
    with pytest.raises(KeyError, match="heads.nosuch"):
        catalogue.sentences("heads.nosuch")


WORD_DATA = "analysis"
"""The analysis's Chinese words (roles' prepositions and pronouns, the fillers of the control sentences) are data
the tagger and the sentences are built from, not sentences a view says."""
CJK = re.compile(r"[\u4e00-\u9fff]")


def sentences_in_code(root: Path, skip: tuple[str, ...] = (WORD_DATA,)) -> list[str]:
    """ "file:line" of each Python string literal under `root` that holds Chinese and is no docstring, no single
    character (a range's bound) and no example text (the default text, in an error's example): a sentence that
    belongs in the catalogue."""
    import ast

    from selfattn.explainer.session import DEFAULT_TEXT

    out = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] in skip:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bare = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in bare:
                continue
            if CJK.search(node.value) and len(node.value) > 1 and DEFAULT_TEXT not in node.value:
                out.append(f"{path.relative_to(root)}:{node.lineno}")
    return out


def test_no_sentence_lives_outside_the_catalogue():
    assert sentences_in_code(SOURCE / "explainer") == []


# --- the rules themselves: each refuses a planted fault -----------------------------------------------------


def test_each_rule_refuses_a_planted_fault(tmp_path):
    good = {"zh": {"page.a": "一 {n}", "page.b": "二"}, "en": {"page.a": "one {n}", "page.b": "two"}}
    assert not missing_keys(good) and not unprefixed(good["zh"]) and not field_mismatches(good)
    assert not duplicates(good)
    one_only = {"zh": good["zh"] | {"page.c": "三"}, "en": good["en"]}
    assert missing_keys(one_only) == [("en", "page.c")]
    assert unprefixed(["page.a", "layer", "nowhere.b", "page."]) == ["layer", "nowhere.b", "page."]
    fields = {"zh": {"page.a": "一 {n}"}, "en": {"page.a": "one {m}"}}
    assert field_mismatches(fields) == ["page.a"]
    assert field_mismatches({"zh": {"page.a": "一 {n:.2f}"}, "en": {"page.a": "one {n:.2f}"}}) == ["page.a"]
    twice = {"zh": good["zh"] | {"tables.a": "一 {n}"}, "en": good["en"] | {"tables.a": "one {n}"}}
    assert duplicates(twice) == [("en", ["page.a", "tables.a"]), ("zh", ["page.a", "tables.a"])]
    same_zh = {"zh": good["zh"] | {"tables.a": "一 {n}"}, "en": good["en"] | {"tables.a": "One {n}"}}
    assert duplicates(same_zh) == [("zh", ["page.a", "tables.a"])]  # undeclared
    assert not duplicates(same_zh, {"zh": [{"page.a", "tables.a"}]})  # declared, and en differs
    assert duplicates(twice, {"zh": [{"page.a", "tables.a"}], "en": [{"page.a", "tables.a"}]})  # one sentence
    code = tmp_path / "code"
    code.mkdir()
    (code / "view.py").write_text('say(text("page.a", lang))\nx = "page.png"\ny = text(f"page.{name}", lang)\n')
    (code / "page.js").write_text('t("tables.zz");\nconst k = "page." + name;\n')
    assert keys_in_code(code) == {"page.a": {"view.py"}, "tables.zz": {"page.js"}}
    assert [b.split(":")[0] for b in built_keys(code)] == ["page.js", "view.py"]
    (code / "words.py").write_text(
        '"""一个文档。"""\nlow, high = "一", "鿿"\nsay = {"zh": "这个 head 的平均熵", "en": "x"}\n'
    )
    assert sentences_in_code(code) == ["words.py:3"]
