"""`Explanation`: what the one pipeline (`pipeline.explain`) returns, and the only thing views receive.

    e = selfattn.explain("一只蓝色怪兽走进森林")
    e.card.n_layers, e.tokens.names, e.shown            # the model card, the tokens as read, the head shown first
    e.trace.layers[1].q                                # (H, L, D): every captured tensor, as tensors
    e.answers.describe(1, 0)["text"]["en"]             # one head's answer in words
    e.weights(1, 0)                                    # (L, L) float64 weights of one head
    e.contributions(1, 0)                              # (L, L) float64 ‖α_ij · v_j W_O^h‖: what each key moves
    e.intervene(no_causal={}); e.run(ablate="1.0"); e.compare("一只红色怪兽走进森林")   # new Explanations
    e.show("head"); e.save_html("page.html"); e.to_json()                             # views of it

Frozen dataclasses holding tensors (no nested lists): the model card, the tokens and their words, the trace
(per-layer arrays), one answer per head, the head shown first, the predictions, the comparison with the text
unchanged, the experiments. JSON (`views.export`), NPZ, the terminal, the page and the notebook are serializers
of it. What needs the model again (intervene, run, compare, the head types of `heads()`) or a view (the page,
JSON) goes through `session`: the `pipeline.Session` that made it (the explainer, its trace cache, the layers
a page holds), so this module imports neither the pipeline nor a view.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .analysis.contributions import contributions as _contributions
from .interventions import Intervention
from .pieces import Pieces
from .trace_types import ModelTrace

if TYPE_CHECKING:
    from .pipeline import Session, Spec
    from .views.notebook import Inline

__all__ = ["Explanation", "ModelCard", "Tokens", "HeadAnswers", "Shown", "Prediction", "Experiments", "HeadTable"]


@dataclass(frozen=True)
class ModelCard:
    """What every view says of the model: its name, decoder or encoder, architecture, positional scheme (a key of
    `views.texts`), sizes, which key/value head each query head reads (GQA), its dtype, how its text is cut (a
    `views.texts` key), how it was loaded {format, file, class, why} and its own formulas (`formula.describe`)."""

    name: str
    kind: str
    architecture: str
    architecture_zh: str | None
    positions_key: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    kv_of_head: tuple[int, ...]
    head_dim: int
    d_model: int
    dtype: str
    tokenizer: str
    loaded: Mapping[str, Any]
    formula: Mapping[str, Any]
    bos: Mapping[str, Any] = field(default_factory=dict)
    """{prepend_bos, id, token, added, removed}: the BOS before the text (`Explainer.bos`)."""


@dataclass(frozen=True)
class Tokens:
    """The text as the model read it.

    text     the text asked for
    labels   [L] each piece as a person reads it (`pieces` labels: 森(1/3), <unk>:☃)
    names    [L] the same with "@position" on a repeated one (金鱼@5): what every view shows
    ids      (L,) the token ids
    pieces   the pieces grouped into characters and words (`pieces.Pieces`), or None
    unknown  {count, positions, message, hint}: the pieces that are the tokenizer's unknown token"""

    text: str
    labels: tuple[str, ...]
    names: tuple[str, ...]
    ids: torch.Tensor
    pieces: Pieces | None
    unknown: Mapping[str, Any]

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class Shown:
    """The head shown first and why: rule None (asked for), "within layer", "within head", "auto" (`heads.pick`),
    "intervened" or "ablated"; link (query, key): the link its sentence describes, or None."""

    layer: int
    head: int
    rule: str | None
    link: tuple[int, int] | None = None

    def __iter__(self):
        """Unpacks as (layer, head): `layer, head = e.shown`."""
        return iter((self.layer, self.head))

    def as_dict(self) -> dict:
        return {"layer": self.layer, "head": self.head, "rule": self.rule}


@dataclass(frozen=True)
class HeadAnswers:
    """One answer per head, [layer][head]: its numbers on this text (`summary.scan`: entropy, max_weight,
    first_token, previous, self, rows), its sentence and verdicts (`views.heads.describe`: kind, text {zh, en},
    types, relations, …), and its thumbnail (the weights drawn small, `summary.scan`)."""

    summaries: tuple[tuple[Mapping[str, Any], ...], ...]
    descriptions: tuple[tuple[Mapping[str, Any], ...], ...]
    thumbnails: Any = None

    def describe(self, layer: int, head: int) -> Mapping[str, Any]:
        return self.descriptions[layer][head]


