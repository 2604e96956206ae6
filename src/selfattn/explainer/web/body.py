"""The body of POST /api/explain, generated from the interventions' registry.

    {"text": "一只蓝色怪兽走进森林",
     "interventions": {"temperature": {"t": 2.0}, "block": {"query": 4, "key": 3}, "layer": 1, "head": null},
     "layer": 1, "head": 2,                    # the head to show (not the intervention's scope)
     "format": "packed", "layers": [1], "find": [4, 3], "lang": "zh"}

The experiments (`experiments`, the answer gains the export's doc["ablation"|"patching"|"lens"]); the body is
read as one `pipeline.Spec` (`ExplainRequest.request`), the request `selfattn explain` and the Python API build:

     "ablate": [[1, 0], [0, 1]], "ablate_mode": "zero" | "mean",   # heads ablated (layer, head), each once
     "ablate_target": " Mary" | 12, "ablate_foil": " John" | 7,     # the ablation's logit difference (both)
     "reference": ["a text", …],                                    # the mean ablation's reference texts
     "prepend_bos": true | false | null,                            # the model's BOS first (null: its default)
     "patch": {"corrupted": "一只红色怪兽走进森林", "target": " Mary" | 12 | null, "foil": … | null},
     "lens": {"position": 3 | null} | true                          # the logit lens at one position (last)
     "attribution": true                                            # with patch: attribution patching beside it

bounded before any work: at most MAX_ABLATED_HEADS heads, a corrupted text of at most MAX_CHARS characters
(and, in `experiments.patching`, MAX_PATCH_TOKENS tokens), a target or foil of at most MAX_TOKEN_CHARS
characters, at most MAX_REFERENCE_TEXTS reference texts of MAX_CHARS characters each; ablate_mode, ablate_target,
ablate_foil or reference without ablate is refused (`Needs`), as the CLI refuses --ablate-mode alone.

`interventions` has the shape of doc["experiment"]["applied"] (`Intervention.as_applied`): one optional
object per registry entry, {param: value} (a switch: {}), each param typed and bounded as its entry declares,
and `layer` / `head`, the scope. The flat fields of the first API (scaling, causal, temperature, from the
entries' `flat` names, and only_layer / only_head) are still read, for the page that sends them; a body
gives one form or the other. Types are strict ("3" is not a layer, 1 is not true) and unknown fields are
refused, so a typo is a 422 naming it, never silently ignored. `lang` ("zh" | "en", default "en") is the
language of the answer: doc["lang"], and the `detail` of a refusal (every refusal also carries `messages`
{zh, en}).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    create_model,
)

from ...limits import MAX_ABLATED_HEADS, MAX_TOKEN_CHARS
from .. import pipeline
from ..experiments import MAX_REFERENCE_TEXTS
from ..interventions import REGISTRY, Entry, Intervention, Param, flat_fields
from ..session import MAX_CHARS

__all__ = ["ExplainRequest", "InterventionsBody", "PatchBody", "LensBody", "Needs"]

STRICT = {bool: StrictBool, int: StrictInt, float: StrictFloat}
FORBID = ConfigDict(extra="forbid")


def _field(p: Param) -> tuple[Any, Any]:
    """(type, Field) of one parameter: its strict type, bounds and default."""
    bounds: dict[str, Any] = {"ge": p.min, "le": p.max} | ({"allow_inf_nan": False} if p.type is float else {})
    return STRICT[p.type], Field(default=p.default, **{k: v for k, v in bounds.items() if v is not None})


def _values_model(entry: Entry) -> type[BaseModel]:
    fields: dict[str, Any] = {p.name: _field(p) for p in entry.params}
    return create_model(f"{entry.name}_values", __config__=FORBID, **fields)


def _flat_field(entry: Entry) -> tuple[Any, Any]:
    if not entry.params:
        return StrictBool, True
    return _field(entry.params[0])


if TYPE_CHECKING:  # the fields below come from the registry when the module runs; a type checker sees these

    class InterventionsBody(BaseModel):
        layer: int | None
        head: int | None

else:
    InterventionsBody = create_model(
        "InterventionsBody",
        __config__=FORBID,
        layer=(StrictInt | None, Field(default=None, ge=0)),
        head=(StrictInt | None, Field(default=None, ge=0)),
        **{name: (_values_model(entry) | None, None) for name, entry in REGISTRY.items()},
    )
    """{name: {param: value} | null, layer, head}: the interventions to apply (null or absent: not applied)."""


Index = Annotated[StrictInt, Field(ge=0)]
Token = Annotated[
    Annotated[Annotated[StrictStr, Field(min_length=1, max_length=MAX_TOKEN_CHARS)], Tag("text")]
    | Annotated[Index, Tag("id")],
    Discriminator(lambda v: "id" if isinstance(v, int) else "text"),
]
"""A token named by its text (" Mary", with its spaces) or by its id; a refusal names which it was read as
("patch.target.text: String should have at most 256 characters")."""


class PatchBody(BaseModel):
    """Activation patching: the request's text is the clean prompt."""

    model_config = FORBID

    corrupted: StrictStr = Field(max_length=MAX_CHARS)
    target: Token | None = None
    foil: Token | None = None


