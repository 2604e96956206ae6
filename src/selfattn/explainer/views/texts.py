"""The views' door to the one catalogue of sentences (`selfattn.explainer.catalogue`, locale/zh.json and en.json):

    text("tables.selected", "en", layer=1, head=2, reason="chosen by you")
    both("findings.more", n=3)  -> {"zh": "…", "en": "…"}

The catalogue itself lives below capture, analysis and views, so that the registries there can name their keys."""

from __future__ import annotations

from ..catalogue import LANGS, TEXTS, both, text

__all__ = ["TEXTS", "LANGS", "text", "both"]
