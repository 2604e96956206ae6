"""The ablation scored like patching, against plain transformers: a tiny eager Llama whose heads are ablated by a
forward pre-hook on each layer's o_proj (the heads' outputs joined, (B, L, Hq·D): one head's slice set to zero or
to its mean), with no selfattn in the way. The logits at the last position, the logit difference target − foil
before and after, and the mean over a reference set of texts (each text run alone, its positions pooled) are
held equal to selfattn's ablation (`experiments.ablation`, `Explanation.run`)."""

import numpy as np
import pytest
import torch

import selfattn
from selfattn.explainer import api, experiments
from tests.tolerances import CLEARLY_APART, TOL

transformers = pytest.importorskip("transformers")

from ...hf import models  # noqa: E402 - needs transformers

TEXT = "a blue monster walks into the forest"
REFERENCE = ["the cat sleeps in the house", "two red fish swim into the sea", "a cat walks"]
TARGET, FOIL = "the", "forest"
HEADS = [(0, 1), (1, 2)]
D = 8  # head_dim of the tiny Llama (32 / 4)


@pytest.fixture(scope="module")
def tok():
    return models.tokenizer()


@pytest.fixture(scope="module")
def explainer(tok):
    return api.explainer_of((models.build("llama", "eager"), tok), None)


def joined_outputs(model, ids: list[int]) -> list[torch.Tensor]:
    """Per layer the o_proj input (L, Hq·D) of one plain run."""
    seen: list[torch.Tensor] = []
    hooks = [
        layer.self_attn.o_proj.register_forward_pre_hook(lambda m, args: seen.append(args[0][0].detach().clone()))
        for layer in model.model.layers
    ]
    with torch.no_grad():
        model(torch.tensor([ids]))
    for h in hooks:
        h.remove()
    return seen


def ablated_logits(model, ids: list[int], values: dict[tuple[int, int], torch.Tensor]) -> torch.Tensor:
    """The last position's logits with each head's slice of the o_proj input set to values[(layer, head)] (D,)."""

    def hook_for(layer: int):
        def hook(module, args):
            x = args[0].clone()
            for (l, h), v in values.items():
                if l == layer:
                    x[..., h * D : (h + 1) * D] = v.to(x.dtype)
            return (x,)

        return hook

    hooks = [
        layer.self_attn.o_proj.register_forward_pre_hook(hook_for(l)) for l, layer in enumerate(model.model.layers)
    ]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, -1]
    for h in hooks:
        h.remove()
    return logits.double()


def plain(tok, mode: str, reference: list[str] | None = None):
    """(before, after) last-position logits of the plain eager model, `HEADS` ablated."""
    model = models.build("llama", "eager")
    ids = tok(TEXT)["input_ids"]
    outs = joined_outputs(model, ids)
    if mode == "zero":
        values = {(l, h): torch.zeros(D) for l, h in HEADS}
    elif reference is None:
        values = {(l, h): outs[l][:, h * D : (h + 1) * D].double().mean(0) for l, h in HEADS}
    else:
        pooled = [joined_outputs(model, tok(r)["input_ids"]) for r in reference]  # each text alone
        values = {(l, h): torch.cat([p[l][:, h * D : (h + 1) * D] for p in pooled]).double().mean(0) for l, h in HEADS}
    before = ablated_logits(model, ids, {})
    return before, ablated_logits(model, ids, values)


def ld(logits: torch.Tensor, tok) -> float:
    t, f = tok.convert_tokens_to_ids([TARGET, FOIL])
    return float(logits[t] - logits[f])


@pytest.mark.parametrize(("mode", "reference"), [("zero", None), ("mean", None), ("mean", REFERENCE)])
def test_the_logit_difference_before_and_after_equals_plain_hooks(tok, explainer, mode, reference):
    before, after = plain(tok, mode, reference)
    got = experiments.ablation(explainer, TEXT, HEADS, mode, target=TARGET, foil=FOIL, reference=reference)
    d = got["logit_diff"]
    assert (d["target"]["token"], d["foil"]["token"]) == (TARGET, FOIL)
    assert d["before"] == pytest.approx(ld(before, tok), abs=TOL["float32_logits"])
    assert d["after"] == pytest.approx(ld(after, tok), abs=TOL["float32_logits"])
    assert abs(d["after"] - d["before"]) > CLEARLY_APART * TOL["float32_logits"]  # the ablation moves it
    p, q = before.log_softmax(-1), after.log_softmax(-1)
    kl = float((p.exp() * (p - q)).sum() / np.log(2))
    assert got["kl_bits"] == pytest.approx(kl, abs=TOL["float32_logits"])
    if reference is not None:
        n = sum(len(tok(r)["input_ids"]) for r in reference)
        assert got["reference"] == {"texts": len(reference), "positions": n}


def test_a_reference_set_is_not_the_texts_own_mean(tok, explainer):
    own = experiments.ablation(explainer, TEXT, HEADS, "mean", target=TARGET, foil=FOIL)
    pooled = experiments.ablation(explainer, TEXT, HEADS, "mean", target=TARGET, foil=FOIL, reference=REFERENCE)
    assert abs(own["logit_diff"]["after"] - pooled["logit_diff"]["after"]) > CLEARLY_APART * TOL["float32_logits"]


def test_the_api_and_its_words(tok, explainer):
    e = selfattn.explain(TEXT, model=explainer)
    got = e.run(ablate=HEADS, ablate_mode="mean", reference=REFERENCE, target=TARGET, foil=FOIL).doc["ablation"]
    want = experiments.ablation(explainer, TEXT, HEADS, "mean", target=TARGET, foil=FOIL, reference=REFERENCE)
    assert got == want
    assert f"{want['logit_diff']['after']:.3f}" in got["text"]["en"] and "3 reference texts" in got["text"]["en"]
    assert "logit 差" in got["text"]["zh"]
    assert "logit_diff" not in e.run(ablate=HEADS).doc["ablation"]  # asked for only with target and foil


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        ({"target": TARGET}, ValueError, "target and foil go together"),
        ({"target": TARGET, "foil": TARGET}, ValueError, "the same token 'the'"),
        ({"reference": REFERENCE}, ValueError, "goes with the mean ablation"),
        ({"reference": "a cat", "mode": "mean"}, TypeError, "reference must be a list of texts"),
        ({"reference": [], "mode": "mean"}, ValueError, "the reference set is empty"),
        ({"reference": ["a cat", 3], "mode": "mean"}, TypeError, r"reference\[1\] must be a text"),
    ],
)
def test_bad_arguments_are_named(explainer, kw, error, match):
    mode = kw.pop("mode", "zero")
    with pytest.raises(error, match=match):
        experiments.ablation(explainer, TEXT, HEADS, mode, **kw)
