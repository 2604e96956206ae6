"""What a dataset run returns: `DatasetResult`, frozen, JSON-ready by `as_dict`, and the rows of its CSV.

r.prompts[i].heads[k]      prompt i's numbers of head k (layer-major: k = layer · n_heads + head)
r.head(1, 0).means["patching_recovered"]   a Mean (mean, low, high, n, sd) over the prompts
r.head(1, 0).holds["previous"]             on how many prompts the head is credited with that type
r.scalars["ablation_kl_bits"]              a per-prompt number's Mean (ablation, patching's logit differences)
r.text["en"]                               the sentences, each saying over how many prompts it holds
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .rows import PromptRow
from .stats import LEVEL, METHOD, Mean

__all__ = ["PromptResult", "HeadMeans", "DatasetResult"]


@dataclass(frozen=True)
class PromptResult:
    """One prompt's result: exactly the numbers a single run of the same prompt gives.

    index    its place in the dataset, from 0;  row  the prompt (`rows.PromptRow`, its line)
    key      `store.prompt_key`: what the results file keys it by
    heads    one dict per head, layer-major: {layer, head, …the run's per-head numbers (None where not run)}
    scalars  the prompt's own numbers ({name: float or None}: ablation's KL and logit difference, patching's)
    resumed  read back from the results file (True) or run now (False)"""

    index: int
    row: PromptRow
    key: str
    heads: tuple[Mapping, ...]
    scalars: Mapping[str, float | None]
    resumed: bool = False

    def as_dict(self) -> dict:
        """What the results file stores (and `from_dict` reads back): no `resumed`."""
        return {
            "index": self.index,
            "line": self.row.line,
            "row": self.row.fields(),
            "heads": [dict(h) for h in self.heads],
            "scalars": dict(self.scalars),
        }

    @classmethod
    def from_dict(cls, doc: Mapping, row: PromptRow, key: str, *, resumed: bool) -> PromptResult:
        return cls(doc["index"], row, key, tuple(doc["heads"]), dict(doc["scalars"]), resumed)


@dataclass(frozen=True)
class HeadMeans:
    """One head over the dataset.

    means  {number: Mean} of each per-head number (`DatasetResult.numbers`) over the prompts that have it
    holds  {type: prompts}: on how many prompts the head is credited with each type it is credited with anywhere
    top    on how many prompts it recovers the most of the logit difference by patching (0 without patching)"""

    layer: int
    head: int
    means: Mapping[str, Mean]
    holds: Mapping[str, int]
    top: int = 0

    def as_dict(self) -> dict:
        return {
            "layer": self.layer,
            "head": self.head,
            "means": {k: m.as_dict() for k, m in self.means.items()},
            "holds": dict(self.holds),
            "top": self.top,
        }


@dataclass(frozen=True)
class DatasetResult:
    """A dataset run (`selfattn.explain_dataset`, `selfattn.heads_dataset`; `selfattn explain|heads --dataset`).

    what      "explain" (head summaries, ablation, patching, attribution) or "heads" (each head's type scores)
    source    the dataset's file (or "rows");  model  the model's name;  options  what was asked (JSON-ready)
    n_layers, n_heads   the model's shape;  numbers  the per-head numbers averaged (`HeadMeans.means`' keys)
    prompts   one PromptResult per prompt, in the dataset's order;  heads  one HeadMeans per head, layer-major
    scalars   {name: Mean} of the per-prompt numbers;  text  {zh, en}: the sentences (`words.sentences`)
    out       the results file written (None: none);  method, level  the interval: Student's t, 95 %"""

    what: str
    source: str
    model: str
    options: Mapping
    n_layers: int
    n_heads: int
    numbers: tuple[str, ...]
    prompts: tuple[PromptResult, ...]
    heads: tuple[HeadMeans, ...]
    scalars: Mapping[str, Mean]
    text: Mapping[str, tuple[str, ...]]
    out: str | None = None
    method: str = METHOD
    level: float = LEVEL

    @property
    def n(self) -> int:
        """How many prompts."""
        return len(self.prompts)

    @property
    def resumed(self) -> int:
        """How many prompts were read back from the results file."""
        return sum(p.resumed for p in self.prompts)

    def head(self, layer: int, head: int) -> HeadMeans:
        """Head (layer, head)'s means; a ValueError names one the model does not have."""
        if not (0 <= layer < self.n_layers and 0 <= head < self.n_heads):
            raise ValueError(
                f"the model has layers 0-{self.n_layers - 1} and heads 0-{self.n_heads - 1}, got {layer}.{head}"
            )
        return self.heads[layer * self.n_heads + head]

    def as_dict(self) -> dict:
        """JSON-ready (`--json`): every field, each prompt's numbers and each head's means."""
        return {
            "what": self.what,
            "source": self.source,
            "model": self.model,
            "options": dict(self.options),
            "n_prompts": self.n,
            "resumed": self.resumed,
            "out": self.out,
            "interval": {"method": self.method, "level": self.level},
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "numbers": list(self.numbers),
            "prompts": [p.as_dict() for p in self.prompts],
            "heads": [h.as_dict() for h in self.heads],
            "scalars": {k: m.as_dict() for k, m in self.scalars.items()},
            "text": {lang: list(lines) for lang, lines in self.text.items()},
        }
