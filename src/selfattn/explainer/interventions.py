"""Interventions as data: a registry of changes to the attention computation, each one an entry.

    REGISTRY                      name -> Entry, in the order the entries are applied to a request
    Intervention(applied, layer=, head=)     values for some entries, limited to one layer and/or head
    Intervention.of({name: {param: value}, "layer": L, "head": H})   the same, from the JSON shape
    as_data()                     the registry as JSON: doc["interventions"], what the page builds its controls from

An entry declares its `name`, its `params` (name, type bool/int/float, min, max, default, label), its
`label`, whether the experiment compares it with a pass without it (`needs_baseline`), and
`apply(request, values) -> Request`: the request as the changed model computes it. The CLI flags of
`selfattn explain`, the HTTP model of `selfattn serve`, the words of the tables and the page's controls are
all generated from the registry, so a new intervention is one entry here (and its tests).

The module imports no torch (an entry's `apply` imports what it computes with), so the CLI can build its
flags from the registry and still start `selfattn walkthrough` without torch.

An `Intervention` changes the computation itself, not only the picture: the capture point
(`trace.capture`) rewrites each request inside the interceptor, so the next-token prediction changes too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from .. import checks
from ..limits import TEMPERATURE_RANGE
from .catalogue import LANGS, both, sentences

if TYPE_CHECKING:  # the registry is read without torch: `selfattn walkthrough` builds the CLI without it
    import torch

    from ..request import Request

__all__ = [
    "Param",
    "Entry",
    "REGISTRY",
    "SCOPE",
    "Intervention",
    "as_data",
    "flat_fields",
    "ABLATIONS",
    "ablation_value",
]

TYPES = {bool: "bool", int: "int", float: "float"}


@dataclass(frozen=True)
class Param:
    """One value an intervention takes. min / max: None = unbounded (for a position: the text's length)."""

    name: str
    type: type
    default: bool | int | float
    label: dict[str, str]
    min: float | None = None
    max: float | None = None
    shown: dict[str, tuple[str, str]] | None = None
    """A bool's words in a view's sentence, {lang: (when False, when True)} (`Entry.words`); None: the value."""

    def check(self, what: str, value):
        """`value` if it is of this type and range, else a TypeError/ValueError naming `what` and the value."""
        if self.type is bool:
            return checks.boolean(what, value)
        if self.type is int:
            return checks.integer(what, value, low=cast(int | None, self.min), high=cast(int | None, self.max))
        return float(checks.real(what, value, low=self.min, high=self.max))

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "type": TYPES[self.type],
            "min": self.min,
            "max": self.max,
            "default": self.default,
            "label": dict(self.label),
        }


@dataclass(frozen=True)
class Entry:
    """One intervention.

    label           {zh, en}: its name in every view
    help            {zh, en}: one sentence on what it does (the CLI's --help, the page's tooltip)
    said            {zh, en}: how a view says it is applied, `{param}` placeholders filled by str.format
                    (the built-in entries' words are the catalogue's, `selfattn.explainer.catalogue`)
    params          what it takes; none: a switch
    needs_baseline  the experiment compares it with the same text without it (`session.Explainer.explain`)
    neutral         the values at which it changes nothing (such an entry is dropped): None if there are none
    scoped          `apply(request, values, head)`: it also reads the head the intervention is limited to (None:
                    every head), for an entry that changes a head's values rather than its scores
    cli             its flag is generated for `selfattn explain` (False: the CLI has a flag of its own for it)
    flat            its field among the flat keywords of the first API (the HTTP fields
                    scaling/causal/temperature, `Intervention(scaling=False)`): a switch's field is True when
                    it is *not* applied (scaling=True: ÷√d_k on); a one-parameter entry's field is the value
    """

    name: str
    label: dict[str, str]
    help: dict[str, str]
    said: dict[str, str]
    apply: Callable[..., Request]
    params: tuple[Param, ...] = ()
    needs_baseline: bool = True
    neutral: dict | None = None
    flat: str | None = None
    scoped: bool = False
    cli: bool = True

    def check(self, values) -> dict:
        """{param: value} for this entry: each param checked, a missing one at its default, an unknown one refused."""
        if values is None:
            values = {}
        if not isinstance(values, Mapping):
            raise TypeError(f"intervention {self.name} takes {{param: value}}, got {type(values).__name__}")
        known = {p.name for p in self.params}
        unknown = sorted(set(values) - known)
        if unknown:
            takes = ", ".join(sorted(known)) or "no parameter"
            raise ValueError(f"intervention {self.name} has no parameter {unknown[0]!r} (it takes {takes})")
        out = {}
        for p in self.params:
            what = self.name if len(self.params) == 1 else f"{self.name} {p.name}"
            out[p.name] = p.check(what, values.get(p.name, p.default))
        return out

    def words(self, lang: str, values: dict) -> str:
        """What a view says when this entry is applied with `values` (numbers with :g, as they were typed)."""
        words = {p.name: p.shown[lang] for p in self.params if p.shown is not None}
        shown = {
            k: words[k][bool(v)] if k in words else f"{v:g}" if isinstance(v, float) else v for k, v in values.items()
        }
        return self.said[lang].format(**shown)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "label": dict(self.label),
            "help": dict(self.help),
            "said": dict(self.said),
            "params": [p.as_dict() for p in self.params],
            "needs_baseline": self.needs_baseline,
            "neutral": None if self.neutral is None else dict(self.neutral),
        }