class LensBody(BaseModel):
    """The logit lens at `position` (None: the last token)."""

    model_config = FORBID

    position: Index | None = None


Lens = Annotated[
    Annotated[StrictBool, Tag("switch")] | Annotated[LensBody, Tag("at")],
    Discriminator(lambda v: "at" if isinstance(v, (dict, LensBody)) else "switch"),
]
"""true (the last position), false (no lens), or {"position": P}."""


class Needs(ValueError):
    """A field given without the one it goes with (answered 422, "server.needs" filled with `values`)."""

    def __init__(self, field: str, needed: str):
        self.values = {"field": field, "needed": needed}
        super().__init__(f"{field} goes with {needed}: give both")


class _Body(BaseModel):
    """The fields that do not come from the registry."""

    model_config = FORBID

    text: StrictStr = Field(max_length=MAX_CHARS)
    layer: StrictInt | None = Field(default=None, ge=0)
    head: StrictInt | None = Field(default=None, ge=0)
    interventions: InterventionsBody | None = None
    only_layer: StrictInt | None = Field(default=None, ge=0)
    only_head: StrictInt | None = Field(default=None, ge=0)
    format: Literal["json", "packed"] = "json"
    layers: list[StrictInt] | None = Field(default=None, max_length=1024)
    find: list[StrictStr | StrictInt] | None = Field(default=None, min_length=2, max_length=2)
    lang: Literal["zh", "en"] | None = None
    ablate: list[tuple[Index, Index]] | None = Field(default=None, min_length=1, max_length=MAX_ABLATED_HEADS)
    ablate_mode: Literal["zero", "mean"] | None = None
    ablate_target: Token | None = None
    ablate_foil: Token | None = None
    reference: list[Annotated[StrictStr, Field(max_length=MAX_CHARS)]] | None = Field(
        default=None, min_length=1, max_length=MAX_REFERENCE_TEXTS
    )
    prepend_bos: StrictBool | None = None
    patch: PatchBody | None = None
    lens: Lens | None = None
    attribution: StrictBool = False

    def request(self) -> pipeline.Spec:
        """The `pipeline.Spec` this body asks for (what `selfattn explain` and the Python API build too); `Needs`
        for ablate_mode without ablate, as the CLI refuses --ablate-mode alone."""
        for name in ("ablate_mode", "ablate_target", "ablate_foil", "reference"):
            if getattr(self, name) is not None and self.ablate is None:
                raise Needs(name, "ablate")
        if self.attribution and self.patch is None:
            raise Needs("attribution", "patch")
        patch = None if self.patch is None else pipeline.Patch(**self.patch.model_dump())
        lens = (
            None
            if self.lens is None or self.lens is False
            else pipeline.Lens(None if self.lens is True else self.lens.position)
        )
        return pipeline.Spec(
            self.text,
            layer=self.layer,
            head=self.head,
            intervention=self.intervention(),
            find=None if self.find is None else tuple(self.find),
            ablate=None if self.ablate is None else tuple((int(a), int(b)) for a, b in self.ablate),
            ablate_mode=self.ablate_mode,
            ablate_target=self.ablate_target,
            ablate_foil=self.ablate_foil,
            reference=None if self.reference is None else tuple(self.reference),
            patch=patch,
            lens=lens,
            prepend_bos=self.prepend_bos,
            attribution=self.attribution,
        )

    def intervention(self) -> Intervention:
        """The Intervention asked for (ValueError when both forms are given). A scope with nothing to apply
        changes nothing (the page's "only the head shown" box may be ticked before any change is chosen), but
        is still checked against the model: a head that does not exist is a 422."""
        flat = {name: getattr(self, name) for name in flat_fields()}
        legacy = Intervention(layer=self.only_layer, head=self.only_head, **flat)
        if self.interventions is None:
            return legacy
        if legacy != Intervention():
            raise ValueError(
                f"give the interventions as `interventions` or as the fields {', '.join(flat_fields())}, "
                "only_layer, only_head; not both"
            )
        return Intervention.of(self.interventions.model_dump(exclude_none=True))


if TYPE_CHECKING:  # the flat fields come from the registry when the module runs

    class ExplainRequest(_Body):
        pass

else:
    ExplainRequest = create_model(
        "ExplainRequest", __base__=_Body, **{field: _flat_field(entry) for field, entry in flat_fields().items()}
    )
    """The body of POST /api/explain (the module doc)."""
