"""The Python API of the explainer: `selfattn.explain(text, model=None, **options) -> Explanation`.

    e = selfattn.explain("一只蓝色怪兽走进森林")            # the bundled default model (offline)
    e                                                      # in a notebook: the whole page, inline
    e.heads()[:3]; e.table(1, 0); e.weights(1, 0)          # every head's summary; one head's weights
    e.find("森林", "走进")                                  # every head ranked by that (query, key) weight
    e.intervene(no_causal={})                              # the same text, the model changed: a new Explanation
    e.compare("一只红色怪兽走进森林")                        # two texts side by side (the compare view)
    e.run(ablate=[(1, 0)], patch="一只红色怪兽走进森林", lens=True)  # the experiments, drawn on the page too
    e.show("head", layer=1); e.save_html("page.html"); e.to_json()

`model`: None (the bundled default), a folder, a hub id, a GGUF file (whatever `Explainer.load` reads), or a
transformers model already loaded with its tokenizer: `model=(hf_model, tokenizer)` or `model=hf_model,
tokenizer=tok`. A loaded model is switched to the "selfattn" attention implementation (`selfattn.hf`) and
left so: that implementation computes what eager/SDPA attention computes (tests/hf check it), every later
`intervene` / `compare` needs it, and switching it back and forth would change a live module under the
caller's feet. `model.set_attn_implementation("sdpa")` switches it back.

Every Explanation answers one `run.Request` through `run.run`, the path of `selfattn explain` and of the app:
the same request gives the same export dict. Every number comes from one trace per (text, intervention)
(`capture.cache.TraceCache`, shared by an Explanation and those made from it).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch

from . import experiments, run
from .analysis import heads as heads_numbers
from .capture.cache import TraceCache
from .capture.interventions import REGISTRY, SCOPE, Intervention
from .run import Lens, Patch, Request
from .session import DEFAULT_TEXT, Explainer, dtype_name
from .views import report
from .views.notebook import Inline

__all__ = ["explain", "Explanation", "HeadTable", "CACHE_BYTES"]

CACHE_BYTES = 256 << 20
"""Traces kept per family of Explanations (one `explain` call and those made from it)."""


def explain(
    text: str = DEFAULT_TEXT,
    model=None,
    *,
    tokenizer=None,
    layer=None,
    head=None,
    find=None,
    layers="auto",
    dtype=None,
    user_words=None,
    **interventions,
):
    """Explain `text` on `model`: an `Explanation` (shown inline in a notebook).

    layer, head      the head shown first (default: `run`'s rule: the head an intervention is limited to, else
                     picked by `analysis.heads.pick`)
    find             (query, key): doc["search"] ranks every head by that weight (as `selfattn explain --find`)
    layers           the layers whose arrays the doc and its page hold in full, e.g. [3, 18] (as `--layers`;
                     default "auto": every layer a page can hold, the shown one and its neighbours first)
    dtype            what a model read from a path is loaded in: "bfloat16", "float16" or "float32" (default), or
                     that torch.dtype (`--dtype`); a loaded model keeps its own (a different dtype is refused)
    user_words       words the part-of-speech tagger keeps whole, a list or {word: role} (a role of
                     `analysis.roles.ROLES` wins over the tagger's tag): the tutorial's relations read these words
    interventions    registry entries by name, e.g. no_causal={}, temperature={"t": 2.0}, block={"query": 4,
                     "key": 3}; `scope={"layer": L, "head": H}` limits them to one layer / head"""
    explainer = _explainer(model, tokenizer, dtype)
    if user_words is not None:
        explainer = explainer.with_words(user_words)
    request = Request(text, layer=layer, head=head, intervention=_intervention(interventions), find=find)
    return Explanation(explainer, request, cache=None, layers=layers)


class Explanation:
    """One text explained on one model (and, after `compare`, a second text beside it).

    request  the `run.Request` it answers (text, head, interventions, experiments)
    doc      the export dict `run.run` made of it (the JSON of `selfattn explain --json` for the same request)
    trace    the `ModelTrace` it was made from (Q, K, V, lse of every head)
    other    the Explanation compared with, or None"""

    def __init__(self, explainer: Explainer, request: Request, *, cache, layers="auto"):
        self.explainer = explainer
        self.request = request
        self.layers = layers
        self._cache = TraceCache(max_bytes=CACHE_BYTES) if cache is None else cache
        self.doc = run.run(explainer, request, cache=self._cache, layers=layers)
        self.other: Explanation | None = None

    @property
    def text(self) -> str:
        return self.request.text

    @property
    def intervention(self) -> Intervention:
        return self.request.intervention

    @property
    def trace(self):
        return self.explainer.trace(self.text, self.intervention, cache=self._cache)

    @property
    def tokens(self) -> list[str]:
        """The tokens as the tokenizer decodes each one, its leading space kept (" Mary"); what a person reads
        is `labels` ("Mary", 森(1/3), ⟨U+00A0⟩) and `names` (a repeated one with its position)."""
        return [self.explainer.decode(int(i)) for i in self.doc["token_ids"]]

    @property
    def labels(self) -> list[str]:
        """Each token as every view shows it (`pieces` labels: `pieces.shown_text`'s notation)."""
        return list(self.doc["tokens"])

    @property
    def names(self) -> list[str]:
        """The labels as every view names them: a repeated one with "@position" (金鱼@5)."""
        return list(self.doc.get("token_names") or self.doc["tokens"])

    @property
    def shown(self) -> tuple[int, int]:
        """(layer, head) shown first."""
        return self.doc["selected"]["layer"], self.doc["selected"]["head"]

    # --- numbers ---------------------------------------------------------------------------

    def weights(self, layer: int, head: int) -> torch.Tensor:
        """(L, L) float64: the attention weights of one head, rows = queries (from the trace's Q, K, lse)."""
        layer, head = self._check(layer, head)
        return self.trace.layers[layer].stages(head, weighted=False)["weights"]

    def table(self, layer: int | None = None, head: int | None = None) -> HeadTable:
        """One head's weights with its tokens as a table (default: the head shown first)."""
        layer, head = self._check(*(self.shown if layer is None and head is None else (layer, head)))
        return HeadTable(self.names, self.weights(layer, head), layer, head)

    def heads(self) -> list[dict]:
        """Every head: {layer, head, entropy, max_weight, first_token, description {zh, en}, type, types}, layer
        by layer. entropy … description are this text's (with its interventions); type (a head type of
        `analysis.head_types` or None) and types (each type's score and chance) are what `selfattn heads` says
        (`experiments.taxonomy`: the induction probe and this text, the model as it is)."""
        typed = experiments.taxonomy(self.explainer, self.text, cache=self._cache)["heads"]
        out = []
        for l, row in enumerate(self.doc["summaries"]):
            for h, s in enumerate(row):
                d = self.doc["descriptions"][l][h]
                item = {"layer": l, "head": h} | {k: s[k] for k in ("entropy", "max_weight", "first_token") if k in s}
                item |= {"description": d.get("text") if d else None}
                out.append(item | {"type": typed[l][h]["type"], "types": typed[l][h]["types"]})
        return out

    def find(self, query, key) -> list[dict]:
        """Every head ranked by the weight of (query, key): token strings or positions (`analysis.heads.search`)."""
        return heads_numbers.search(self.trace, query, key)["heads"]

    # --- experiments ------------------------------------------------------------------------

    def intervene(self, *, layer=None, head=None, scope: Mapping | None = None, **values) -> Explanation:
        """The same text with the model changed by registry entries: e.g. `intervene(no_causal={})`,
        `intervene(temperature={"t": 2.0}, scope={"layer": 0})`, `intervene(block={"query": 4, "key": 3})`.
        layer, head: the head shown (default: this one's). With an entry that needs a baseline, the new
        doc's "experiment" compares it with this text unchanged."""
        iv = _intervention(values | ({"scope": scope} if scope is not None else {}))
        shown = self.shown if layer is None and head is None else (layer, head)
        request = Request(self.text, layer=shown[0], head=shown[1], intervention=iv)
        return Explanation(self.explainer, request, cache=self._cache, layers=self.layers)

    def run(self, *, ablate=None, ablate_mode: str | None = None, patch=None, target=None, foil=None, lens=None):
        """A copy of this Explanation that also runs the experiments asked: its doc is `run.run`'s for this
        request with them (the dict `selfattn explain --ablate / --patch / --logit-lens` and the app give),
        shown on its page; with no head asked, it opens on the first head ablated, as the CLI does.

        ablate  heads [(layer, head), …] or "L.H,L.H"; ablate_mode "zero" (default) | "mean"
        patch   the corrupted text (target, foil: its tokens);  lens  True (the last position) or a position"""
        if patch is None and (target is not None or foil is not None):
            raise ValueError("target and foil go with patch: give the corrupted text too")
        if lens is not None and not isinstance(lens, (bool, int)):
            raise TypeError(f"lens must be True, False or a position, got {type(lens).__name__}")
        request = dataclasses.replace(
            self.request,
            ablate=ablate,
            ablate_mode=ablate_mode,
            patch=None if patch is None else Patch(patch, target=target, foil=foil),
            lens=None if lens is None or lens is False else Lens(None if lens is True else lens),
        )
        out = copy.copy(self)  # the same explainer and trace cache
        out.request, out.doc = request, run.run(self.explainer, request, cache=self._cache, layers=self.layers)
        return out

    def compare(self, other) -> Explanation:
        """This text and `other` (a text, explained on the same model with the same interventions, or an
        Explanation) side by side: a copy of this Explanation whose page opens on the compare view."""
        if isinstance(other, str):
            request = Request(other, layer=self.shown[0], head=self.shown[1], intervention=self.intervention)
            other = Explanation(self.explainer, request, cache=self._cache, layers=self.layers)
        if not isinstance(other, Explanation):
            raise TypeError(f"other must be a text or an Explanation, got {type(other).__name__}")
        if (other.doc["model"]["n_layers"], other.doc["model"]["n_heads"]) != (
            self.doc["model"]["n_layers"],
            self.doc["model"]["n_heads"],
        ):
            raise ValueError(
                "the two explanations come from models of different sizes: nothing to compare head by head"
            )
        pair = copy.copy(self)
        pair.other = other
        return pair

    # --- the page ---------------------------------------------------------------------------

    def html(self, view: str | None = None, *, layer=None, head=None, query=None) -> str:
        """The self-contained page (as `selfattn explain --html` writes it), opening on `view` ("explore",
        "head", "model", "compare"), head (layer, head) and query row `query` (the URL hash still wins)."""
        start = {k: v for k, v in (("view", view), ("layer", layer), ("head", head), ("query", query)) if v is not None}
        if self.other is not None and "view" not in start:
            start["view"] = "compare"
        if layer is not None or head is not None:
            self._check(layer if layer is not None else self.shown[0], head if head is not None else self.shown[1])
        compare = None if self.other is None else self.other.doc
        return report.render_html(self.doc, compare=compare, start=start or None)

    def show(self, view: str | None = None, *, layer=None, head=None, query=None) -> Inline:
        """The page opening on one view, to display inline: `e.show("head", layer=1)`, `e.show("model")`."""
        return Inline(self.html(view, layer=layer, head=head, query=query))

    def _repr_html_(self) -> str:
        return self.show()._repr_html_()

    def save_html(self, path: str | os.PathLike, *, force: bool = False) -> Path:
        """Write the page to `path` atomically (temporary file, then rename); an existing file is kept
        unless force=True."""
        return Inline(self.html()).save_html(path, force=force)

    def to_json(self) -> str:
        """The export dict as JSON (±inf as "inf"/"-inf"); after `compare`, the second text's under "compare"."""
        doc = self.doc if self.other is None else self.doc | {"compare": self.other.doc}
        return json.dumps(doc, ensure_ascii=False, allow_nan=False)

    def __repr__(self) -> str:
        l, h = self.shown
        more = "" if self.other is None else f" compared with {self.other.text!r}"
        return (
            f"<Explanation of {self.text!r}{more} on {self.doc['model']['name']}: {len(self.tokens)} tokens, "
            f"{self.doc['model']['n_layers']} layers × {self.doc['model']['n_heads']} heads, "
            f"showing layer {l} head {h}>"
        )

    def _check(self, layer, head) -> tuple[int, int]:
        self.explainer.select(self.trace, self.doc["summaries"], self.doc["descriptions"], layer, head)
        return int(layer), int(head)


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


def _intervention(values: Mapping) -> Intervention:
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


def _explainer(model, tokenizer, dtype=None) -> Explainer:
    """An Explainer for what `explain` was given (see the module doc)."""
    name = dtype_name(dtype)
    if isinstance(model, (Explainer, tuple, torch.nn.Module)) and dtype is not None:
        own = _own_dtype(model)
        if own is not None and own != name:
            raise ValueError(
                f"dtype={name!r} is for a model read from a path; the model given keeps its own dtype ({own}): "
                "convert it yourself, or leave dtype out"
            )
    if isinstance(model, Explainer):
        return model
    if isinstance(model, tuple):
        if len(model) != 2 or tokenizer is not None:
            raise ValueError("model=(hf_model, tokenizer) takes exactly two items, and no tokenizer= beside it")
        model, tokenizer = model
    if isinstance(model, torch.nn.Module):
        if tokenizer is None:
            raise ValueError("a loaded model needs its tokenizer: model=(hf_model, tokenizer) or tokenizer=tok")
        return from_loaded(model, tokenizer)
    if tokenizer is not None:
        raise ValueError("tokenizer= goes with a loaded model; a path or hub id brings its own tokenizer")
    if model is not None and not isinstance(model, (str, os.PathLike)):
        raise TypeError(
            f"model must be None, a path, a hub id or a loaded transformers model, got {type(model).__name__}"
        )
    return Explainer.load(model if model is None or isinstance(model, str) else Path(model), dtype=name)


def _own_dtype(model) -> str | None:
    """The dtype name of the floating-point parameters of a model given loaded (an Explainer, (model, tok), a
    module), or None where it has none."""
    module = model.model if isinstance(model, Explainer) else model[0] if isinstance(model, tuple) else model
    params = getattr(module, "parameters", None)
    found = next((p.dtype for p in params() if p.is_floating_point()), None) if callable(params) else None
    return None if found is None else str(found).removeprefix("torch.")


def from_loaded(model: torch.nn.Module, tokenizer) -> Explainer:
    """An Explainer over a transformers model and tokenizer already in memory: switched to the "selfattn"
    attention and wrapped like a loaded folder (`Explainer.from_transformers`: the same dry run, so a model
    whose attention bypasses the interface is refused by name)."""
    from .. import hf

    if not callable(tokenizer) or not hasattr(tokenizer, "decode"):
        raise TypeError(f"tokenizer must be a transformers tokenizer, got {type(tokenizer).__name__}")
    if not callable(getattr(model, "set_attn_implementation", None)):
        raise TypeError(f"model must be a transformers model, got {type(model).__name__}")
    hf.register()
    cast(Any, model).set_attn_implementation(hf.NAME)  # a transformers model (checked above)
    return Explainer.from_transformers(model.eval(), tokenizer)
