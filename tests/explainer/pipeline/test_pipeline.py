"""The one pipeline (`pipeline.explain` → `result.Explanation`) and the serializers of its result.

- the text is cut once: the trace, the controls and the experiments read one tokenization of it;
- an ablation learns the model's shape from its modules, not from a forward pass;
- `--json` holds what the command prints plus the numbers to check it: every held layer's weights equal plain
  transformers eager attention (`output_attentions`, an independent computation), the shown head's stages are that
  head's; `--npz` holds every captured tensor of the layers asked;
- at the Qwen2.5-0.5B configuration and 32 tokens the JSON is under 2 MB, and the app answers an ablation on that
  model within its response limit.
"""

from __future__ import annotations

import dataclasses
import io
import json

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from selfattn.explainer import tracing
from selfattn.explainer.api import from_loaded
from selfattn.explainer.pipeline import Lens, Patch, Session, Spec
from selfattn.explainer.result import Explanation
from selfattn.explainer.session import Explainer
from selfattn.explainer.views import checkable, outputs
from tests.hf import models
from tests.tolerances import TOL

TEXT = "a blue monster walks into the forest"


@pytest.fixture(scope="module")
def llama():
    """(eager model, Explainer over the same weights switched to selfattn)."""
    eager = models.build("llama", attn="eager")
    explained = models.build("llama", attn="eager")
    return eager, from_loaded(explained, models.tokenizer())


def _eager_weights(model, ids: torch.Tensor) -> list[torch.Tensor]:
    with torch.no_grad():
        return [a[0].double() for a in model(ids[None], output_attentions=True).attentions]


def test_the_text_is_cut_once_and_the_experiments_read_that_cut(llama):
    _, ex = llama
    seen = []

    class Counting:  # the explainer's tokenizer, each text it cuts written down
        def __init__(self, inner):
            self.inner, self.kind = inner, inner.kind

        def segment(self, text):
            seen.append(text)
            return self.inner.segment(text)

        def decode(self, i):
            return self.inner.decode(i)

        def shown(self, i):
            return self.inner.shown(i)

        def complete(self, context, ids):
            return self.inner.complete(context, ids)

    counted = dataclasses.replace(ex, tokenizer=Counting(ex.tokenizer))
    e = Session(counted).explain(
        Spec(TEXT, ablate=((1, 0),), patch=Patch(TEXT.replace("blue", "red"), target=5, foil=6), lens=Lens())
    )
    assert isinstance(e, Explanation) and None not in (e.experiments.ablation, e.experiments.patching)
    assert seen.count(TEXT) == 1, seen  # the controls and the corrupted text are other texts; the text itself once


def test_an_ablation_learns_the_shape_without_a_forward_pass(llama, monkeypatch):
    _, ex = llama
    assert ex.shape() == (2, 4)
    calls = []
    forward = type(ex.model).forward

    def counted(self, *args, **kwargs):
        calls.append(args[0].shape if args else kwargs.get("input_ids").shape)
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(type(ex.model), "forward", counted)
    from selfattn.explainer import experiments

    experiments.ablation(ex, TEXT, [(1, 0)])
    # the ablation's own runs (before, after; with the text's ids), never a one-token run to learn the shape
    n = len(ex.cut(TEXT)[1])
    assert calls and all(shape[-1] == n for shape in calls), calls


def test_json_holds_the_held_layers_weights_as_eager_attention_gives_them(llama):
    eager, ex = llama
    e = Session(ex).explain(Spec(TEXT, layer=1, head=2))
    want = _eager_weights(eager, e.tokens.ids)
    doc = json.loads(json.dumps(checkable.json_document(e, layers=[0, 1]), allow_nan=False))
    assert doc["schema"] == checkable.JSON_SCHEMA and [layer["held"] for layer in doc["layers"]] == [True, True]
    for l in (0, 1):
        got = torch.tensor(doc["layers"][l]["weights"], dtype=torch.float64)
        torch.testing.assert_close(got, want[l], atol=TOL["json_weights"], rtol=0)
    stages = doc["stages"]
    assert (stages["layer"], stages["head"]) == (1, 2)
    torch.testing.assert_close(
        torch.tensor(stages["weights"], dtype=torch.float64), want[1][2], atol=TOL["json_weights"], rtol=0
    )
    only_shown = checkable.json_document(e)
    assert [layer["held"] for layer in only_shown["layers"]] == [False, True]
    assert "weights" not in only_shown["layers"][0] and "display" not in only_shown
    assert len(only_shown["descriptions"]) == 2 and all(len(row) == 4 for row in only_shown["descriptions"])


