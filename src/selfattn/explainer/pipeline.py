"""The explainer's one pipeline: an explain `Spec` → an `Explanation` (`result`).

    e = explain(Explainer.load(), Spec("一只蓝色怪兽走进森林", layer=1, head=0, ablate=((1, 0),), lens=Lens()))

The steps, in order, each once:
1. the text checked and cut into tokens (`Explainer.cut`): the experiments read the same cut;
2. an ablation's heads checked against the model's shape (`Explainer.shape`, read at load: no forward pass);
3. one forward pass of the text (`tracing.trace_with_controls`), and ONE batched pass of its control and
   contrast sentences beside it, read back from `cache` where it holds them;
4. analysis: every head's numbers and thumbnail (`summary.scan`), its sentence and verdicts (`views.heads.describe`),
   the head shown first (`experiment.opened`, `heads.shown_head`), the predictions, each piece's role (the one role
   system: the part-of-speech roles of the text's own words, `analysis.roles`), the search, and
   with an intervention that needs one, the comparison with the text unchanged;
5. the experiments asked (ablation, patching, logit lens), read back from `results` where it holds them.

`selfattn explain` (cli.py), the app (web/server.py; web/body.py builds the Spec from a POST body) and the Python
API (api.py) each build a Spec and call `explain` through a `Session`; none of them changes the result, so the same
Spec gives the same Explanation, and the same export, bit for bit, from all three (tests: test_run_path.py). The
views (`views.export.document`, the page, the terminal, the notebook) serialize it.

The head shown first: the head asked for; else the one a limited intervention changes ("intervened", "ablated" for
the ablate entry); else the first head of an ablation ("ablated"); else the head `heads.pick` picks ("auto").
An experiment that refuses its arguments raises `ExperimentValueError` / `ExperimentTypeError` (a ValueError /
TypeError: the app answers them with its "server.experiment" sentence, the CLI and the API as any other refusal).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import checks
from ..limits import CACHE_BYTES
from . import experiments, formula, tracing
from .analysis import experiment, heads, held, summary
from .analysis.predictions import predictions as predictions_of
from .analysis.predictions import starts_with_special
from .analysis.roles import piece_roles
from .capture.cache import TraceCache
from .interventions import REGISTRY, SCOPE, Intervention
from .probe_store import ProbeStore
from .result import Experiments, Explanation, HeadAnswers, ModelCard, Prediction, Shown, Tokens
from .session import DEFAULT_TEXT, Explainer, check_text, find_positions, unknown_report
from .views import experiment_words, export

__all__ = [
    "Spec",
    "Patch",
    "Lens",
    "Session",
    "explain",
    "ExperimentValueError",
    "ExperimentTypeError",
    "ABLATE_MODES",
    "CACHE_BYTES",
]

ABLATE_MODES = ("zero", "mean")


@dataclass(frozen=True)
class Patch:
    """Activation patching: the Spec's text is the clean prompt, `corrupted` the other one.

    target, foil  tokens (text such as " Mary", or ids); None: the clean and the corrupted top predictions"""

    corrupted: str
    target: str | int | None = None
    foil: str | int | None = None

    def __post_init__(self):
        if not isinstance(self.corrupted, str):
            raise TypeError(f"patch's corrupted text must be a str, got {type(self.corrupted).__name__}")
        for name in ("target", "foil"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int))):
                raise TypeError(f"patch's {name} must be a token's text or id, got {type(value).__name__}")


@dataclass(frozen=True)
class Lens:
    """The logit lens at `position` (None: the last token)."""

    position: int | None = None

    def __post_init__(self):
        checks.optional_integer("lens position", self.position, low=0)


@dataclass(frozen=True)
class Spec:
    """One explanation asked for.

    text          the text (checked by `session.check_text` when it is read)
    layer, head   the head shown first (None: see the module doc)
    intervention  registry values and their scope (`interventions.Intervention`)
    find          (query, key): every head ranked by that weight (`heads.search`)
    ablate        heads ((layer, head), …), given as pairs or "L.H,L.H" (None: no ablation); ablate_mode
                  "zero" | "mean" (only with ablate); ablate_target, ablate_foil: the ablation's logit difference
                  target − foil (tokens, both or neither); reference: texts the mean ablation averages over
    prepend_bos   the model's BOS before every text (`Explainer.bos`); None: the model's default
    patch, lens   `Patch`, `Lens` or None
    attribution   with patch: also every head's and residual's share estimated by attribution patching, beside
                  patching's exact shares (`experiments.attribution`)
    among         the layers a page holds (--layers): a head picked (no layer asked) is picked among them"""

    text: str = DEFAULT_TEXT
    layer: int | None = None
    head: int | None = None
    intervention: Intervention = field(default_factory=Intervention)
    find: tuple | None = None
    ablate: tuple[tuple[int, int], ...] | None = None
    ablate_mode: str | None = None
    patch: Patch | None = None
    lens: Lens | None = None
    among: tuple[int, ...] | None = None
    ablate_target: str | int | None = None
    ablate_foil: str | int | None = None
    reference: tuple[str, ...] | None = None
    prepend_bos: bool | None = None
    attribution: bool = False

    def __post_init__(self):
        if not isinstance(self.intervention, Intervention):
            raise TypeError(f"intervention must be an Intervention, got {type(self.intervention).__name__}")
        for name in ("layer", "head"):
            checks.optional_integer(name, getattr(self, name), low=0)
        if self.find is not None:
            if not isinstance(self.find, (tuple, list)) or len(self.find) != 2:
                raise ValueError(f"find must be (query, key), got {self.find!r}")
            object.__setattr__(self, "find", tuple(self.find))
        if self.ablate is not None:
            object.__setattr__(self, "ablate", tuple(experiments.pairs(self.ablate)))
        if self.ablate_mode is not None:
            if self.ablate is None:
                raise ValueError("ablate_mode goes with ablate: give the heads to ablate too")
            if self.ablate_mode not in ABLATE_MODES:
                raise ValueError(f"ablate_mode must be one of {', '.join(ABLATE_MODES)}, got {self.ablate_mode!r}")
        _check_ablation_extras(self)
        if self.prepend_bos is not None and not isinstance(self.prepend_bos, bool):
            raise TypeError(f"prepend_bos must be True, False or None, got {self.prepend_bos!r}")
        if self.among is not None:
            if isinstance(self.among, (str, bytes)) or not hasattr(self.among, "__iter__"):
                raise TypeError(f"among must be layer indices, got {type(self.among).__name__}")
            object.__setattr__(self, "among", tuple(checks.integer("a layer index", l, low=0) for l in self.among))
        for name, kind in (("patch", Patch), ("lens", Lens)):
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise TypeError(f"{name} must be a {kind.__name__} or None, got {type(value).__name__}")
        if checks.boolean("attribution", self.attribution) and self.patch is None:
            raise ValueError("attribution goes with patch: it estimates patching's shares; give the corrupted text")

    def opened(self) -> tuple[int | None, int | None, str | None]:
        """(layer, head, rule) of the head shown first as far as the Spec decides it (`experiment.opened`)."""
        return experiment.opened(self.intervention, self.layer, self.head, self.ablate)


def _check_ablation_extras(spec: Spec) -> None:
    """The ablation's target, foil and reference set: only with ablate; target and foil together, tokens; the
    reference a list of texts, with the mean ablation (made a tuple)."""
    for name in ("ablate_target", "ablate_foil", "reference"):
        if getattr(spec, name) is not None and spec.ablate is None:
            raise ValueError(f"{name} goes with ablate: give the heads to ablate too")
    if (spec.ablate_target is None) != (spec.ablate_foil is None):
        raise ValueError("ablate_target and ablate_foil go together: give both tokens of the logit difference")
    for name in ("ablate_target", "ablate_foil"):
        value = getattr(spec, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int))):
            raise TypeError(f"{name} must be a token's text or id, got {type(value).__name__}")
    if spec.reference is not None:
        if isinstance(spec.reference, str) or not isinstance(spec.reference, (list, tuple)):
            raise TypeError(f"reference must be a list of texts, got {type(spec.reference).__name__}")
        if (spec.ablate_mode or ABLATE_MODES[0]) != "mean":
            raise ValueError("reference goes with ablate_mode 'mean': the heads' mean output over those texts")
        object.__setattr__(spec, "reference", tuple(spec.reference))


class ExperimentValueError(ValueError):
    """An experiment refused a value of its Spec (the ValueError it raised, as its cause)."""


class ExperimentTypeError(TypeError):
    """An experiment refused the type of a value of its Spec (the TypeError it raised, as its cause)."""


def explain(
    explainer: Explainer,
    spec: Spec,
    *,
    cache: TraceCache | None = None,
    results: TraceCache | None = None,
    compare: bool = True,
    session: Session | None = None,
) -> Explanation:
    """The `Explanation` of `spec` on `explainer` (the module doc lists the steps).

    cache    a `TraceCache` of traces (the app's, a Session's): traces it holds are read back
    results  a `TraceCache` of experiments' results (the app's): one asked before is read back
    compare  with an intervention that needs a baseline, also trace the text without it and compare the two on the
             shown head (`Explanation.compared`); False skips it (the app's requests for more arrays)
    session  the Session the Explanation answers through (default: a new one over `explainer` and `cache`)"""
    if not isinstance(explainer, Explainer):
        raise TypeError(f"explainer must be an Explainer, got {type(explainer).__name__}")
    if not isinstance(spec, Spec):
        raise TypeError(f"spec must be a pipeline.Spec, got {type(spec).__name__}")
    session = Session(explainer, cache=cache, results=results) if session is None else session
    intervention = spec.intervention
    text = check_text(spec.text)
    bos = spec.prepend_bos
    cut = explainer.cut(text, bos)  # the one tokenization of the text: the trace and the experiments read it
    ablation = None
    if spec.ablate is not None:  # first: it checks the heads against the model before anything is drawn
        asked: dict[str, Any] = {"ablate": list(spec.ablate), "ablate_mode": spec.ablate_mode or ABLATE_MODES[0]}
        asked |= {"target": spec.ablate_target, "foil": spec.ablate_foil, "prepend_bos": bos}
        asked |= {"reference": None if spec.reference is None else list(spec.reference)}
        ablation = _kept(explainer, text, cut, "ablation", asked, results)
    trace, controls = tracing.trace_with_controls(explainer, text, intervention, cache=cache, cut=cut, prepend_bos=bos)
    table, thumbs = summary.scan(trace)
    probe = tracing.probe(explainer, cache=cache, store=session.probe_store)
    described = experiments.described_heads(explainer, trace, table, controls, probe)
    layer_asked, head_asked, why = spec.opened()
    picked = heads.shown_head(trace, table, described, layer_asked, head_asked, among=spec.among)
    shown = Shown(
        layer=picked["layer"],
        head=picked["head"],
        rule=why if why is not None and picked["rule"] is None else picked["rule"],
        link=_link(described[picked["layer"]][picked["head"]]),
    )
    reader = explainer.tokenizer
    complete = None if intervention else reader.complete  # completed by the model as it is, not under a change
    predictions = tuple(
        Prediction(**p) for p in predictions_of(trace, reader.decode, shown=reader.shown, complete=complete)
    )
    compared = None
    if checks.boolean("compare", compare) and intervention.needs_baseline():
        # the text as it is, read as the text is: in one batch with its controls
        base = tracing.trace_with_controls(explainer, text, cache=cache, cut=cut, prepend_bos=bos)[0]
        before = predictions_of(base, explainer.decode)
        numbers = experiment.compare(base, trace, shown.layer, shown.head, before, [p.as_dict() for p in predictions])
        compared = numbers | {"text": experiment_words.sentences(numbers, trace.tokens)}
    patching = lens = None
    if spec.patch is not None:
        p = spec.patch
        asked = {"patch": {"corrupted": p.corrupted, "target": p.target, "foil": p.foil}, "prepend_bos": bos}
        patching = _kept(explainer, text, cut, "patching", asked, results)
    attribution = None
    if spec.attribution and patching is not None:  # patching's texts and tokens, its exact shares beside
        attribution = _attributed(explainer, text, cut, patching, results, bos)
    if spec.lens is not None:
        asked = {"lens": {"position": spec.lens.position}, "intervention": intervention, "trace": trace}
        asked |= {"prepend_bos": bos}
        lens = _kept(explainer, text, cut, "lens", asked, results)
    assert trace.pieces is not None  # attached by every trace of an explainer
    return Explanation(
        spec=spec,
        card=card_of(explainer, trace, bos),
        tokens=Tokens(
            text=text,
            labels=tuple(trace.tokens),
            names=tuple(export.names(trace.tokens)),
            ids=trace.token_ids,
            pieces=trace.pieces,
            unknown=unknown_report(trace.pieces, dict(explainer.card.unknown_hint)),
        ),
        trace=trace,
        answers=HeadAnswers(
            summaries=tuple(tuple(row) for row in table),
            descriptions=tuple(tuple(row) for row in described),
            thumbnails=thumbs,
        ),
        shown=shown,
        predictions=predictions,
        compared=compared,
        search=None if spec.find is None else heads.search(trace, *find_positions(trace, spec.find)),
        first_token=(
            heads.first_token_note(trace, table, (shown.layer, shown.head))
            if starts_with_special(trace)  # the note on the first token: only for a special token
            else None
        ),
        roles=tuple(piece_roles(trace.pieces.spans, held.words_of(trace, explainer.user_words))),
        experiments=Experiments(ablation=ablation, patching=patching, lens=lens, attribution=attribution),
        session=session,
    )


def card_of(explainer: Explainer, trace, prepend_bos: bool | None = None) -> ModelCard:
    """The model card of `explainer` as the trace shows its sizes, and the BOS before the text (`Explainer.bos`)."""
    first = trace.layers[0]
    n_heads, n_kv = first.n_heads, int(first.k.shape[0])
    return ModelCard(
        name=explainer.name,
        kind=trace.kind,
        architecture=explainer.card.architecture,
        architecture_zh=explainer.card.architecture_zh,
        positions_key=explainer.card.positions,
        n_layers=trace.n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        kv_of_head=tuple(first.kv_head(h) for h in range(n_heads)),
        head_dim=int(first.q.shape[-1]),
        d_model=int(first.x.shape[-1]),
        dtype=str(first.q.dtype).removeprefix("torch."),
        tokenizer=explainer.tokenizer.kind,
        loaded=dict(explainer.card.loaded),
        formula=formula.describe(explainer.model),
        bos=explainer.bos(prepend_bos),
    )


def _link(description: Mapping) -> tuple[int, int] | None:
    """(query, key) of the link a head's sentence describes (`heads.describe`), or None when it names none."""
    q, k = description.get("query"), description.get("key")
    return (q, k) if isinstance(q, int) and isinstance(k, int) else None


def _kept(explainer: Explainer, text: str, cut, name: str, asked: dict, results: TraceCache | None) -> dict:
    """`experiments.run(**asked)[name]` on the text (read from `results` when it holds the same one: the lens's with
    the same intervention); a refusal raised as an Experiment*Error."""
    key = (name, text, repr(sorted((k, v) for k, v in asked.items() if k != "trace")))
    return _experiment(results, key, lambda: experiments.run(explainer, text, cut=cut, **asked)[name])


def _attributed(explainer: Explainer, text: str, cut, patching: Mapping, results: TraceCache | None, bos) -> dict:
    """`experiments.attribution` of the text → patching's corrupted text, on patching's target and foil, its exact
    shares beside (read from `results` when it holds the same); a refusal raised as an Experiment*Error."""
    corrupted, target, foil = patching["corrupted"]["text"], patching["target"]["id"], patching["foil"]["id"]
    return _experiment(
        results,
        ("attribution", text, corrupted, target, foil, repr(bos)),
        lambda: experiments.attribution(
            explainer, text, corrupted, target=target, foil=foil, cut=cut, exact=dict(patching)
        ),
    )


def _experiment(results: TraceCache | None, key: tuple, run: Callable[[], dict]) -> dict:
    """run() — or `results`' value under `key` when it holds one —, a refusal raised as an Experiment*Error."""

    def compute() -> dict:
        try:
            return run()
        except ValueError as exc:
            raise ExperimentValueError(str(exc)) from exc
        except TypeError as exc:
            raise ExperimentTypeError(str(exc)) from exc

    return compute() if results is None else results.get(key, compute)


class Session:
    """An explainer with the traces it keeps (`cache`) and the experiments' results (`results`): what an Explanation
    answers its questions through (a new Explanation, the head types, the page). The Python API makes one per
    `selfattn.explain` call; the app one for its life. Thread-safe as its caches are.

    layers  the layers whose arrays the page and `doc` hold in full ("auto", None, "selected" or indices:
            `views.export.document`)
    probe_store  where the induction probe's measures are kept across processes (`probe_store.ProbeStore`: the
            commands', which never change the weights they loaded); None (the API's) measures the probe here"""

    def __init__(
        self,
        explainer: Explainer,
        *,
        cache: TraceCache | None = None,
        results: TraceCache | None = None,
        layers: Any = "auto",
        probe_store: ProbeStore | None = None,
    ):
        if not isinstance(explainer, Explainer):
            raise TypeError(f"explainer must be an Explainer, got {type(explainer).__name__}")
        self.explainer = explainer
        self.cache = TraceCache(max_bytes=CACHE_BYTES) if cache is None else cache
        self.results = results
        self.layers = layers
        self.probe_store = probe_store

    def explain(self, spec: Spec, *, compare: bool = True) -> Explanation:
        return explain(self.explainer, spec, cache=self.cache, results=self.results, compare=compare, session=self)

    # --- views of an Explanation --------------------------------------------------------------

    def document(self, e: Explanation, *, layers: Any = None, lang: str | None = None) -> dict:
        """The page's document of `e` (`views.export.document`), holding `layers` (default: this Session's)."""
        return export.document(e, layers=self.layers if layers is None else layers, lang=lang)

    def to_json(self, e: Explanation) -> str:
        import json

        from .views import checkable

        doc = checkable.json_document(e)
        if e.other is not None:
            doc["compare"] = checkable.json_document(e.other)
        return json.dumps(doc, ensure_ascii=False, allow_nan=False)

    def html(self, e: Explanation, view: str | None = None, *, layer=None, head=None, query=None) -> str:
        from .views import report

        start = {k: v for k, v in (("view", view), ("layer", layer), ("head", head), ("query", query)) if v is not None}
        if e.other is not None and "view" not in start:
            start["view"] = "compare"
        if layer is not None or head is not None:
            e.check_head(layer if layer is not None else e.shown.layer, head if head is not None else e.shown.head)
        compare = None if e.other is None else e.other.doc
        return report.render_html(e.doc, compare=compare, start=start or None)

    @staticmethod
    def inline(html: str):
        from .views.notebook import Inline

        return Inline(html)

    # --- questions that need the model again ------------------------------------------------------

    def search(self, e: Explanation, query, key) -> list[dict]:
        return heads.search(e.trace, query, key)["heads"]

    def heads(self, e: Explanation) -> list[dict]:
        typed = experiments.taxonomy(self.explainer, e.text, cache=self.cache, prepend_bos=e.spec.prepend_bos)["heads"]
        out = []
        for l, row in enumerate(e.answers.summaries):
            for h, s in enumerate(row):
                d = e.answers.descriptions[l][h]
                item = {"layer": l, "head": h} | {k: s[k] for k in ("entropy", "max_weight", "first_token") if k in s}
                item |= {"description": d.get("text") if d else None}
                out.append(item | {"type": typed[l][h]["type"], "types": typed[l][h]["types"]})
        return out

    def intervene(self, e: Explanation, *, layer=None, head=None, scope=None, values: Mapping) -> Explanation:
        iv = intervention_of(dict(values) | ({"scope": scope} if scope is not None else {}))
        shown = (e.shown.layer, e.shown.head) if layer is None and head is None else (layer, head)
        return self.explain(
            Spec(e.text, layer=shown[0], head=shown[1], intervention=iv, prepend_bos=e.spec.prepend_bos)
        )

    def run(
        self, e: Explanation, *, ablate, ablate_mode, patch, target, foil, lens, reference=None, attribution=False
    ) -> Explanation:
        if patch is None and ablate is None and (target is not None or foil is not None):
            raise ValueError("target and foil go with patch or ablate: give the corrupted text or the heads too")
        if lens is not None and not isinstance(lens, (bool, int)):
            raise TypeError(f"lens must be True, False or a position, got {type(lens).__name__}")
        spec = dataclasses.replace(
            e.spec,
            ablate=ablate,
            ablate_mode=ablate_mode,
            ablate_target=None if ablate is None else target,
            ablate_foil=None if ablate is None else foil,
            reference=reference,
            patch=None if patch is None else Patch(patch, target=target, foil=foil),
            lens=None if lens is None or lens is False else Lens(None if lens is True else lens),
            attribution=attribution,
        )
        return self.explain(spec)

    def compare(self, e: Explanation, other) -> Explanation:
        if isinstance(other, str):
            spec = Spec(
                other,
                layer=e.shown.layer,
                head=e.shown.head,
                intervention=e.intervention,
                prepend_bos=e.spec.prepend_bos,
            )
            other = self.explain(spec)
        if not isinstance(other, Explanation):
            raise TypeError(f"other must be a text or an Explanation, got {type(other).__name__}")
        if (other.card.n_layers, other.card.n_heads) != (e.card.n_layers, e.card.n_heads):
            raise ValueError(
                "the two explanations come from models of different sizes: nothing to compare head by head"
            )
        return dataclasses.replace(e, other=other)


def intervention_of(values: Mapping) -> Intervention:
    """The Intervention of registry entries given by name ({"no_causal": {}, "temperature": {"t": 2.0}}), limited by
    "scope" {"layer": L, "head": H}; an unknown name is a TypeError naming it."""
    values = dict(values)
    scope = values.pop("scope", None) or {}
    if not isinstance(scope, Mapping) or set(scope) - set(SCOPE):
        raise ValueError(f"scope must be {{'layer': L, 'head': H}}, got {scope!r}")
    unknown = sorted(set(values) - set(REGISTRY))
    if unknown:
        raise TypeError(
            f"unknown option {unknown[0]!r}: the options are tokenizer, layer, head, scope and the interventions "
            f"{', '.join(REGISTRY)}"
        )
    return Intervention(values, layer=scope.get("layer"), head=scope.get("head"))
