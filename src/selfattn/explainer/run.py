"""The explainer's one run path: a `Request` (what to explain and which experiments) → the export dict.

    doc = run(explainer, Request("一只蓝色怪兽走进森林", intervention=Intervention({"temperature": {"t": 2.0}}),
                                 ablate=((1, 0),), patch=Patch("一只红色怪兽走进森林"), lens=Lens()))

`selfattn explain` (cli.py), the app (web/server.py; web/body.py builds the Request from a POST body) and
the Python API (api.py: `explain`, `Explanation.run`, `Explanation.intervene`) each build a Request and
call `run`; none of them changes the dict afterwards, so the same Request gives the same export, bit for
bit, from all three (tests/explainer/pipeline/test_run_path.py).

The head shown first is decided once, by `Explainer.explain` (`experiment.opened`): the head asked for;
else the one a limited intervention changes ("intervened", "ablated" for the ablate entry); else the first
head of an ablation ("ablated"); else the head `heads.pick` picks ("auto").

The ablation runs first (it checks the heads against the model before anything is drawn), then the text
is explained, then the patching and the lens. An experiment that refuses its arguments raises
`ExperimentValueError` / `ExperimentTypeError` (a ValueError / TypeError: the app answers them with its
"server.experiment" sentence, the CLI and the API as any other refusal).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import checks
from . import experiments
from .capture.cache import TraceCache
from .capture.interventions import Intervention
from .session import DEFAULT_TEXT, Explainer

__all__ = ["Request", "Patch", "Lens", "run", "ExperimentValueError", "ExperimentTypeError", "ABLATE_MODES"]

ABLATE_MODES = ("zero", "mean")


@dataclass(frozen=True)
class Patch:
    """Activation patching: the Request's text is the clean prompt, `corrupted` the other one.

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
class Request:
    """One explanation asked for.

    text          the text (checked by `session.check_text` when it is read)
    layer, head   the head shown first (None: see the module doc)
    intervention  registry values and their scope (`capture.interventions.Intervention`)
    find          (query, key): every head ranked by that weight (`Explainer.explain`'s find)
    ablate        heads ((layer, head), …), given as pairs or "L.H,L.H" (None: no ablation); ablate_mode
                  "zero" | "mean" (only with ablate)
    patch, lens   `Patch`, `Lens` or None"""

    text: str = DEFAULT_TEXT
    layer: int | None = None
    head: int | None = None
    intervention: Intervention = field(default_factory=Intervention)
    find: tuple | None = None
    ablate: tuple[tuple[int, int], ...] | None = None
    ablate_mode: str | None = None
    patch: Patch | None = None
    lens: Lens | None = None

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
        for name, kind in (("patch", Patch), ("lens", Lens)):
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise TypeError(f"{name} must be a {kind.__name__} or None, got {type(value).__name__}")


class ExperimentValueError(ValueError):
    """An experiment refused a value of its request (the ValueError it raised, as its cause)."""


class ExperimentTypeError(TypeError):
    """An experiment refused the type of a value of its request (the TypeError it raised, as its cause)."""


def run(
    explainer: Explainer,
    request: Request,
    *,
    cache: TraceCache | None = None,
    results: TraceCache | None = None,
    stages: bool | None = None,
    layers="auto",
    compare: bool = True,
    lang: str | None = None,
) -> dict:
    """The export dict of `request` on `explainer`: `Explainer.explain`'s, with doc["ablation"],
    doc["patching"], doc["lens"] for the experiments asked.

    cache    a `TraceCache` of traces (the app's, an Explanation family's): traces it holds are read back
    results  a `TraceCache` of experiments' results (the app's): one asked before is read back
    stages, layers, compare, lang   what the dict carries (`Explainer.explain`); they change no number"""
    if not isinstance(explainer, Explainer):
        raise TypeError(f"explainer must be an Explainer, got {type(explainer).__name__}")
    if not isinstance(request, Request):
        raise TypeError(f"request must be a run.Request, got {type(request).__name__}")
    found: dict[str, Any] = {}
    if request.ablate is not None:
        asked: dict[str, Any] = {"ablate": list(request.ablate), "ablate_mode": request.ablate_mode or ABLATE_MODES[0]}
        found |= _kept(explainer, request, "ablation", asked, results)
    doc = explainer.explain(
        request.text,
        layer=request.layer,
        head=request.head,
        intervention=request.intervention,
        find=request.find,
        ablate=request.ablate,
        stages=stages,
        layers=layers,
        compare=compare,
        cache=cache,
        lang=lang,
    )
    if request.patch is not None:
        p = request.patch
        found |= _kept(
            explainer,
            request,
            "patching",
            {"patch": {"corrupted": p.corrupted, "target": p.target, "foil": p.foil}},
            results,
        )
    if request.lens is not None:
        asked = {"lens": {"position": request.lens.position}, "intervention": request.intervention, "cache": cache}
        found |= _kept(explainer, request, "lens", asked, results)
    return doc | found


def _kept(explainer: Explainer, request: Request, name: str, asked: dict, results: TraceCache | None) -> dict:
    """{name: result} of `experiments.run(**asked)` on the request's text (read from `results` when it holds
    the same one: the lens's with the same intervention); a refusal raised as an Experiment*Error."""

    def compute() -> dict:
        try:
            return experiments.run(explainer, request.text, **asked)[name]
        except ValueError as exc:
            raise ExperimentValueError(str(exc)) from exc
        except TypeError as exc:
            raise ExperimentTypeError(str(exc)) from exc

    if results is None:
        return {name: compute()}
    key = (name, request.text, repr(sorted((k, v) for k, v in asked.items() if k != "cache")))
    return {name: results.get(key, compute)}
