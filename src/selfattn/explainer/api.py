"""The Python API of the explainer: `selfattn.explain(text, model=None, **options) -> Explanation`.

    e = selfattn.explain("一只蓝色怪兽走进森林")            # the bundled default model (offline)
    e                                                      # in a notebook: the whole page, inline
    e.heads()[:3]; e.table(1, 0); e.weights(1, 0)          # every head's summary; one head's weights
    e.find("森林", "走进")                                  # every head ranked by that (query, key) weight
    e.intervene(no_causal={})                              # the same text, the model changed: a new Explanation
    e.compare("一只红色怪兽走进森林")                        # two texts side by side (the compare view)
    e.run(ablate=[(1, 0)], patch="一只红色怪兽走进森林", lens=True)  # the experiments, drawn on the page too
    e.run(ablate="1.0", ablate_mode="mean", reference=[...], target=" Mary", foil=" John")  # scored like patching
    e.show("head", layer=1); e.save_html("page.html"); e.to_json()

`model`: None (the bundled default), a folder, a hub id, a GGUF file (whatever `Explainer.load` reads), or a
transformers model already loaded with its tokenizer: `model=(hf_model, tokenizer)` or `model=hf_model,
tokenizer=tok`. A loaded model is switched to the "selfattn" attention implementation (`selfattn.hf`) and
left so: that implementation computes what eager/SDPA attention computes (tests/hf check it), every later
`intervene` / `compare` needs it, and switching it back and forth would change a live module under the
caller's feet. `model.set_attn_implementation("sdpa")` switches it back.

Every Explanation (`result.Explanation`) answers one `pipeline.Spec` through `pipeline.explain`, the path of
`selfattn explain` and of the app: the same Spec gives the same Explanation and page document. Every number comes
from one trace per (text, intervention), kept by the `pipeline.Session` an Explanation and those made from it share.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import torch

from .dataset.dataset_result import DatasetResult
from .induction_probe import PROBE_LENGTH
from .pipeline import Session, Spec, intervention_of
from .result import Explanation, HeadTable
from .session import DEFAULT_TEXT, Explainer, dtype_name

__all__ = [
    "explain",
    "explain_dataset",
    "heads_dataset",
    "Explanation",
    "DatasetResult",
    "HeadTable",
    "ModelSource",
    "DatasetSource",
]

ModelSource = str | os.PathLike[str] | torch.nn.Module | Explainer | tuple[Any, Any] | None
"""What `explain` reads a model from: None (the bundled default), a folder, hub id or GGUF file, a loaded
transformers model (with tokenizer=), (model, tokenizer), or an Explainer."""


def explain(
    text: str = DEFAULT_TEXT,
    model: ModelSource = None,
    *,
    tokenizer: Any = None,
    layer: int | None = None,
    head: int | None = None,
    find: tuple[str, str] | None = None,
    layers: Literal["auto"] | Sequence[int] = "auto",
    dtype: str | torch.dtype | None = None,
    user_words: Sequence[str] | Mapping[str, str | None] | None = None,
    prepend_bos: bool | None = None,
    **interventions: Mapping[str, Any],
) -> Explanation:
    """Explain `text` on `model`: an `Explanation` (shown inline in a notebook).

    layer, head      the head shown first (default: the pipeline's rule: the head an intervention is limited to, else
                     picked by `analysis.heads.pick`)
    find             (query, key): `Explanation.search` ranks every head by that weight (as `selfattn explain --find`)
    layers           the layers whose arrays the doc and its page hold in full, e.g. [3, 18] (as `--layers`;
                     default "auto": every layer a page can hold, the shown one and its neighbours first)
    dtype            what a model read from a path is loaded in: "bfloat16", "float16" or "float32" (default), or
                     that torch.dtype (`--dtype`); a loaded model keeps its own (a different dtype is refused)
    user_words       words the part-of-speech tagger keeps whole, a list or {word: role} (a role of
                     `analysis.roles.ROLES` wins over the tagger's tag): the tutorial's relations read these words
    prepend_bos      the model's BOS before the text, as TransformerLens' `to_tokens` (`Explainer.bos`; the card's
                     "bos" says what was done): None (default) = where the model has a BOS token, True, False
    interventions    registry entries by name, e.g. no_causal={}, temperature={"t": 2.0}, block={"query": 4,
                     "key": 3}; `scope={"layer": L, "head": H}` limits them to one layer / head"""
    explainer = explainer_of(model, tokenizer, dtype)
    if user_words is not None:
        explainer = explainer.with_words(user_words)
    among = tuple(layers) if isinstance(layers, (list, tuple)) and layers else None  # a page opens on one it holds
    spec = Spec(
        text,
        layer=layer,
        head=head,
        intervention=intervention_of(interventions),
        find=find,
        among=among,
        prepend_bos=prepend_bos,
    )
    return Session(explainer, layers=layers).explain(spec)


DatasetSource = str | os.PathLike[str] | Sequence[Mapping[str, Any]]
"""A dataset of prompts: a .jsonl or .csv file, or rows [{"text": …, "corrupted": …, "target": …, "foil": …}]."""


def explain_dataset(
    dataset: DatasetSource,
    model: ModelSource = None,
    *,
    tokenizer: Any = None,
    dtype: str | torch.dtype | None = None,
    ablate: str | Sequence[tuple[int, int]] | None = None,
    ablate_mode: str | None = None,
    reference: Sequence[str] | None = None,
    attribution: bool = False,
    prepend_bos: bool | None = None,
    out: str | os.PathLike[str] | None = None,
    force: bool = False,
    progress: bool = False,
) -> DatasetResult:
    """Explain every prompt of `dataset` on `model` and average: a `DatasetResult` (docs/dataset.md).

    Each prompt is what `selfattn.explain(text).run(...)` gives on it alone (the same Spec through the same pipeline):
    every head's summary numbers and types; with `ablate` (heads, "L.H,L.H" or pairs; `ablate_mode`, `reference` as
    `Explanation.run`) the ablation, scored by the row's target and foil where it has them; with a row's corrupted
    text activation patching (target and foil: the row's, default the top predictions); with `attribution`
    attribution patching beside it. Then each number's mean over the prompts with its 95 % Student's t-interval, and
    on how many prompts each head holds each type.

    out       a results file (JSONL): each prompt written as it finishes (atomically); a rerun with the same file,
              dataset, model and options reads back the prompts done and runs the rest; another run's file, a changed
              prompt or a file that is not a results file is a ValueError (`force=True` starts it over)
    progress  a progress bar on stderr"""
    from .dataset.running import run_dataset

    rows, source = _dataset_rows(dataset, out)
    explainer = explainer_of(model, tokenizer, dtype)
    return run_dataset(
        explainer,
        rows,
        what="explain",
        ablate=ablate,
        ablate_mode=ablate_mode,
        reference=reference,
        attribution=attribution,
        prepend_bos=prepend_bos,
        out=out,
        force=force,
        progress=progress,
        source=source,
    )


def heads_dataset(
    dataset: DatasetSource,
    model: ModelSource = None,
    *,
    tokenizer: Any = None,
    dtype: str | torch.dtype | None = None,
    probe_length: int = PROBE_LENGTH,
    seed: int = 0,
    prepend_bos: bool | None = None,
    out: str | os.PathLike[str] | None = None,
    force: bool = False,
    progress: bool = False,
) -> DatasetResult:
    """Every head's type scores on every prompt of `dataset` (what `selfattn heads TEXT` measures on each text alone,
    with the induction probe of `probe_length` and `seed`, run once), their means with 95 % Student's t-intervals,
    and on how many prompts each head is credited with each type. `out`, `force`, `progress`: as `explain_dataset`."""
    from .dataset.running import run_dataset

    rows, source = _dataset_rows(dataset, out)
    explainer = explainer_of(model, tokenizer, dtype)
    return run_dataset(
        explainer,
        rows,
        what="heads",
        probe_length=probe_length,
        seed=seed,
        prepend_bos=prepend_bos,
        out=out,
        force=force,
        progress=progress,
        source=source,
    )


def _dataset_rows(dataset, out) -> tuple[list, str]:
    """(checked PromptRows, the name errors give) of a dataset file or rows; a results file `out` that is the dataset
    file is refused."""
    from .dataset.rows import check_rows, read_rows
    from .dataset.store import check_apart

    if isinstance(dataset, (str, os.PathLike)):
        check_apart(dataset, out=out)
        return read_rows(dataset), str(dataset)
    return check_rows(dataset, "rows"), "rows"


def explainer_of(model, tokenizer, dtype=None) -> Explainer:
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
