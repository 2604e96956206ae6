"""The page's document, typed once: `Doc` and the TypedDicts it nests, what `export.document` returns (its layers as
`packing` packs them) and the page and the app read.

    doc["schema"] == SCHEMA_VERSION      every document says which schema it follows
    pydantic.TypeAdapter(Doc)            what the tests validate a document with (tests/explainer/views/test_schema.py),
                                         each TypedDict forbidding keys it does not name (`__pydantic_config__`)

A key marked NotRequired is present only in some documents (see each type); a key not in the schema is a problem,
so a new field is written here first. The page reads fields this schema names (test_schema.py checks the JS
against the schema's paths). The --json document is another layout (`checkable`, docs/json.md).

Numbers: `Num` is a float or an int; values that may be ±inf (`Arr`) hold the strings "inf" / "-inf" there
(`selfattn.files.json_float`). Arrays are `Packed` (`codec`: what the page's decoder reads). Maps keyed by a name
(a head type, an intervention) are `dict[str, …]`.
"""

from typing import Any, Literal

# PEP 728's closed=True and extra_items (typing has them from Python 3.15; NotRequired from 3.11)
from typing_extensions import NotRequired, TypedDict

from ...scores import PER_HEAD

__all__ = ["SCHEMA_VERSION", "Doc", "OPAQUE"]

SCHEMA_VERSION = 3
"""Raised when a key is renamed, removed or changes its type (a new optional key leaves it). 3: the layers are the
page's, packed (2 held the captured arrays as lists of floats)."""

Num = float | int
Inf = Literal["inf", "-inf"]
Arr = float | int | Inf


class Words(TypedDict, closed=True):
    zh: str
    en: str


Loaded = TypedDict("Loaded", {"format": str, "file": str | None, "class": str, "why": str}, total=False, closed=True)
"""How the model was built (`Explainer.loaded`: {} for an Explainer made directly); "class" is a keyword, hence
the call form."""


class Bos(TypedDict, closed=True):
    """The BOS before the text (`Explainer.bos`), and what was done in words."""

    prepend_bos: bool
    id: int | None
    token: str | None
    added: bool
    removed: bool
    text: Words


class Model(TypedDict, closed=True):
    """The model card (`export.card_dict` of the Explanation's `ModelCard`)."""

    name: str
    kind: Literal["decoder", "encoder"]
    architecture: str
    architecture_zh: NotRequired[str]
    positions: str
    positions_zh: str
    positions_key: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    kv_of_head: list[int]
    head_dim: int
    d_model: int
    dtype: str
    tokenizer: NotRequired[str]
    loaded: NotRequired[Loaded]
    formula: NotRequired[dict[str, Any]]
    bos: NotRequired[Bos]


class Unknown(TypedDict, closed=True):
    count: int
    positions: list[int]
    message: str
    hint: NotRequired[Words]


class Piece(TypedDict, closed=True):
    id: int
    raw: str
    label: str
    span: list[int]
    special: bool
    unknown: bool


class Group(TypedDict, closed=True):
    text: str
    name: str
    start: int
    end: int
    pieces: list[int]


class Pieces(TypedDict, closed=True):
    pieces: list[Piece]
    names: list[str]
    characters: list[Group]
    words: list[Group]
    rule: Words


class Level(TypedDict, closed=True):
    names: list[str]
    pieces: list[list[int]]
    same: bool
    weights: list[list[Num]] | None


class Levels(TypedDict, closed=True):
    rule: Words
    characters: Level
    words: Level


class Packed(TypedDict, closed=True):
    """One array packed for the page (`codec`, the one encoding): byte planes, zlib, base64; digits: fixed point."""

    dtype: Literal["f16", "f32", "f64", "u16", "u32", "z32", "bits"]
    shape: list[int]
    b64: str
    digits: NotRequired[int]


class DisplaySelected(TypedDict, closed=True):
    layer: int
    head: int
    weights: Packed


class Display(TypedDict, closed=True):
    thumbnail_size: int
    thumbnails: list[list[Packed]]
    selected: DisplaySelected


class Omitted(TypedDict, closed=True):
    layers: list[int]
    held: NotRequired[list[int]]
    bytes: int
    limit: int
    message: str
    text: Words


