"""Explain a real model's attention: one pipeline → one typed result (an Explanation) → tables · plots · one HTML
file · a web app · a notebook.

    selfattn.explain("一只蓝色怪兽走进森林")   # a plain function, `explainer.api.explain` → an Explanation

pipeline.py  THE PIPELINE: a Spec (text, head, interventions, experiments) -> an Explanation (result.py); the CLI,
             the app and the Python API build a Spec and serialize the result
session.py   an Explainer (a model, its tokenizer, its card, its grammar as data); source/ where a model comes
             from and how it is built
tracing.py   the pipeline's forward passes (a text with its controls in one batch, the induction probe);
             `tracing.traced`, the one caller of the capture point
trace_types.py, stages.py, interventions.py   what a capture keeps, a head's stages, the interventions' registry
capture/     trace (the capture API), recorder, batching, digest, cache, patching, lens, attribution
analysis/    the numbers and their meaning, no formatting and no model module
views/       serializers of an Explanation: export (the page's document), checkable (--json, --npz), tables,
             plots, report (one HTML page), notebook, csv_table; web/ the app
docs/architecture.md draws the whole house.

The package is named `explainer`, not `explain`, so that `selfattn.explain` can be a plain function:
importing a submodule `selfattn.explain.x` would make the import system bind the package to the name
`selfattn.explain`, replacing the function.
"""
