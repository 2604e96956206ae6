"""Explain a real model's attention: trace capture → one export dict → tables · plots · one HTML file · a web app.

    selfattn.explain("一只蓝色怪兽走进森林")   # a plain function, `explainer.api.explain` → an Explanation

run.py     the one run path: a Request (text, head, interventions, experiments) -> the export dict; the CLI,
           the app and the Python API call it and never change its result
capture/   trace (the one capture point: `selfattn.attention` inside `selfattn.intercept`),
           interventions (the registry: name, params, labels, apply), cache (traces kept by the server)
analysis/  the numbers and their meaning, no formatting: head_types, taxonomy, summary, relations, heads,
           experiment (the compare numbers, the head shown first)
views/     formatting only: export (the one dict), tables, plots, heads (a head's words), texts (zh/en),
           outputs and fileset (the files of `selfattn explain`, checked first and written as one set),
           report (one HTML page), notebook (inline display, head/model views of attention tensors)
web/       server, body (the HTTP model, generated from the registry), guard
session.py an Explainer: a model and its tokenizer; sources.py: where a model comes from
api.py     the Python API: explain(text, model) -> Explanation

The package is named `explainer`, not `explain`, so that `selfattn.explain` can be a plain function:
importing a submodule `selfattn.explain.x` would make the import system bind the package to the name
`selfattn.explain`, replacing the function.
"""
