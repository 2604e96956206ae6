"""Explain a real model's attention: trace capture → one export dict → tables · plots · one HTML file · a web app.

capture/   trace (the one capture point: `selfattn.attention` inside `selfattn.intercept`),
           interventions (the registry: name, params, labels, apply), cache (traces kept by the server)
views/     export (the one dict), tables, plots, heads, summary, relations, experiment, texts (zh/en),
           outputs and fileset (the files of `selfattn explain`, checked first and written as one set)
web/       server, body (the HTTP model, generated from the registry), guard
session.py an Explainer: a model and its tokenizer; sources.py: where a model comes from
"""
