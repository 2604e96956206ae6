"""`Card`: what an Explainer says of its model that its modules do not tell (`result.ModelCard` adds the sizes).

Below `session` and `source.build`, which both make one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Card", "OURS"]

OURS = ("selfattn DecoderLM", "positions.learned")
"""Our models' architecture, and their positional scheme as its key in the catalogue."""


@dataclass(frozen=True)
class Card:
    """What an explainer says of its model that its modules do not tell (`result.ModelCard` adds the sizes).

    name          how every view names the model;  max_len  the most tokens it reads
    architecture, architecture_zh   its architecture in words;  positions  its positional scheme (a catalogue key)
    kind          "decoder" | "encoder" (None: read from each trace: a causal call makes a decoder)
    unknown_hint  what the model knows and what to use for free text ({zh, en});  loaded  how it was built
    bos_token     the model's BOS id where its config names none (our checkpoints: the tokenizer's <bos>); see
                  `Explainer.bos`
    stamp         the files the weights were read from, as they were then (`source.stamps.stamp`): what the entries
                  kept of them are named by (the probe's, the load's checks); None for a model built in memory or
                  from our checkpoints"""

    name: str
    max_len: int
    architecture: str = OURS[0]
    architecture_zh: str | None = None
    positions: str = OURS[1]
    kind: str | None = None
    unknown_hint: Mapping[str, str] = field(default_factory=lambda: {"en": "", "zh": ""})
    loaded: Mapping[str, Any] = field(default_factory=dict)
    bos_token: int | None = None
    stamp: str | None = None
