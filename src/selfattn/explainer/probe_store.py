"""The induction probe's measures kept on disk by the commands, so that a model read from files pays the probe's
forward pass once, not on every `selfattn explain` or `selfattn heads`.

    store = ProbeStore()           the entries (`source.stamps.Entries` "probe": in the cache folder, or a folder given)
    store.read(ex, probe_input)    the measures kept for this model and probe, or None
    store.write(ex, probe_input, measures)

An entry is named by the files the weights were read from (`Card.stamp`, taken by `source.build.load`), the model's
class and dtype, the probe's ids and keywords, and what names every entry (`stamps`: the versions, the CPU, the
code); read back only with [layers][heads] of the model's shape.

What a stamp cannot see is a weight changed in memory after the load (a `p.data[...] = 0` bumps no version
counter). So only the commands keep entries (`pipeline.Session(probe_store=...)`: they never change the weights
they loaded); the Python API measures the probe in each Session, from the weights as they are.
"""

from __future__ import annotations

import os

import torch

from .formula import shape
from .source.stamps import Entries

__all__ = ["ProbeStore"]


class ProbeStore:
    """The probe's measures on disk (see the module doc), in `folder` (default the cache folder's "probe")."""

    def __init__(self, folder: str | os.PathLike | None = None):
        self.entries = Entries("probe", folder)
        self.folder = self.entries.folder

    def named(self, explainer, probe_input: tuple) -> dict | None:
        """What names the entry of this explainer's model and probe (`induction_probe.probe_input`), or None where
        the model was not read from files (`Card.stamp` None)."""
        files = explainer.card.stamp
        if files is None:
            return None
        _, ids, keywords, _ = probe_input
        model = explainer.model
        first = next(model.parameters(), None)
        return {
            "files": files,
            "class": f"{type(model).__module__}.{type(model).__qualname__}",
            "dtype": None if first is None else str(first.dtype),
            "ids": [int(i) for i in ids.reshape(-1)],
            "keywords": {k: _plain(v) for k, v in sorted(keywords.items())},
        }

    def read(self, explainer, probe_input: tuple) -> list[list[dict]] | None:
        """The measures kept for this model and probe, or None."""
        named = self.named(explainer, probe_input)
        return None if named is None else self.entries.read(named, lambda m: _shaped(m, explainer))

    def write(self, explainer, probe_input: tuple, measures: list[list[dict]]) -> None:
        """Keep `measures` for this model and probe (nothing where the model was not read from files)."""
        named = self.named(explainer, probe_input)
        if named is not None:
            self.entries.write(named, measures)


def _shaped(measures, explainer) -> bool:
    """Whether `measures` is [layers][heads] of dicts for this explainer's model (`formula.shape`)."""
    layers, heads = shape(explainer.model)
    if not isinstance(measures, list) or len(measures) != layers:
        return False
    rows = (isinstance(row, list) and len(row) == heads and all(isinstance(m, dict) for m in row) for row in measures)
    return all(rows)


def _plain(value):
    """A model keyword as JSON: a tensor's values, anything else its repr."""
    return value.tolist() if isinstance(value, torch.Tensor) else repr(value)