@dataclass(frozen=True)
class Prediction:
    """One of the most likely next tokens after the text: token (the text it adds), shown (as a person reads it),
    id, prob."""

    token: str
    shown: str
    id: int
    prob: float

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Experiments:
    """The experiments asked for (`experiments.ablation`, `patching`, `logit_lens`, `attribution`: their results,
    each with its sentences), None where not asked."""

    ablation: Mapping[str, Any] | None = None
    patching: Mapping[str, Any] | None = None
    lens: Mapping[str, Any] | None = None
    attribution: Mapping[str, Any] | None = None

    def items(self) -> list[tuple[str, Mapping[str, Any]]]:
        return [(name, value) for name, value in dataclasses.asdict(self).items() if value is not None]


@dataclass(frozen=True, eq=False)
class Explanation:
    """One text explained on one model (`pipeline.explain`).

    spec         the `pipeline.Spec` it answers (text, head, intervention, experiments)
    card         `ModelCard`;  tokens  `Tokens`;  trace  the `ModelTrace` (Q, K, V, lse, x, outputs of every layer)
    answers      `HeadAnswers` (every head's numbers, sentence and thumbnail);  shown  `Shown` (the head shown first)
    predictions  the top next tokens (decoders; () for an encoder)
    compared     with an intervention that needs a baseline: the shown head and the prediction compared with the
                 text unchanged (`experiment.compare`, with its sentences), else None
    search       with spec.find: every head ranked by that (query, key) weight (`heads.search`), else None
    first_token  where the first token is a special one (<bos>, [CLS]): its note (`heads.first_token_note`)
    roles        each piece's role (qm, colour, noun, verb, place or None): that of the word of the text it lies in,
                 by the part-of-speech tagger on the text's own words (`analysis.roles.piece_roles`)
    experiments  `Experiments`
    session      the `pipeline.Session` that made it: its explainer, trace cache and page settings
    other        the Explanation compared with (`compare`), or None"""

    spec: Spec
    card: ModelCard
    tokens: Tokens
    trace: ModelTrace
    answers: HeadAnswers
    shown: Shown
    predictions: tuple[Prediction, ...]
    compared: Mapping[str, Any] | None
    search: Mapping[str, Any] | None
    first_token: Mapping[str, Any] | None
    roles: tuple[Any, ...]
    experiments: Experiments
    session: Session = field(repr=False)
    other: Explanation | None = None

    # --- what it holds ------------------------------------------------------------------------

    @property
    def text(self) -> str:
        return self.tokens.text

    @property
    def explainer(self):
        """The `session.Explainer` (model, tokenizer, card) it was made with."""
        return self.session.explainer

    @property
    def intervention(self) -> Intervention:
        return self.spec.intervention

    @property
    def labels(self) -> list[str]:
        """Each token as every view shows it (`pieces` labels: `pieces.shown_text`'s notation)."""
        return list(self.tokens.labels)

    @property
    def names(self) -> list[str]:
        """The labels as every view names them: a repeated one with "@position" (金鱼@5)."""
        return list(self.tokens.names)

    def decoded(self) -> list[str]:
        """The tokens as the tokenizer decodes each one, its leading space kept (" Mary")."""
        return [self.session.explainer.decode(int(i)) for i in self.tokens.ids]

    def check_head(self, layer, head) -> tuple[int, int]:
        """(layer, head) as ints, a ValueError naming the one out of range."""
        from .. import checks

        for name, value, n in (("layer", layer, self.card.n_layers), ("head", head, self.card.n_heads)):
            if not 0 <= checks.integer(name, value) < n:
                raise ValueError(f"{name} must be in [0, {n - 1}], got {value!r}")
        return int(layer), int(head)

    def weights(self, layer: int, head: int) -> torch.Tensor:
        """(L, L) float64: the attention weights of one head, rows = queries (from the trace's Q, K, lse)."""
        layer, head = self.check_head(layer, head)
        return self.trace.layers[layer].stages(head, weighted=False)["weights"]

    def contributions(self, layer: int, head: int) -> torch.Tensor:
        """(L, L) float64: what each key contributes to one head's output at each query, ‖α_ij · v_j W_O^h‖ (value-
        weighted attention, `analysis.contributions`); a ValueError where the layer's output projection was not
        found."""
        layer, head = self.check_head(layer, head)
        return _contributions(self.trace.layers[layer], head, self.weights(layer, head))

    def table(self, layer: int | None = None, head: int | None = None) -> HeadTable:
        """One head's weights with its tokens as a table (default: the head shown first)."""
        if layer is None and head is None:
            layer, head = self.shown.layer, self.shown.head
        layer, head = self.check_head(layer, head)
        return HeadTable(self.names, self.weights(layer, head), layer, head)

    def find(self, query, key) -> list[dict]:
        """Every head ranked by the weight of (query, key): token strings or positions (`analysis.heads.search`)."""
        return self.session.search(self, query, key)

    def evidence(self, layer: int | None = None, head: int | None = None) -> list[dict]:
        """Every tutorial relation credited to a head (all heads, or the one given), the largest share first, with
        what it rests on: [{layer, head, relation, score, chance, rows, tested {weight, chance, rows, p, sentences},
        baseline {weight, query, rows, p} (what the other words give the same keys), evidence [{sentence, kind
        ("text" | "control" | "contrast"), text, query, key, weight, baseline, others, previous, tested}]}]: the
        text's, its control's and its contrast sentences' rows (`analysis.held`)."""
        from .analysis.verdicts import every_relation

        found = every_relation(self.answers.descriptions)
        if layer is None and head is None:
            return found
        if layer is None or head is None:
            raise ValueError(f"give both layer and head, or neither: got layer={layer!r}, head={head!r}")
        layer, head = self.check_head(layer, head)
        return [r for r in found if (r["layer"], r["head"]) == (layer, head)]

    def heads(self) -> list[dict]:
        """Every head: {layer, head, entropy, max_weight, first_token, description {zh, en}, type, types}, layer by
        layer: the numbers of this text (with its interventions), the types `selfattn heads` gives (the induction
        probe and this text, the model as it is)."""
        return self.session.heads(self)

    # --- new explanations from this one -------------------------------------------------------

    def intervene(self, *, layer=None, head=None, scope: Mapping | None = None, **values) -> Explanation:
        """The same text with the model changed by registry entries: e.g. `intervene(no_causal={})`,
        `intervene(temperature={"t": 2.0}, scope={"layer": 0})`, `intervene(block={"query": 4, "key": 3})`.
        layer, head: the head shown (default: this one's). With an entry that needs a baseline, the new
        Explanation's `compared` holds it beside this text unchanged."""
        return self.session.intervene(self, layer=layer, head=head, scope=scope, values=values)

    def run(
        self,
        *,
        ablate=None,
        ablate_mode: str | None = None,
        patch=None,
        target=None,
        foil=None,
        lens=None,
        reference=None,
        attribution: bool = False,
    ):
        """This text with the experiments asked run too (what `selfattn explain --ablate / --patch / --logit-lens`
        and the app give), shown on its page; with no head asked, it opens on the first head ablated. Every text is
        cut with this Explanation's prepend_bos.

        ablate     heads [(layer, head), …] or "L.H,L.H"; ablate_mode "zero" (default) | "mean"
        reference  texts whose every position a "mean" ablation averages each head's output over (default: the
                   text's own positions)
        patch      the corrupted text;  lens  True (the last position) or a position
        target, foil  tokens (" Mary" or ids): the logit difference target − foil at the last position, of the
                   ablation (before and after) and of the patching (the share each head recovers)
        attribution  with patch: also attribution patching's estimate of every share, beside the exact one
                   (`experiments.attribution`: `--attribution`)"""
        return self.session.run(
            self,
            ablate=ablate,
            ablate_mode=ablate_mode,
            patch=patch,
            target=target,
            foil=foil,
            lens=lens,
            reference=reference,
            attribution=attribution,
        )

    def attribution(self, corrupted: str | None = None, *, target=None, foil=None) -> dict:
        """Attribution patching of this text (clean) → `corrupted` (`experiments.attribution`): every head's and every
        residual position's first-order estimate of patching's share, from two forwards and one backward.
        corrupted: default the corrupted text of the patching this Explanation ran (`run(patch=…)`); on that text with
        no target or foil given, patching's are used and its exact shares set beside the estimates ("exact", with
        their rank agreement)."""
        from . import experiments

        if corrupted is None and target is None and foil is None and self.experiments.attribution is not None:
            return dict(self.experiments.attribution)  # run with the patching (`run(patch=…, attribution=True)`)
        ran = self.experiments.patching
        if corrupted is None:
            if ran is None:
                raise ValueError("attribution needs a corrupted text: give one, or run(patch=…) first")
            corrupted = ran["corrupted"]["text"]
        exact = None
        if ran is not None and ran["corrupted"]["text"] == corrupted and target is None and foil is None:
            target, foil, exact = ran["target"]["id"], ran["foil"]["id"], ran
        return experiments.attribution(self.explainer, self.text, corrupted, target=target, foil=foil, exact=exact)

    def run_with_hooks(self, text: str | None = None, *, fwd_hooks) -> torch.Tensor:
        """The logits (1, L, V) of the model on `text` (default this text) with `fwd_hooks` [(name, fn)] on named
        activations: fn(tensor, name) reads the tensor in `cache`'s layout and may return a replacement
        (`capture.named_hooks.run_with_hooks`: q, k, v, pattern, z, resid_post). Nothing stays on the model."""
        from .capture.named_hooks import run_with_hooks

        _, ids, extra, _ = self.explainer.cut(self.text if text is None else text)
        return run_with_hooks(self.explainer.model, torch.as_tensor(ids), fwd_hooks, **extra)

    @functools.cached_property
    def cache(self):
        """Every captured activation under a TransformerLens-like name (`named_cache.NamedCache`, docs/cache.md):
        `e.cache["blocks.0.attn.hook_pattern"]` (H, L, L), `e.cache["pattern", 0]`, `e.cache.keys()`."""
        from .named_cache import NamedCache

        return NamedCache(self.trace)

    def compare(self, other) -> Explanation:
        """This text and `other` (a text, explained on the same model with the same interventions, or an
        Explanation) side by side: a copy of this Explanation whose page opens on the compare view."""
        return self.session.compare(self, other)

    # --- views ----------------------------------------------------------------------------------

    @functools.cached_property
    def doc(self) -> dict:
        """The page's document (`views.export.document`), made once."""
        return self.session.document(self)

    def html(self, view: str | None = None, *, layer=None, head=None, query=None) -> str:
        """The self-contained page (as `selfattn explain --html` writes it), opening on `view` ("explore",
        "head", "model", "compare"), head (layer, head) and query row `query` (the URL hash still wins)."""
        return self.session.html(self, view, layer=layer, head=head, query=query)

    def show(self, view: str | None = None, *, layer=None, head=None, query=None) -> Inline:
        """The page opening on one view, to display inline: `e.show("head", layer=1)`, `e.show("model")`."""
        return self.session.inline(self.html(view, layer=layer, head=head, query=query))

    def _repr_html_(self) -> str:
        return self.show()._repr_html_()

    def save_html(self, path: str | os.PathLike, *, force: bool = False) -> Path:
        """Write the page to `path` atomically (temporary file, then rename); an existing file is kept
        unless force=True."""
        return self.show().save_html(path, force=force)

    def to_json(self) -> str:
        """What `selfattn explain --json` prints for the same Spec (`views.checkable.json_document`: ±inf as
        "inf"/"-inf"); after `compare`, the second text's under "compare"."""
        return self.session.to_json(self)

    def __repr__(self) -> str:
        more = "" if self.other is None else f" compared with {self.other.text!r}"
        return (
            f"<Explanation of {self.text!r}{more} on {self.card.name}: {len(self.tokens)} tokens, "
            f"{self.card.n_layers} layers × {self.card.n_heads} heads, "
            f"showing layer {self.shown.layer} head {self.shown.head}>"
        )