class Opened(TypedDict, closed=True):
    """The query row the views open on (`export.opened_query`): the query of the link the shown head's sentence
    describes (`link`) when the mask hides keys from it, else the middle one when the mask hides keys from it."""

    row: int
    hidden: int
    text: Words
    link: NotRequired[dict[str, int]]


class Applied(TypedDict, extra_items=dict[str, Any]):  # type: ignore[call-arg]  # PEP 728: mypy 2.4 lacks it
    """`Intervention.as_applied`, the one shape of an intervention (doc["experiment"]["applied"], the HTTP
    field `interventions`): each applied registry entry under its name with its values ({"temperature":
    {"t": 2}}, {"no_causal": {}}: its extra_items), and its scope."""

    layer: int | None
    head: int | None


class Param(TypedDict, closed=True):
    name: str
    type: Literal["bool", "int", "float"]
    min: Num | None
    max: Num | None
    default: Any
    label: Words


class InterventionEntry(TypedDict, closed=True):
    """One entry of the interventions registry as data (`interventions.as_data`)."""

    name: str
    label: Words
    help: Words
    said: Words
    params: list[Param]
    needs_baseline: bool
    neutral: NotRequired[dict[str, Any] | None]
    unavailable: NotRequired[Words]


class Top(TypedDict, closed=True):
    token: str
    shown: str
    id: int
    prob: Num


class FutureRow(TypedDict, closed=True):
    query: int
    weight: Num
    keys: list[int]


class Experiment(TypedDict, closed=True):
    """What the interventions applied, and with a baseline how the shown head changed (`experiment.compare`)."""

    applied: Applied
    layer: NotRequired[int]
    head: NotRequired[int]
    scope: NotRequired[str]
    same_x: NotRequired[bool]
    entropy: NotRequired[list[Num]]
    future: NotRequired[list[Num]]
    future_row: NotRequired[FutureRow | None]
    top: NotRequired[list[Top | None]]  # [before, after]; None for an encoder (no next token)
    loss: NotRequired[list[Num | None]]
    kl_bits: NotRequired[Num | None]
    ablated: NotRequired[bool]
    text: NotRequired[Words]


class LegendNumbers(TypedDict, closed=True):
    credit_min: Num
    chance_factor: Num
    min_rows: int
    broad_min: Num
    local_span: int


class Legend(TypedDict, closed=True):
    """doc["head_types"] (`taxonomy.legend`, from the registry `head_types.REGISTRY`)."""

    types: list[str]
    short: dict[str, Words]
    labels: dict[str, Words]
    words: dict[str, Words]
    colours: dict[str, str]
    rule: Words
    numbers: LegendNumbers


class Selected(TypedDict, closed=True):
    layer: int
    head: int
    rule: str | None


class Summary(TypedDict, closed=True):
    entropy: Num
    max_weight: Num
    first_token: Num
    previous: Num
    self: Num
    rows: int


class Measured(TypedDict, closed=True):
    score: Num | None
    chance: Num | None
    rows: int
    p: NotRequired[Num | None]
    credited: bool


class TypeFound(TypedDict, closed=True):
    """One type a head holds (`verdicts.verdict`): where it was measured ("text" | "probe")."""

    type: str
    score: Num | None
    chance: Num | None
    rows: int
    p: Num | None
    on: str


class RelationBaseline(TypedDict, closed=True):
    """What the other words of the text and its control and contrast sentences give a credited relation's keys
    (`held._baseline`): their mean weight, the relation's own query's on the same rows, the rows, the p-value."""

    weight: Num | None
    query: Num | None
    rows: int
    p: Num | None


class EvidenceRow(TypedDict, closed=True):
    """One sentence's row a credited relation rests on (`held._evidence`)."""

    sentence: int
    kind: str
    text: str
    query: str
    key: str
    weight: Num
    baseline: Num | None
    others: int
    previous: Num
    tested: bool


class HeldRelation(TypedDict, extra_items=Any):  # type: ignore[call-arg]  # PEP 728: mypy 2.4 lacks it
    """One relation credited to a head (`verdicts.verdict`); the measures beside it (control, previous word)
    are the `held` analysis' own keys."""

    relation: str
    score: Num
    chance: Num
    rows: int
    baseline: NotRequired[RelationBaseline]
    evidence: NotRequired[list[EvidenceRow]]


