"""The page's document of one text on one explainer, as the page and the app read it: the pipeline's Explanation
(`pipeline.explain`) serialized by `views.export.document` through a `pipeline.Session`.

    doc = explained(explainer, "一只蓝色怪兽走进森林", layer=1, head=0, intervention=Intervention(...))
    e, doc = both(explainer, "一只蓝色怪兽走进森林", layer=1, head=0)     # the Explanation and its document
    e = explanation(explainer, "一只蓝色怪兽走进森林", layer=1, head=0)   # the Explanation itself (plots read it)
    w = weights(e, layer, head)          # (L, L) float64 weights of one head, from the captured q, k and rule
    valid(doc)                           # doc, if it follows the page's schema (`views.schema.Doc`, by pydantic)
"""

from __future__ import annotations

import functools
import json

from selfattn.explainer.pipeline import Session, Spec
from selfattn.explainer.session import DEFAULT_TEXT
from selfattn.explainer.views import checkable


def explained(explainer, text: str = DEFAULT_TEXT, **asked) -> dict:
    """The page's document of `text` on `explainer` (`views.export.document` of its Explanation); `asked`: what
    `both` takes."""
    return both(explainer, text, **asked)[1]


def both(
    explainer,
    text: str = DEFAULT_TEXT,
    *,
    layer=None,
    head=None,
    intervention=None,
    find=None,
    ablate=None,
    layers="auto",
    compare: bool = True,
    cache=None,
    lang=None,
    prepend_bos=None,
):
    """(the Explanation of `text` on `explainer`, its page's document)."""
    changed = {} if intervention is None else {"intervention": intervention}
    spec = Spec(text, layer=layer, head=head, find=find, ablate=ablate, prepend_bos=prepend_bos, **changed)
    session = Session(explainer, cache=cache)
    e = session.explain(spec, compare=compare)
    return e, session.document(e, layers=layers, lang=lang)


def weights(e, layer: int, head: int):
    """(L, L) float64 weights of one head of the Explanation `e`, from its captured q, k and rule (the head's own
    when an intervention changed it apart): `LayerTrace.stages`."""
    return e.trace.layers[layer].stages(head, weighted=False)["weights"].numpy()


def explanation(explainer, text: str = DEFAULT_TEXT, **spec):
    """The `Explanation` of `text` on `explainer` (`pipeline.explain` through a Session). spec: the `pipeline.Spec`
    fields (layer, head, intervention, find, ablate, …)."""
    return Session(explainer).explain(Spec(text, **spec))


def checked(explainer, text: str = DEFAULT_TEXT, *, layers=None, **spec) -> dict:
    """What `selfattn explain --json` prints for `text` on `explainer` (`views.checkable.json_document`), read back
    as JSON. spec: the `pipeline.Spec` fields (layer, head, intervention, find, ablate, …)."""
    e = Session(explainer).explain(Spec(text, **spec))
    return json.loads(json.dumps(checkable.json_document(e, layers=layers), ensure_ascii=False, allow_nan=False))


@functools.cache
def _doc_adapter():
    from pydantic import TypeAdapter

    from selfattn.explainer.views.schema import Doc

    return TypeAdapter(Doc)


def valid(doc: dict) -> dict:
    """`doc` if it follows the page's schema (`views.schema.Doc`: every key named, each value of its type, strictly:
    no key a TypedDict does not name, no str for an int, no bool for a number); else pydantic's ValidationError,
    which names each field that does not."""
    return _doc_adapter().validate_python(doc, strict=True)