# --- the entries ---------------------------------------------------------------------------------------


def _no_scaling(r: Request, values: dict) -> Request:
    """Scores are not divided by √d_k: the scale becomes 1 (a temperature applied after it still divides)."""
    return r.with_rule(scale=1.0)


def _no_causal(r: Request, values: dict) -> Request:
    """The causal rule and the sliding window are lifted; a mask (padding) stays."""
    return r.with_rule(causal=False, window=None)


def _temperature(r: Request, values: dict) -> Request:
    """softmax(s / T): the scale is divided by T, and so is a softcap (softcap·tanh(s/softcap) / T =
    (softcap/T)·tanh((s/T)/(softcap/T)))."""
    t = float(values["t"])
    return r.with_rule(scale=r.scale / t, softcap=None if r.softcap is None else r.softcap / t)


def _block(r: Request, values: dict) -> Request:
    """Cut one link: query `query` may no longer look at key `key` (an attention knockout).

    The maths: the mask gains −∞ at (query, key), so that masked score is −∞, its weight
    exp(−∞ − lse) is 0, and the row's other weights are renormalised: w'_qj = w_qj / (1 − w_q,key) for
    j ≠ key. Only row `query` of the weights changes in this layer; its output Σ_j w'_qj·v_j no longer
    holds v_key, and every layer above reads that changed row. A query whose only visible key is cut sees
    nothing: its output is 0 (the rule of `selfattn.attention`). A link that is hidden already (the
    causal rule, a window, padding) is refused: cutting it would change nothing.
    """
    import torch  # here, not at the top: the registry's declarations are read without torch

    from ..masks import visibility

    i, j = values["query"], values["key"]
    if i >= r.Lq:
        raise ValueError(f"block query {i} is not a position of the text (0 … {r.Lq - 1})")
    if j >= r.Lk:
        raise ValueError(f"block key {j} is not a position of the text (0 … {r.Lk - 1})")
    device = r.q.device
    rule = visibility(r.Lq, r.Lk, causal=r.causal, window=r.window, device=device, rows=torch.tensor([i]))[0, j]
    if r.mask is None:
        mask = torch.ones(1, 1, r.Lq, r.Lk, dtype=torch.bool, device=device)
    else:
        mask = r.mask.expand(r.mask.shape[0], r.mask.shape[1], r.Lq, r.Lk).clone()
    allowed = mask[..., i, j] if mask.dtype == torch.bool else mask[..., i, j] > float("-inf")
    if not bool(rule) or not bool(allowed.any()):
        raise ValueError(f"query {i} cannot look at key {j} already (causal rule, window or padding): nothing to block")
    if mask.dtype == torch.bool:
        mask[..., i, j] = False
    else:
        mask[..., i, j] = float("-inf")
    return r.with_rule(mask=mask)