class Verdict(TypedDict, closed=True):
    """One head's answer, the same in every view (`analysis.verdicts`)."""

    type: str | None
    types: list[TypeFound]
    relations: list[HeldRelation]
    measurable: bool


class Description(TypedDict, closed=True):
    """One head in words (`head_words.sentence`)."""

    kind: str
    text: Words
    weight: Num
    chance: Num | None
    types: list[str]
    scores: dict[str, Measured]
    relation: NotRequired[str]
    query: NotRequired[int]
    key: NotRequired[int]
    pair_weight: NotRequired[Num]
    pair_chance: NotRequired[Num]
    mean: NotRequired[Num]
    mean_chance: NotRequired[Num]
    link_credited: NotRequired[bool]
    verdict: NotRequired[Verdict]


class FirstToken(TypedDict, closed=True):
    token: str
    selected: Num
    mean: Num


class Found(TypedDict, closed=True):
    layer: int
    head: int
    weight: Num


class Search(TypedDict, closed=True):
    query: int
    key: int
    heads: list[Found]


class SameAs(TypedDict, closed=True):
    """K or V of a head that reads the same key/value head as an earlier head of its layer: that head's (GQA)."""

    of_head: int


class TopDimensions(TypedDict, closed=True):
    """Of one d_model vector per row, in a layer not held in full: the `vector_top` dimensions of largest |value|
    (dims (L, T), largest first) and their values (L, T) to 4 decimals."""

    dims: Packed
    values: Packed


class Head(TypedDict, closed=True):
    """A head as the page holds it (`packing`): Q/K/V in float16, lse exact, and what the page shows computed by
    Python; scale … visible only for a head an intervention changed apart from its layer."""

    kv_head: int
    q: Packed
    k: Packed | SameAs
    v: Packed | SameAs
    lse: Packed
    weights: Packed
    keys: Packed
    key_stages: Packed
    weighted: Packed
    sums: Packed
    sink: NotRequired[Packed]
    scale: NotRequired[Num]
    softcap: NotRequired[Num | None]
    causal: NotRequired[bool]
    visible: NotRequired[Packed]


PerHeadValues = TypedDict("PerHeadValues", {name: list[float] for name in PER_HEAD}, total=False)  # type: ignore[misc]
"""The per-head score features of a layer as data, one value per head, each key present only where the layer has it:
the names of `scores.PER_HEAD` (read from the rule's table, not written here)."""


class Layer(PerHeadValues, closed=True):
    """One layer: its rule always (with each per-head score feature it has: `PerHeadValues`) and its heads' labels
    (`types`, where known); its arrays packed unless left out (then `omitted: true`); its d_model vectors whole in a
    layer of doc["full_layers"], else as `top` dimensions; their `norms` either way."""

    scale: Num
    causal: bool
    softcap: Num | None
    window: int | list[int] | None
    omitted: NotRequired[bool]
    visible: NotRequired[Packed]
    x: NotRequired[Packed]
    attn_out: NotRequired[Packed]
    output: NotRequired[Packed]
    norms: NotRequired[dict[str, Packed]]
    top: NotRequired[dict[str, TopDimensions]]
    heads: NotRequired[list[Head]]
    types: NotRequired[list[str | None]]


class ScaleWords(TypedDict, closed=True):
    stage: Words
    row: Words
    how: Words


class ShownKeys(TypedDict, closed=True):
    all_up_to: int
    top: int


class Outcome(TypedDict, closed=True):
    top: list[Top]
    loss: Num | None


class AblationTarget(TypedDict, closed=True):
    token: str
    shown: str
    id: int
    before: Num
    after: Num


class Token(TypedDict, closed=True):
    token: str
    shown: str
    id: int


class LogitDiff(TypedDict, closed=True):
    target: Token
    foil: Token
    before: Num
    after: Num


class Reference(TypedDict, closed=True):
    texts: int
    positions: int


class Ablation(TypedDict, closed=True):
    """`experiments.ablation`: the prediction before and after some heads' outputs are replaced."""

    prompt: str
    heads: list[list[int]]
    mode: Literal["zero", "mean"]
    before: Outcome
    after: Outcome
    kl_bits: Num
    target: AblationTarget
    logit_diff: NotRequired[LogitDiff]
    reference: NotRequired[Reference]
    text: Words


