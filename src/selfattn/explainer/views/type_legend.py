"""The head types' legend the views colour by: doc["head_types"] (`legend`), from `analysis.taxonomy`'s types
and rule and the types' words (`head_words`)."""

from __future__ import annotations

from ..analysis import head_types
from ..analysis.taxonomy import RULE, TYPE_ORDER
from .head_words import TYPE_SHORT, TYPE_WORDS

__all__ = ["legend"]


def legend() -> dict:
    """doc["head_types"]: {types, short {type: {zh, en}}, words {type: {zh, en}}, rule {zh, en}, numbers}: what the
    page colours the heads grid by (each head's `descriptions[l][h].kind` and `.types`)."""
    words = {t: {lang: w.format(first="").strip() for lang, w in ws.items()} for t, ws in TYPE_WORDS.items()} | {
        "relation": {"zh": "教程链接", "en": "a tutorial link"},
        "broad": {"zh": "接近均匀", "en": "close to uniform"},
        "spread": {"zh": "没有明确类型", "en": "no clear type"},
    }
    return {
        "types": list(TYPE_ORDER),
        "short": {t: dict(s) for t, s in TYPE_SHORT.items()},
        "words": words,
        "rule": dict(RULE),
        "numbers": {
            "credit_min": head_types.CREDIT_MIN,
            "chance_factor": head_types.CHANCE_FACTOR,
            "min_rows": head_types.MIN_ROWS,
            "broad_min": head_types.BROAD_MIN,
            "local_span": head_types.LOCAL_SPAN,
        },
    }
