"""Running a dataset of prompts: each prompt as a single run of it would, then every number's mean and interval.

    run_dataset(explainer, rows, what="explain", ablate=…, attribution=…, out=…) -> DatasetResult

what="explain": each prompt is `pipeline.explain` of its Spec (the path of `selfattn explain`): the heads' summaries
and types on the text, with `ablate` an ablation scored by the row's target and foil, with a corrupted text activation
patching (and `attribution`: attribution patching beside it); a prompt's per-head numbers are `csv_table.rows`' of its
Explanation. what="heads": each prompt is `experiments.taxonomy` of its text (the path of `selfattn heads TEXT`): every
head's score of each type on the text, and the types it is credited with.

What runs together: one model, one `pipeline.Session` (one trace cache) for the whole dataset, so the induction
probe runs once; each prompt's text runs in ONE batch with its control and contrast sentences (the pipeline's), and
patching runs its layers × heads patched prompts in batches (`capture.patching`). Prompts are not batched with each
other: a prompt's numbers are then bit for bit those of its single run, which a batch's padding and GEMM rounding
would not keep.

Each finished prompt is written to `out` at once (`store.ResultsFile`: atomic), and a rerun reads back the prompts it
holds. A prompt an experiment refuses (a corrupted text of another token length) is a ValueError naming its line.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from ... import checks
from ...terminal import progress_bar
from .. import experiments
from ..analysis import head_types
from ..induction_probe import PROBE_LENGTH
from ..pipeline import ABLATE_MODES, Patch, Session, Spec
from ..views import csv_table
from . import words
from .dataset_result import DatasetResult, HeadMeans, PromptResult
from .rows import PromptRow
from .stats import mean_ci
from .store import ResultsFile, fingerprint, prompt_key, run_key

__all__ = ["WHATS", "EXPLAIN_NUMBERS", "run_dataset", "heads_numbers"]

WHATS = ("explain", "heads")
EXPLAIN_NUMBERS = (
    "entropy",
    "max_weight",
    "first_token",
    "previous",
    "self",
    "patching_recovered",
    "attribution_recovered",
)
"""The per-head numbers of an explain run that are averaged (csv_table's columns)."""
SCALARS = (
    "ablation_kl_bits",
    "ablation_loss_before",
    "ablation_loss_after",
    "ablation_ld_before",
    "ablation_ld_after",
    "ablation_ld_change",
    "patching_clean_ld",
    "patching_corrupted_ld",
)
"""The per-prompt numbers of an explain run (None where the experiment did not run or had no target and foil)."""


def heads_numbers() -> tuple[str, ...]:
    """The per-head numbers of a heads run: each head type's score on the text (`head_types.names()` with one)."""
    return tuple(n for n in head_types.names() if n != "relation")


def run_dataset(
    explainer,
    rows: list[PromptRow],
    *,
    what: str = "explain",
    ablate=None,
    ablate_mode: str | None = None,
    reference=None,
    attribution: bool = False,
    prepend_bos: bool | None = None,
    probe_length: int = PROBE_LENGTH,
    seed: int = 0,
    out=None,
    force: bool = False,
    progress: bool = False,
    source: str = "rows",
) -> DatasetResult:
    """Run every prompt of `rows` (checked `rows.PromptRow`s) and average them (the module doc).

    what          "explain" or "heads"
    ablate        heads to ablate on every prompt ("L.H,L.H" or pairs), ablate_mode "zero" | "mean", reference: the
                  mean's texts (explain only); each row's target and foil score the ablation where given
    attribution   attribution patching beside exact patching (explain only; every row needs a corrupted text)
    probe_length, seed   the induction probe (heads only)
    out           the results file (`store`): resumed where it holds this run's prompts;  force  start it over
    progress      a rich progress bar on stderr"""
    if what not in WHATS:
        raise ValueError(f"what must be one of {', '.join(WHATS)}, got {what!r}")
    if not rows or not all(isinstance(r, PromptRow) for r in rows):
        raise TypeError("rows must be a non-empty list of PromptRow (`rows.read_rows` or `rows.check_rows`)")
    options = _options(
        explainer, rows, what, ablate, ablate_mode, reference, attribution, prepend_bos, probe_length, seed
    )
    model = fingerprint(explainer)
    run = run_key(what, model, options)
    keys = [prompt_key(r, run) for r in rows]
    store = None
    done: dict[int, dict] = {}
    if out is not None:
        store = ResultsFile(out, {"what": what, "model": model, "run": run, "options": options}, force=force)
        done = store.load(rows, keys)
    session = Session(explainer)
    one = _explain_prompt if what == "explain" else _heads_prompt
    results: list[PromptResult] = []
    with progress_bar(progress, "prompts") as bar:
        task = bar.add_task("prompts", total=len(rows), completed=len(done))
        for index, row in enumerate(rows):
            if index in done:
                results.append(PromptResult.from_dict(done[index], row, keys[index], resumed=True))
                continue
            try:
                heads, scalars = one(session, row, options)
            except ValueError as e:
                raise ValueError(f"{source}, {'row' if source == 'rows' else 'line'} {row.line}: {e}") from e
            fresh = PromptResult(index, row, keys[index], tuple(heads), scalars)
            record = json.loads(json.dumps(fresh.as_dict(), ensure_ascii=False, allow_nan=False))  # as read back
            if store is not None:
                store.append({"index": index, "line": row.line, "key": keys[index], "result": record})
            results.append(PromptResult.from_dict(record, row, keys[index], resumed=False))
            bar.advance(task)
    n_layers, n_heads = explainer.shape()
    numbers = EXPLAIN_NUMBERS if what == "explain" else heads_numbers()
    heads_means = _head_means(results, n_layers, n_heads, numbers, patched="patching_recovered" in numbers)
    scalars_means = (
        {name: mean_ci(p.scalars.get(name) for p in results) for name in SCALARS} if what == "explain" else {}
    )
    result = DatasetResult(
        what=what,
        source=source,
        model=explainer.name,
        options=options,
        n_layers=n_layers,
        n_heads=n_heads,
        numbers=numbers,
        prompts=tuple(results),
        heads=heads_means,
        scalars=scalars_means,
        text={},
        out=None if out is None else str(out),
    )
    return dataclasses.replace(result, text=words.sentences(result))


def _options(explainer, rows, what, ablate, ablate_mode, reference, attribution, prepend_bos, probe_length, seed):
    """The run's options, checked and JSON-ready (what the results file keys the run by)."""
    if prepend_bos is not None and not isinstance(prepend_bos, bool):
        raise TypeError(f"prepend_bos must be True, False or None, got {prepend_bos!r}")
    if what == "heads":
        if ablate is not None or ablate_mode is not None or reference is not None or attribution:
            raise ValueError("a heads run measures head types only: ablate, reference and attribution go with explain")
        checks.integer("probe_length", probe_length, low=2)
        checks.integer("seed", seed, low=0)
        return {"probe_length": probe_length, "seed": seed, "prepend_bos": prepend_bos}
    if not isinstance(attribution, bool):
        raise TypeError(f"attribution must be True or False, got {attribution!r}")
    if attribution and rows[0].corrupted is None:
        raise ValueError("attribution needs a corrupted text on every row (the field 'corrupted')")
    heads = None if ablate is None else [list(p) for p in experiments.pairs(ablate)]
    if heads is not None:  # the heads checked against the model before any prompt runs
        n_layers, n_heads = explainer.shape()
        bad = next(((l, h) for l, h in heads if not (l < n_layers and h < n_heads)), None)
        if bad is not None:
            raise ValueError(f"head {bad[0]}.{bad[1]} is not in the model ({n_layers} layers × {n_heads} heads)")
    if ablate_mode is not None and ablate_mode not in ABLATE_MODES:
        raise ValueError(f"ablate_mode must be one of {', '.join(ABLATE_MODES)}, got {ablate_mode!r}")
    refs = None if reference is None else list(reference)
    return {
        "ablate": heads,
        "ablate_mode": ablate_mode,
        "reference": refs,
        "attribution": attribution,
        "prepend_bos": prepend_bos,
    }


def spec_of(row: PromptRow, options: Mapping) -> Spec:
    """The explain Spec of one prompt: what `selfattn explain TEXT` with these flags builds (--ablate with the row's
    --target/--foil, --patch CORRUPTED with them, --attribution beside)."""
    ablate = options["ablate"]
    scored = ablate is not None and row.target is not None
    return Spec(
        row.text,
        ablate=None if ablate is None else tuple(tuple(p) for p in ablate),
        ablate_mode=options["ablate_mode"],
        ablate_target=row.target if scored else None,
        ablate_foil=row.foil if scored else None,
        reference=None if options["reference"] is None else tuple(options["reference"]),
        patch=None if row.corrupted is None else Patch(row.corrupted, target=row.target, foil=row.foil),
        prepend_bos=options["prepend_bos"],
        attribution=bool(options["attribution"]) and row.corrupted is not None,
    )


def _explain_prompt(session: Session, row: PromptRow, options: Mapping) -> tuple[list[dict], dict]:
    e = session.explain(spec_of(row, options))
    attribution = e.experiments.attribution  # run with the patching when the options ask (`spec_of`)
    words = ("kind", "types")  # text cells stay text; an empty number cell (not run) is None
    heads = [
        {k: (None if v == "" and k not in words else v) for k, v in r.items()} for r in csv_table.rows(e, attribution)
    ]
    ablation, patching = e.experiments.ablation, e.experiments.patching
    ld = None if ablation is None else ablation.get("logit_diff")
    scalars: dict[str, Any] = {
        "ablation_kl_bits": None if ablation is None else ablation["kl_bits"],
        "ablation_loss_before": None if ablation is None else ablation["before"]["loss"],
        "ablation_loss_after": None if ablation is None else ablation["after"]["loss"],
        "ablation_ld_before": None if ld is None else ld["before"],
        "ablation_ld_after": None if ld is None else ld["after"],
        "ablation_ld_change": None if ld is None else ld["after"] - ld["before"],
        "patching_clean_ld": None if patching is None else patching["clean_ld"],
        "patching_corrupted_ld": None if patching is None else patching["corrupted_ld"],
    }
    return heads, scalars


def _heads_prompt(session: Session, row: PromptRow, options: Mapping) -> tuple[list[dict], dict]:
    t = experiments.taxonomy(
        session.explainer,
        row.text,
        length=options["probe_length"],
        seed=options["seed"],
        cache=session.cache,
        prepend_bos=options["prepend_bos"],
    )
    out = []
    for layer, row_of in enumerate(t["heads"]):
        for head, h in enumerate(row_of):
            on_text = h.get("text") or {}
            scores = on_text.get("scores") or {}
            item: dict[str, Any] = {"layer": layer, "head": head, "type": h.get("type")}
            item["types"] = ";".join(str(x) for x in on_text.get("types", ()))
            item |= {name: (scores.get(name) or {}).get("score") for name in heads_numbers()}
            out.append(item)
    return out, {}


def _types(cell) -> list[str]:
    return [t for t in (cell or "").split(";") if t]


def _head_means(results: list[PromptResult], n_layers: int, n_heads: int, numbers, *, patched: bool):
    """One HeadMeans per head: each number's Mean over the prompts, each type's count, patching's top counts."""
    tops = [0] * (n_layers * n_heads)
    if patched:
        for p in results:
            ran = [h.get("patching_recovered") for h in p.heads]
            shares = [float(s) for s in ran if s is not None]
            if len(shares) == len(ran):
                tops[max(range(len(shares)), key=shares.__getitem__)] += 1
    out = []
    for k in range(n_layers * n_heads):
        cells = [p.heads[k] for p in results]
        holds: dict[str, int] = {}
        for c in cells:
            for t in _types(c.get("types")):
                holds[t] = holds.get(t, 0) + 1
        means = {name: mean_ci(c.get(name) for c in cells) for name in numbers}
        out.append(HeadMeans(k // n_heads, k % n_heads, means, dict(sorted(holds.items())), tops[k]))
    return tuple(out)
