"""The user's model is left as it was given: the hooks a capture puts on every submodule (to follow the running
modules) live for that capture only, removed after it, raised or not; two captures at once on one model each
record only their own run (`capture.recorder.stack_hooks`)."""

from __future__ import annotations

import threading

import pytest
import torch

import selfattn
from selfattn.explainer import tracing
from tests.hf import models

TEXT = "a blue monster walks into the forest"


def hooks_of(model: torch.nn.Module) -> list:
    """Every submodule's hook dicts, as (name, {dict name: {id: hook}})."""
    kinds = (
        "_forward_hooks",
        "_forward_pre_hooks",
        "_forward_hooks_with_kwargs",
        "_forward_pre_hooks_with_kwargs",
        "_forward_hooks_always_called",
    )
    return [(name, {k: dict(getattr(m, k)) for k in kinds}) for name, m in model.named_modules()]


@pytest.fixture
def loaded():
    model, tok = models.build("llama"), models.tokenizer()
    model.model.layers[1].register_forward_hook(lambda m, a, o: None)  # the user's own hook: kept
    return model, tok


def test_explain_leaves_the_models_hooks_as_given(loaded):
    model, tok = loaded
    before = hooks_of(model)
    e = selfattn.explain(TEXT, (model, tok))
    assert hooks_of(model) == before
    e.intervene(no_causal={}).run(lens=True)  # more captures: still none left
    assert hooks_of(model) == before
    n_user = len(model.model.layers[1]._forward_hooks)
    assert n_user == 1


def test_hooks_are_removed_when_a_capture_raises(loaded):
    model, tok = loaded
    e = selfattn.explain(TEXT, (model, tok))
    before = hooks_of(model)
    seen = []

    def fail(module, args):
        seen.append(len(module._forward_pre_hooks))  # ours are installed while it runs
        raise RuntimeError("stop in the middle of the forward pass")

    handle = model.model.layers[1].register_forward_pre_hook(fail)
    with pytest.raises(RuntimeError, match="stop in the middle"):
        tracing.trace(e.explainer, "the cat sleeps in the house")
    handle.remove()
    assert seen and seen[0] >= 2  # the failing hook, and the capture's own
    assert hooks_of(model) == before


def test_two_captures_at_once_record_only_their_own_run(loaded):
    model, tok = loaded
    explainer = selfattn.explain(TEXT, (model, tok)).explainer
    texts = [TEXT, "two red fish swim into the sea"]
    alone = [tracing.trace(explainer, t) for t in texts]
    meet = threading.Barrier(2, timeout=60)

    def wait(module, args):  # both forward passes are inside layer 0 at once, both captures' hooks installed
        meet.wait()

    handle = model.model.layers[0].register_forward_pre_hook(wait)
    got, errors = [None, None], []

    def work(i):
        try:
            got[i] = tracing.trace(explainer, texts[i])
        except Exception as exc:  # noqa: BLE001  reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    handle.remove()
    assert not errors, errors
    for solo, both in zip(alone, got, strict=True):
        assert len(both.layers) == len(solo.layers)
        for a, b in zip(solo.layers, both.layers, strict=True):
            for name in ("x", "q", "k", "v", "lse", "attn_out", "output"):
                assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert len(model.model.layers[0]._forward_pre_hooks) == 0
