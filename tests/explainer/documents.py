"""The export dict of one text on one explainer, as the page and the terminal tables read it: the pipeline's Explanation
(`pipeline.explain`) serialized by `views.export.document` through a `pipeline.Session`.

    doc = explained(explainer, "一只蓝色怪兽走进森林", layer=1, head=0, intervention=Intervention(...))
    e = explanation(explainer, "一只蓝色怪兽走进森林", layer=1, head=0)   # the Explanation itself (plots read it)
"""

from __future__ import annotations

import json

from selfattn.explainer.pipeline import Session, Spec
from selfattn.explainer.session import DEFAULT_TEXT
from selfattn.explainer.views import checkable


def explained(
    explainer,
    text: str = DEFAULT_TEXT,
    *,
    layer=None,
    head=None,
    intervention=None,
    find=None,
    ablate=None,
    stages=None,
    layers="auto",
    compare: bool = True,
    cache=None,
    lang=None,
    prepend_bos=None,
) -> dict:
    """The export dict of `text` on `explainer` (`views.export.document` of its Explanation)."""
    changed = {} if intervention is None else {"intervention": intervention}
    spec = Spec(text, layer=layer, head=head, find=find, ablate=ablate, prepend_bos=prepend_bos, **changed)
    session = Session(explainer, cache=cache)
    return session.document(session.explain(spec, compare=compare), stages=stages, layers=layers, lang=lang)


def explanation(explainer, text: str = DEFAULT_TEXT, **spec):
    """The `Explanation` of `text` on `explainer` (`pipeline.explain` through a Session). spec: the `pipeline.Spec`
    fields (layer, head, intervention, find, ablate, …)."""
    return Session(explainer).explain(Spec(text, **spec))


def checked(explainer, text: str = DEFAULT_TEXT, *, layers=None, **spec) -> dict:
    """What `selfattn explain --json` prints for `text` on `explainer` (`views.checkable.json_document`), read back
    as JSON. spec: the `pipeline.Spec` fields (layer, head, intervention, find, ablate, …)."""
    e = Session(explainer).explain(Spec(text, **spec))
    return json.loads(json.dumps(checkable.json_document(e, layers=layers), ensure_ascii=False, allow_nan=False))
