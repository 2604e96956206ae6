"""The pipeline's forward passes: a text alone, a text with its control and contrast sentences in one batch, the
induction probe. `traced` is the one caller of the capture point (`capture.trace`): every model run that is read
goes through it.

    trace(ex, text, intervention=None, *, cache=None, prepend_bos=None)          -> ModelTrace
    trace_with_controls(ex, text, intervention=None, *, cache=, cut=, prepend_bos=) -> (ModelTrace, [ModelTrace])
    controls(ex, trace, intervention=None, *, cache=None, prepend_bos=None)       -> [ModelTrace]
    control_texts(ex, pieces)                                                     -> [str]
    traced(ex, cuts, intervention, *, measure=None)                               -> [ModelTrace]
    probe_trace(ex, length=, *, seed=, cache=)                                    the induction probe's trace
    probe(ex, length=, *, seed=, cache=, store=)                                  every head's measures on it

`ex` is an `Explainer` (its model, tokenizer and card); `cache` a `TraceCache` (the app's, a Session's): a trace it
holds is read back, no pass run.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from . import induction_probe as _probe
from . import pieces as P
from .analysis import heads, held
from .capture.batching import Unbatchable
from .capture.cache import TraceCache
from .capture.trace import capture, capture_batch
from .interventions import Intervention
from .session import Explainer, check_text
from .trace_types import ModelTrace

if TYPE_CHECKING:
    from .probe_store import ProbeStore

__all__ = [
    "BATCHED",
    "trace",
    "trace_with_controls",
    "controls",
    "control_texts",
    "traced",
    "probe_trace",
    "probe",
]

BATCHED = "batched"
"""The third part of a `TraceCache` key of a trace from a batch of control sentences (`_batch`)."""


def trace(
    ex: Explainer,
    text: str,
    intervention: Intervention | None = None,
    *,
    cache: TraceCache | None = None,
    prepend_bos: bool | None = None,
) -> ModelTrace:
    """The ModelTrace of `text` with `intervention` (default none), its `pieces` attached, the BOS as
    `prepend_bos` asks (`Explainer.bos`): one forward pass, or none when `cache` holds it."""
    intervention = _intervention(ex, intervention)
    text = check_text(text)
    return _alone(ex, text, lambda: ex.cut(text, prepend_bos), intervention, cache, prepend_bos)


def _alone(
    ex: Explainer,
    text: str,
    cut,
    intervention: Intervention,
    cache: TraceCache | None,
    prepend_bos: bool | None = None,
) -> ModelTrace:
    """The trace of `text` by its own pass, cut (`cut()`, `Explainer.cut`'s) only when it runs; or `cache`'s."""

    def run() -> ModelTrace:
        return traced(ex, [cut()], intervention)[0]

    return run() if cache is None else cache.get((text, intervention, *_bos_key(ex, prepend_bos)), run)


def _bos_key(ex: Explainer, prepend_bos: bool | None) -> tuple:
    """What a cache key adds for `prepend_bos`: nothing for the model's default (None, or the value it means),
    so the traces of a text asked with and without it are kept apart only where they differ."""
    if prepend_bos is None or prepend_bos == ex.bos()["prepend_bos"]:
        return ()
    return ("bos" if prepend_bos else "no bos",)


def trace_with_controls(
    ex: Explainer,
    text: str,
    intervention: Intervention | None = None,
    *,
    cache: TraceCache | None = None,
    cut=None,
    prepend_bos: bool | None = None,
) -> tuple[ModelTrace, list[ModelTrace]]:
    """(the trace of `text`, the traces of its control and contrast sentences, `control_texts`): ONE forward pass,
    a batch with the text first and its sentences after it (`_batch`), found from the text's pieces; the text by
    its own pass where it has no such sentence. The text's numbers are this batch's whichever way it is asked
    (the explanation, its baseline without an intervention, `selfattn heads` with a text), so the CLI, the app and
    the API, cached or not, show the same numbers; `trace(text)` alone may differ from them by the rounding of a
    batch's GEMMs. With `cache`, each is kept under its own key, so a second call runs nothing. `cut`: the text's
    `Explainer.cut`, made once by the caller."""
    intervention = _intervention(ex, intervention)
    text = check_text(text)
    cut = ex.cut(text, prepend_bos) if cut is None else cut
    others = control_texts(ex, cut[3])
    if not others:
        return _alone(ex, text, lambda: cut, intervention, cache, prepend_bos), []
    traces = _batch(ex, [text, *others], intervention, cache, first=cut, prepend_bos=prepend_bos)
    return traces[0], traces[1:]


def _batch(
    ex: Explainer,
    texts: list[str],
    intervention: Intervention,
    cache: TraceCache | None,
    *,
    first=None,
    prepend_bos: bool | None = None,
) -> list[ModelTrace]:
    """The traces of `texts` (a text, then its control and contrast sentences) from one forward pass of them all
    (a pass each for a model that is `Unbatchable`), or `cache`'s: one not held runs the whole batch again, so
    each trace's rounding is the same batch's whichever were kept. `first`: the first text's cut, made once by the
    caller; only the first text's head types are measured at the call (the sentences' relations rows are read
    later). They are kept under (text, intervention, BATCHED, the batch's first text), apart from the traces of
    texts run alone."""
    ran: list[ModelTrace] = []

    def run(i: int) -> ModelTrace:
        if not ran:
            cuts = [
                first if j == 0 and first is not None else ex.cut(check_text(t), prepend_bos)
                for j, t in enumerate(texts)
            ]
            measure = [j == 0 for j in range(len(cuts))]
            try:
                ran.extend(traced(ex, cuts, intervention, measure=measure))
            except Unbatchable:  # a model whose calls cannot be cut per input: each sentence alone
                ran.extend(traced(ex, [c], intervention, measure=[m])[0] for c, m in zip(cuts, measure, strict=True))
        return ran[i]

    if cache is None:
        return [run(i) for i in range(len(texts))]
    bos = _bos_key(ex, prepend_bos)
    return [
        cache.get((t, intervention, BATCHED, texts[0], *bos), functools.partial(run, i)) for i, t in enumerate(texts)
    ]


def control_texts(ex: Explainer, pieces: P.Pieces) -> list[str]:
    """The control and contrast sentences of a text from its pieces (`analysis.held.contrasts_of`, their words
    and fillers ones this tokenizer knows: `Explainer.knows`), each no longer than the model reads; [] where the
    text has no relation (no roles)."""
    return [
        c.text
        for c in held.contrasts_of(pieces, ex.user_words, ex.knows, ex.scenes)
        if len(ex.tokenize(c.text)[1]) <= ex.card.max_len
    ]


def _intervention(ex: Explainer, intervention: Intervention | None) -> Intervention:
    intervention = Intervention() if intervention is None else intervention
    if not isinstance(intervention, Intervention):
        raise TypeError(f"intervention must be an Intervention, got {type(intervention).__name__}")
    ex.check_intervention(intervention, None)
    return intervention


def traced(
    ex: Explainer, cuts: list, intervention: Intervention, *, measure: list[bool] | None = None
) -> list[ModelTrace]:
    """One forward pass of these cut texts (`Explainer.pieces_of`'s: labels, ids, model keywords, pieces or None),
    their pieces attached: the one caller of the capture functions (`capture.trace`), `capture` for one,
    `capture_batch` for several; the head types of each read from its call's own weights (`heads.measurer`),
    except where `measure` (one flag per cut, default all) says False (control sentences: only their relations'
    rows are read; `heads.measures` computes the types of such a trace later if a view asks)."""
    measure = [True] * len(cuts) if measure is None else measure
    measures = [
        heads.measurer(ids.reshape(-1).tolist()) if m else None for (_, ids, _, _), m in zip(cuts, measure, strict=True)
    ]
    if len(cuts) == 1:
        tokens, ids, kwargs, _ = cuts[0]
        traces = [capture(ex.model, ids, tokens, intervention, measure=measures[0], **kwargs)]
    else:
        inputs = [(ids, tokens, kwargs) for tokens, ids, kwargs, _ in cuts]
        traces = capture_batch(ex.model, inputs, intervention, measures=measures)
    for one, cut in zip(traces, cuts, strict=True):
        ex.check_intervention(intervention, one.kind)  # a model built here without a kind: read now
        one.pieces = cut[3]
    return traces


def controls(
    ex: Explainer,
    trace: ModelTrace,
    intervention: Intervention | None = None,
    *,
    cache: TraceCache | None = None,
    prepend_bos: bool | None = None,
) -> list[ModelTrace]:
    """The traces of the text's control and contrast sentences (`control_texts` of its pieces) on this model:
    [] where it has none; the batch `trace_with_controls` runs them in, with the text first (none when `cache`
    holds them)."""
    if trace.pieces is None:
        return []
    return trace_with_controls(ex, trace.pieces.text, intervention, cache=cache, prepend_bos=prepend_bos)[1]


def probe_trace(ex: Explainer, length: int = _probe.PROBE_LENGTH, *, seed: int = 0, cache=None) -> ModelTrace:
    """The induction probe's trace (`induction_probe.probe_ids`, with `probe_input`'s keywords): one forward pass of
    the model as it is, or none when `cache` holds it."""

    def run() -> ModelTrace:
        return traced(ex, [_probe.probe_input(ex, length, seed=seed)], Intervention())[0]

    return run() if cache is None else cache.get(_probe.probe_key(length, seed), run)


def probe(
    ex: Explainer,
    length: int = _probe.PROBE_LENGTH,
    *,
    seed: int = 0,
    cache: TraceCache | None = None,
    store: ProbeStore | None = None,
) -> list[list[dict]] | None:
    """Every head's measures on the induction probe (`heads.measures` of `probe_trace`: `length` random ordinary tokens
    twice, BOS first where the model has one; the one `selfattn heads` and `Explanation.heads()` read), of the model
    as it is (no intervention: the probe's positions are not the text's), or None where the model has no probe (it
    reads or knows too few tokens). One forward pass, or none when `cache` holds it or `store` (the commands'
    `probe_store.ProbeStore`) kept them for this model's files and probe; what is measured is then kept there."""
    try:
        if store is None:
            return heads.measures(probe_trace(ex, length, seed=seed, cache=cache))
        asked = _probe.probe_input(ex, length, seed=seed)
        kept = store.read(ex, asked)
        if kept is not None:
            return kept
        measures = heads.measures(probe_trace(ex, length, seed=seed, cache=cache))
        store.write(ex, asked, measures)
        return measures
    except _probe.NoProbe:
        return None