def test_npz_holds_every_tensor_of_the_layers_asked(llama, tmp_path):
    eager, ex = llama
    e = Session(ex).explain(Spec(TEXT))
    want = _eager_weights(eager, e.tokens.ids)
    data = outputs.arrays_bytes(checkable.npz_arrays(e, layers=[1]))
    with np.load(io.BytesIO(data)) as z:
        names = set(z.files)
        assert "layer0/x" not in names and list(z["layers"]) == [1]
        L = len(e.tokens)
        assert z["layer1/x"].shape == (L, 32) and z["layer1/visible"].shape == (L, L)
        for h in range(4):
            for name, shape in (("q", (L, 8)), ("k", (L, 8)), ("v", (L, 8)), ("lse", (L,))):
                assert z[f"layer1/head{h}/{name}"].shape == shape
        np.testing.assert_allclose(z["layer1/weights"], want[1].numpy(), atol=TOL["json_weights"], rtol=0)
    every = checkable.npz_arrays(e)
    assert {"layer0/weights", "layer1/weights"} <= set(every)


@pytest.mark.slow
def test_json_of_the_qwen_05b_configuration_at_32_tokens_is_under_2_mb_and_the_app_answers_an_ablation():
    from selfattn.bench.explain_case import QWEN_05B, _model, _tokenizer_and_text
    from selfattn.explainer.web import server

    model = _model(QWEN_05B, "selfattn")
    tok, text = _tokenizer_and_text(32)
    ex = Explainer.from_transformers(model, tok, name="Qwen2.5-0.5B configuration")
    e = Session(ex).explain(Spec(text))
    size = len(json.dumps(checkable.json_document(e), ensure_ascii=False, allow_nan=False).encode("utf-8"))
    assert size < 2_000_000, size
    client = TestClient(server.create_app(ex))
    r = client.post("/api/explain", json={"text": text, "ablate": [[3, 1]]})
    assert r.status_code == 200, r.text[:300]
    answer = r.json()
    assert answer["ablation"]["heads"] == [[3, 1]] and len(r.content) < server.MAX_RESPONSE_BYTES


@pytest.mark.parametrize("held", [0, 1])
def test_a_page_of_some_layers_opens_on_a_layer_it_holds(held, tiny_checkpoint, capsys):
    """--layers L without --layer: the head shown first is picked among the layers the page holds, so the page never
    opens on a layer it does not hold (it threw on load); the JSON and the page say the same head."""
    from selfattn.cli import main

    assert (
        main(["explain", "一只蓝色怪兽走进森林", "--model", str(tiny_checkpoint), "--layers", str(held), "--json"]) == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["selected"]["layer"] == held and doc["layers"][held]["held"]
    assert [layer["held"] for layer in doc["layers"]] == [l == held for l in range(2)]
    e = Session(Explainer.load(tiny_checkpoint)).explain(Spec("一只蓝色怪兽走进森林", among=(held,)))
    assert e.shown.layer == held and e.doc["layers"][held].get("omitted") is None


def test_layers_out_of_the_model_are_refused_by_name(llama):
    _, ex = llama
    with pytest.raises(ValueError, match=r"layers must hold indices in \[0, 1\], got \[5\]"):
        Session(ex).explain(Spec(TEXT, among=(5,)))
    with pytest.raises(ValueError, match="a layer index must be >= 0"):
        Spec(TEXT, among=(-1,))


def test_a_text_and_its_controls_are_one_forward_pass(llama, monkeypatch):
    """The text runs in ONE batch with its control and contrast sentences (the text first): no pass of the text
    alone; its baseline without an intervention is that batch's too, so compare reads like with like."""
    _, ex = llama
    text = "一只蓝色怪兽走进森林"
    cut = ex.cut(text)
    others = tracing.control_texts(ex, cut[3])
    assert others, "the text has control sentences"
    ids = cut[1].reshape(-1)
    calls = []
    forward = type(ex.model).forward

    def counted(self, *args, **kwargs):
        x = args[0] if args else kwargs.get("input_ids")
        calls.append(x.reshape(-1, x.shape[-1]))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(type(ex.model), "forward", counted)
    e = Session(ex).explain(Spec(text))
    with_text = [x for x in calls if any(row[: len(ids)].equal(ids) for row in x)]
    assert len(with_text) == 1 and with_text[0].shape[0] == 1 + len(others), [tuple(x.shape) for x in calls]
    assert e.trace.token_ids.equal(ids) and len(e.trace.layers) == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_shown_row_sums_to_one_and_no_weight_exceeds_one(dtype):
    """A shown row is the float64 softmax of its recomputed scores, whatever precision the model ran in: each row
    sums to 1 to float64's rounding and no weight is above 1 (a bfloat16 kernel's own lse would make a row read
    100.01 %)."""
    model = models.build("llama", attn="eager").to(dtype)
    e = Session(from_loaded(model, models.tokenizer())).explain(Spec(TEXT))
    for layer in range(e.card.n_layers):
        for head in range(e.card.n_heads):
            w = e.weights(layer, head)
            assert w.dtype == torch.float64
            assert float((w.sum(-1) - 1).abs().max()) <= TOL["float64_few_ops"], (layer, head)
            assert float(w.max()) <= 1.0