def _ablate(r: Request, values: dict, head: int | None) -> Request:
    """Head ablation as a change of the values: a head's output Σ_j w_ij·v_j becomes 0 when every v_j is 0
    (zero ablation), and becomes m = its mean output over the text's positions when every v_j is m (mean
    ablation: Σ_j w_ij·m = m, the weights of a row summing to 1). So the weights stay as they were — an
    ablated head still looks where it looked — and only what it passes on changes, exactly as replacing
    its output would (`patching.ablate`, which replaces the output itself and is tested against hooks on
    the model's output projection).

    head  the query head to ablate (the capture computes a limited head apart, from this request): its
          key/value head's values are replaced. None: every head of the layer (grouped-query keys and
          values are first repeated per query head, so each head gets its own mean).
    The mean of a limited head is over this text as the model computes it here: with the interventions
    before it in the registry, and with the ablations of lower layers when every layer is ablated.
    """
    import torch

    from ..weights import masked_scores

    mean = values["mean"]
    if not mean:
        v = torch.zeros_like(r.v) if head is None else r.v.clone()
        if head is not None:
            v[:, head // r.G] = 0
        return dataclasses.replace(r, v=v)
    w = torch.softmax(masked_scores(r), dim=-1).nan_to_num(0.0)  # (B, Hq, Lq, Lk); a row that sees nothing: 0
    out = w @ r.v.to(w.dtype).repeat_interleave(r.G, dim=1)  # (B, Hq, Lq, Dv)
    m = ablation_value(out, "mean").to(r.v.dtype)  # (B, Hq, 1, Dv) each head's mean output
    if head is not None:
        v = r.v.clone()
        v[:, head // r.G] = m[:, head]
        return dataclasses.replace(r, v=v)
    k = r.k.repeat_interleave(r.G, dim=1)  # (B, Hq, Lk, D): the same keys, one copy per query head
    return dataclasses.replace(r, k=k, v=m.expand(r.B, r.Hq, r.Lk, r.Dv).contiguous())


LOW_T, HIGH_T = TEMPERATURE_RANGE


def _shown(off: str, on: str) -> dict[str, tuple[str, str]]:
    """A bool param's words in each language (`Param.shown`), from the catalogue keys for False and for True."""
    words = sentences(off), sentences(on)
    return {lang: (words[0][lang], words[1][lang]) for lang in LANGS}


REGISTRY: dict[str, Entry] = {
    e.name: e
    for e in (
        Entry(
            name="no_scaling",
            label=sentences("interventions.no_scaling.label"),
            help=sentences("interventions.no_scaling.help"),
            said=sentences("interventions.no_scaling.said"),
            apply=_no_scaling,
            flat="scaling",
        ),
        Entry(
            name="no_causal",
            label=sentences("interventions.no_causal.label"),
            help=sentences("interventions.no_causal.help"),
            said=sentences("interventions.no_causal.said"),
            apply=_no_causal,
            flat="causal",
        ),
        Entry(
            name="temperature",
            label=sentences("interventions.temperature.label"),
            help=both("interventions.temperature.help", low=f"{LOW_T:g}", high=f"{HIGH_T:g}"),
            said=sentences("interventions.temperature.said"),
            apply=_temperature,
            params=(Param("t", float, 1.0, sentences("interventions.temperature.t"), min=LOW_T, max=HIGH_T),),
            neutral={"t": 1.0},
            flat="temperature",
        ),
        Entry(
            name="block",
            label=sentences("interventions.block.label"),
            help=sentences("interventions.block.help"),
            said=sentences("interventions.block.said"),
            apply=_block,
            params=(
                Param("query", int, 0, sentences("interventions.block.query"), min=0),
                Param("key", int, 0, sentences("interventions.block.key"), min=0),
            ),
        ),
        Entry(
            name="ablate",
            label=sentences("interventions.ablate.label"),
            help=sentences("interventions.ablate.help"),
            said=sentences("interventions.ablate.said"),
            apply=_ablate,
            params=(
                Param(
                    "mean",
                    bool,
                    False,
                    sentences("experiments.ablate_mean"),
                    shown=_shown("common.zero", "interventions.ablate.mean"),
                ),
            ),
            scoped=True,
            cli=False,
        ),
    )
}
"""Every intervention, in the order they are applied (a temperature divides the scale that no_scaling set)."""

SCOPE = {"layer": sentences("interventions.scope.layer"), "head": sentences("interventions.scope.head")}
"""The two options that limit an intervention (Intervention.layer / .head), with their labels."""


def as_data() -> list[dict]:
    """The registry as JSON-ready data, in its order: doc["interventions"] (what the page builds controls from)."""
    return [e.as_dict() for e in REGISTRY.values()]


def flat_fields() -> dict[str, Entry]:
    """{flat field: entry} for the entries that have one (scaling, causal, temperature)."""
    return {e.flat: e for e in REGISTRY.values() if e.flat is not None}


@dataclass(frozen=True, init=False)
class Intervention:
    """Registry values to apply, in every attention layer or in one layer / one head.

        Intervention({"temperature": {"t": 2.0}, "block": {"query": 4, "key": 3}}, layer=1)
        Intervention(scaling=False, causal=False, temperature=2.0, head=0)   # the flat keywords (`Entry.flat`)

    values  ((name, ((param, value), …)), …) in registry order; an entry at its neutral values is left out
    layer   None: every attention layer; else only that one (0 = the first call)
    head    None: every head; else only that query head
    """

    values: tuple[tuple[str, tuple[tuple[str, object], ...]], ...]
    layer: int | None
    head: int | None

    def __init__(self, applied: Mapping | None = None, *, layer: int | None = None, head: int | None = None, **flat):
        wanted = dict(_from_flat(flat))
        if applied is not None:
            if not isinstance(applied, Mapping):
                raise TypeError(f"interventions must be {{name: {{param: value}}}}, got {type(applied).__name__}")
            for name, values in applied.items():
                if name in wanted:
                    raise ValueError(f"intervention {name} is given twice")
                wanted[name] = values
        unknown = sorted(set(wanted) - set(REGISTRY), key=str)
        if unknown:
            raise ValueError(f"unknown intervention {unknown[0]!r}; the interventions are {', '.join(REGISTRY)}")
        out = []
        for name, entry in REGISTRY.items():
            if name in wanted:
                values = entry.check(wanted[name])
                if values != entry.neutral:
                    out.append((name, tuple(values.items())))
        object.__setattr__(self, "values", tuple(out))
        for name, value in (("layer", layer), ("head", head)):
            object.__setattr__(self, name, checks.optional_integer(f"intervention {name}", value, low=0))

    @classmethod
    def of(cls, data: Mapping | None) -> Intervention:
        """From the JSON shape {name: {param: value}, "layer": L | None, "head": H | None} (`as_applied`)."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise TypeError(f"interventions must be a JSON object, got {type(data).__name__}")
        rest = {k: v for k, v in data.items() if k not in SCOPE}
        return cls(rest, layer=data.get("layer"), head=data.get("head"))

    @property
    def applied(self) -> dict[str, dict]:
        """{name: {param: value}} of the entries applied (empty: no intervention)."""
        return {name: dict(values) for name, values in self.values}

    def __bool__(self) -> bool:
        return bool(self.values)

    def needs_baseline(self) -> bool:
        """Whether an applied entry asks the experiment to compare with the same text without it."""
        return any(REGISTRY[name].needs_baseline for name, _ in self.values)

    def applies_to(self, layer: int) -> bool:
        return self.layer is None or self.layer == layer

    def apply(self, r: Request) -> Request:
        """The request with every applied entry, in registry order."""
        for name, values in self.values:
            entry = REGISTRY[name]
            r = entry.apply(r, dict(values), self.head) if entry.scoped else entry.apply(r, dict(values))
        return r

    def as_applied(self) -> dict:
        """{name: {param: value}, "layer": L | None, "head": H | None}: the one shape of an intervention, in the
        export (doc["experiment"]["applied"], `schema.Applied`), the page and the HTTP field `interventions`
        (`Intervention.of` reads it back)."""
        return self.applied | {"layer": self.layer, "head": self.head}

    def words(self, lang: str) -> list[str]:
        """What a view says for each applied entry (`Entry.said`), in registry order."""
        return [REGISTRY[name].words(lang, dict(values)) for name, values in self.values]


def _from_flat(flat: dict):
    """(name, values) pairs from the flat keywords (scaling=False → no_scaling, temperature=2 → {"t": 2})."""
    fields = flat_fields()
    for field, value in flat.items():
        entry = fields.get(field)
        if entry is None:
            raise TypeError(f"Intervention() got an unexpected keyword {field!r}")
        if not entry.params:
            if not checks.boolean(field, value):
                yield entry.name, {}
        else:
            (param,) = entry.params
            yield entry.name, {param.name: value}


ABLATIONS = ("zero", "mean")


def ablation_value(out: torch.Tensor, mode: str) -> torch.Tensor:
    """What every position of an ablated head's output (…, L, Dv) becomes, (…, 1, Dv): zero, or ("mean") the
    head's mean output over the L positions. The one rule of both ablations: `ablate` here, which replaces the
    output, and the "ablate" intervention (`interventions._ablate`), which makes every value this."""
    if mode not in ABLATIONS:
        raise ValueError(f"ablation mode must be one of {', '.join(ABLATIONS)}, got {mode!r}")
    if mode == "zero":
        return out.new_zeros(out[..., :1, :].shape)
    return out.mean(dim=-2, keepdim=True)