class PatchText(TypedDict, closed=True):
    text: str
    tokens: list[str]
    labels: list[str]
    names: list[str]
    top: list[Top]


class Recovered(TypedDict, closed=True):
    layer: int
    head: int
    recovered: Num


class PatchDisplay(TypedDict, closed=True):
    limit: Num
    label_min: Num
    light_from: Num


class Patching(TypedDict, closed=True):
    """`experiments.patching`: the share of the logit difference each head and residual position recovers."""

    model: str
    clean: PatchText
    corrupted: PatchText
    target: Token
    foil: Token
    clean_ld: Num
    corrupted_ld: Num
    heads: list[list[Num]]
    residual: list[list[Num]]
    differ: list[int]
    top_heads: list[Recovered]
    display: PatchDisplay
    text: Words


class AttributedText(TypedDict, closed=True):
    text: str
    tokens: list[str]


class Agreement(TypedDict, closed=True):
    top: int
    spearman: Num | None
    shared: int


class Exact(TypedDict, closed=True):
    heads: list[list[Num]]
    residual: list[list[Num]]
    agreement: Agreement


class Attribution(TypedDict, closed=True):
    """`experiments.attribution`: patching's shares estimated to first order, exact patching's beside them."""

    model: str
    clean: AttributedText
    corrupted: AttributedText
    target: Token
    foil: Token
    clean_ld: Num
    corrupted_ld: Num
    activation: str
    heads: list[list[Num]]
    residual: list[list[Num]]
    heads_ld: list[list[Num]]
    top_heads: list[Recovered]
    exact: Exact | None
    display: PatchDisplay


class LensLayer(TypedDict, closed=True):
    layer: int
    top: list[Top]
    entropy_bits: Num


class Lens(TypedDict, closed=True):
    """`experiments.lens`: the next token read out after every layer at one position."""

    position: int
    token: str
    name: str
    layers: list[LensLayer]
    settled: int
    text: Words


class FirstContribution(TypedDict, closed=True):
    """A head's first token: its rows' mean weight there, their mean share of the contribution from there, and
    whether the weight oversells it (`analysis.contributions.first_token`)."""

    weight: Num
    share: Num
    oversold: bool


class Contributions(TypedDict, closed=True):
    """What each key contributes to the shown head, ‖α_ij · v_j W_O^h‖ (`views.contribution_words`)."""

    layer: int
    head: int
    norms: list[list[Num]]
    first: list[FirstContribution | None]
    first_type: list[Measured] | None
    text: Words | None
    shares: NotRequired[list[list[Num]]]
    packed: NotRequired[Packed]
    values: NotRequired[list[list[Num]]]


class Doc(TypedDict, closed=True):
    """The page's document (`export.document` of an Explanation, with its experiments)."""

    schema: int
    selfattn_version: str
    model: Model
    text: str
    tokens: list[str]
    token_names: list[str]
    token_ids: list[int]
    unknown: Unknown
    interventions: list[InterventionEntry]
    experiment: Experiment
    head_types: Legend
    selected: Selected
    summaries: list[list[Summary]]
    prediction: list[Top]
    layers: list[Layer]
    pieces: NotRequired[Pieces]
    levels: NotRequired[Levels]
    display: NotRequired[Display]  # with the page's words below: a page's document (display=True)
    scale_words: NotRequired[ScaleWords]
    shown_keys: NotRequired[ShownKeys]
    vector_top: NotRequired[int]  # how many dimensions of a d_model vector a layer not held in full keeps per row
    omitted: NotRequired[Omitted]
    full_layers: NotRequired[list[int]]  # the held layers whose d_model vectors the page holds whole
    opened: NotRequired[Opened]
    lang: NotRequired[Literal["zh", "en"]]
    descriptions: NotRequired[list[list[Description]]]
    roles: NotRequired[list[str | None]]
    first_token: NotRequired[FirstToken]
    contributions: NotRequired[Contributions]
    search: NotRequired[Search]
    ablation: NotRequired[Ablation]
    patching: NotRequired[Patching]
    lens: NotRequired[Lens]
    attribution: NotRequired[Attribution]


OPAQUE = (Packed,)
"""Types the page reads through its own decoder (data.js): their fields are the decoder's, not the document's."""
