"""Explain a real model's attention: trace capture → one export dict → tables · plots · one HTML file · a web app.

    selfattn.explain("一只蓝色怪兽走进森林")   # this package, called: `api.explain` → an Explanation

capture/   trace (the one capture point: `selfattn.attention` inside `selfattn.intercept`),
           interventions (the registry: name, params, labels, apply), cache (traces kept by the server)
views/     export (the one dict), tables, plots, heads, summary, relations, experiment, texts (zh/en),
           outputs and fileset (the files of `selfattn explain`, checked first and written as one set),
           report (one HTML page), notebook (inline display, head/model views of attention tensors)
web/       server, body (the HTTP model, generated from the registry), guard
session.py an Explainer: a model and its tokenizer; sources.py: where a model comes from
api.py     the Python API: explain(text, model) -> Explanation

Why the package itself is callable: `selfattn.explain(...)` must be the function of the design, while
`import selfattn.explain.session` keeps working. A plain function bound to the name `selfattn.explain`
cannot do both: importing any submodule makes the import system set the attribute `explain` of `selfattn`
to this package, replacing the function. So this module's class is a `types.ModuleType` subclass whose
`__call__` is `api.explain` (imported on the first call: importing the package stays free of torch);
`from selfattn.explain.api import explain` is the same function, for those who prefer it.
"""

import sys
import types


class _CallablePackage(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from .api import explain

        return explain(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