class HeadTable:
    """One head's weights with its tokens: a table in a notebook (`_repr_html_`) and as text (`str`).

    weights  (L, L) float64 tensor, rows = queries; tokens  L strings"""

    DIGITS = 4

    def __init__(self, tokens: list[str], weights: torch.Tensor, layer: int, head: int):
        self.tokens, self.weights, self.layer, self.head = tokens, weights, layer, head

    def rows(self) -> list[dict]:
        """[{query, token, weights: {key token position: weight}}] for every query row."""
        w = self.weights.tolist()
        return [{"query": i, "token": tok, "weights": dict(enumerate(w[i]))} for i, tok in enumerate(self.tokens)]

    def __str__(self) -> str:
        width = max(len(t) for t in self.tokens) + 2
        head = " " * width + "".join(f"{t[:8]:>10}" for t in self.tokens)
        lines = [f"layer {self.layer} · head {self.head}", head]
        for tok, row in zip(self.tokens, self.weights.tolist(), strict=True):
            lines.append(f"{tok:<{width}}" + "".join(f"{x:>10.{self.DIGITS}f}" for x in row))
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        import html

        cells = "".join(f"<th>{html.escape(t)}</th>" for t in self.tokens)
        body = []
        for tok, row in zip(self.tokens, self.weights.tolist(), strict=True):
            tds = "".join(
                f'<td style="background: rgba(29, 78, 216, {x**0.5:.3f}); color: {"#fff" if x > 0.3 else "#111"}">'
                f"{x:.{self.DIGITS}f}</td>"
                for x in row
            )
            body.append(f"<tr><th>{html.escape(tok)}</th>{tds}</tr>")
        caption = f"<caption>layer {self.layer} · head {self.head} (rows = queries, columns = keys)</caption>"
        return f'<table class="selfattn-table">{caption}<tr><th></th>{cells}</tr>{"".join(body)}</table>'
