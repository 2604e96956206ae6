"""The head types' legend the views colour by: doc["head_types"] (`legend`), generated from the registry
(`analysis.head_types.REGISTRY`) and `analysis.taxonomy`'s rule."""

from __future__ import annotations

from ..analysis import head_types
from ..analysis.taxonomy import RULE
from .texts import TEXTS

__all__ = ["legend"]


def legend() -> dict:
    """doc["head_types"]: {types, short, labels, words {type: {zh, en}}, colours {type: CSS}, rule {zh, en},
    numbers}, generated from the registry (`head_types.REGISTRY`): what the page's model view colours the
    heads by and names in its legend (`layers[l].types`), and each head's `descriptions[l][h].kind` names."""
    entries = head_types.REGISTRY.values()
    return {
        "types": [t.name for t in entries],
        "short": {t.name: dict(t.words["short"]) for t in entries},
        "labels": {t.name: dict(t.words["label"]) for t in entries},
        "words": {t.name: {k: w.format(first="").strip() for k, w in t.words["does"].items()} for t in entries}
        | {"spread": dict(TEXTS["heads.legend.spread"])},
        "colours": {t.name: t.colour for t in entries if t.colour is not None},
        "rule": dict(RULE),
        "numbers": {
            "credit_min": head_types.CREDIT_MIN,
            "chance_factor": head_types.CHANCE_FACTOR,
            "min_rows": head_types.MIN_ROWS,
            "broad_min": head_types.BROAD_MIN,
            "local_span": head_types.LOCAL_SPAN,
        },
    }
