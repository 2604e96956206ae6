"""The one catalogue of sentences: every sentence the explainer says, in Chinese and in English, under one key.

    locale/zh.json  {"tables.selected": "显示：层 {layer} · head {head}（{reason}）", …}
    locale/en.json  {"tables.selected": "Showing layer {layer} · head {head} ({reason})", …}

    text("tables.selected", "en", layer=1, head=2, reason="chosen by you")  -> "Showing layer 1 · head 2 (…)"
    both("tables.selected", layer=1, ...)                                    -> {"zh": "…", "en": "…"}
    sentences("interventions.block.said")                                    -> {"zh": "切断 {query} → {key}", …}
    TEXTS["tables.selected"]                                                 -> {"zh": "…", "en": "…"}

A key is its view's prefix (PREFIXES) and a name; a sentence has one key (two keys never hold the same words in
both languages), both languages have every key, with the same `{name}` fields. Keys are written out in full
where they are used (no key is put together from pieces), so a search for a key finds every sentence's reader;
tests/explainer/test_catalogue.py holds the catalogue to this. `{name}` fields are filled by `str.format` here
and by one small `fill()` in the page's JS (the page's data carries the keys its modules name,
`views.report.page_texts`). Registries (interventions, head types, relations) and the analysis carry keys; this
module sits below capture, analysis and views so that each of them can read it.

JSON rather than TOML: the standard library reads it on every Python the package supports (3.10 has no
tomllib), so the catalogue costs no dependency.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["LANGS", "PREFIXES", "TEXTS", "LOCALE_DIR", "text", "both", "sentences"]

LANGS = ("zh", "en")
LOCALE_DIR = Path(__file__).with_name("locale")
"""One JSON object per language, {key: sentence}, in the package (pyproject's package-data)."""

PREFIXES = {
    "common": "words more than one view says alike (layer, head, decoder, …)",
    "tables": "the terminal's tables (views/tables.py)",
    "plots": "the pictures (views/plots.py)",
    "page": "the explorer page and the attention page (web/static, views/report.py, views/registry.py)",
    "experiments": "the page's experiments: ablation, patching, logit lens (web/static/render/experiments.js)",
    "heads": "a head's words, the head types, the pick rule, the credit rule (views/head_words.py, analysis)",
    "findings": "what an experiment found, in a sentence (views/findings.py)",
    "research": "the terminal's research tables (views/research_tables.py)",
    "patching": "the patching picture (views/patching_plot.py)",
    "interventions": "each intervention's label, help and sentence (interventions.py REGISTRY)",
    "relations": "the tutorial relations (analysis/relations.py)",
    "server": "the app's answers over HTTP (web/server.py)",
    "model": "a model card: architecture, tokens the model does not know, how pieces are grouped",
    "positions": "a model's positional scheme (explainer/source/resolve.py position_scheme)",
    "tokenizer": "a tokenizer's kind (explainer/pieces.py tokenizer_kind)",
    "gqa": "grouped-query attention's sharing of keys and values",
    "encoder": "what an encoder cannot do",
    "formula": "the model's own formula for X and Q/K/V (explainer/formula.py)",
    "opened": "which row the page opens on and why (views/export.py)",
    "export": "what the export left out (views/export.py)",
    "compare": "an intervention compared with the text unchanged, in a sentence (views/experiment_words.py)",
    "attribution": "attribution patching in the terminal and on the page (views/attribution_table.py, experiments.js)",
    "dataset": "a dataset run's findings, each over how many prompts it holds (explainer/dataset/words.py)",
}
"""Every key starts with one of these and a dot: the room that says the sentence."""


def _load() -> dict[str, dict[str, str]]:
    by_lang = {lang: json.loads((LOCALE_DIR / f"{lang}.json").read_text(encoding="utf-8")) for lang in LANGS}
    keys = set(by_lang[LANGS[0]])
    for lang in LANGS[1:]:
        if set(by_lang[lang]) != keys:
            only = sorted(keys ^ set(by_lang[lang]))
            raise ValueError(f"locale/{lang}.json and locale/{LANGS[0]}.json differ in keys: {only}")
    return {key: {lang: by_lang[lang][key] for lang in LANGS} for key in by_lang[LANGS[0]]}


TEXTS: dict[str, dict[str, str]] = _load()
"""key -> {zh, en}: the whole catalogue, read once at import."""


def text(key: str, lang: str, **values) -> str:
    """TEXTS[key][lang] with its `{name}` fields filled from `values`.

    A KeyError names an unknown key or a field without a value; a ValueError an unknown language."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS}, got {lang!r}")
    if key not in TEXTS:
        raise KeyError(f"no text {key!r} in selfattn/explainer/locale")
    return TEXTS[key][lang].format(**values)


def both(key: str, **values) -> dict[str, str]:
    """{lang: text(key, lang, **values)} for every language."""
    return {lang: text(key, lang, **values) for lang in LANGS}


def sentences(key: str) -> dict[str, str]:
    """{lang: TEXTS[key][lang]} as written, its `{name}` fields left for the reader to fill: a registry entry's
    words (an intervention's `said`, a head type's `does`), filled where they are said."""
    if key not in TEXTS:
        raise KeyError(f"no text {key!r} in selfattn/explainer/locale")
    return dict(TEXTS[key])
