"""`run_with_hooks` (`capture.named_hooks`, `Explanation.run_with_hooks`): a function on a named activation reads
what `Explanation.cache` holds under that name, and its replacement changes the logits as the same change made by
plain transformers hooks on an eager copy of the weights does (a head's slice of o_proj's input, the values
weighted by a replaced pattern, a block's output); nothing stays on the model, raised or not."""

from __future__ import annotations

import pytest
import torch

import selfattn
from tests.hf import models
from tests.tolerances import TOL

TEXT = "a blue monster walks into the forest"
CLOSE = TOL["float32_hf_stages"]


@pytest.fixture(scope="module")
def explained():
    return selfattn.explain(TEXT, (models.build("llama", seed=0), models.tokenizer()))


def _eager(ids, hooks) -> torch.Tensor:
    """Logits of an eager copy with plain hooks [(module path, kind, fn)] installed for one call."""
    model = models.build("llama", attn="eager", seed=0)
    handles = []
    for path, kind, fn in hooks:
        module = model.get_submodule(path)
        handles.append(module.register_forward_pre_hook(fn) if kind == "pre" else module.register_forward_hook(fn))
    try:
        with torch.no_grad():
            return model(ids[None], use_cache=False).logits
    finally:
        for h in handles:
            h.remove()


def test_reading_hooks_see_the_cache_and_change_nothing(explained):
    e = explained
    seen = {}
    names = ["blocks.0.attn.hook_q", "blocks.1.attn.hook_k", "blocks.1.attn.hook_v", "blocks.0.attn.hook_z"]
    names += ["blocks.1.attn.hook_pattern", "blocks.0.hook_resid_post"]
    logits = e.run_with_hooks(fwd_hooks=[(n, lambda t, name: seen.__setitem__(name, t.clone())) for n in names])
    plain = _eager(e.tokens.ids, [])
    assert torch.allclose(logits, plain, atol=CLOSE)
    for n in names:
        assert seen[n].shape == e.cache[n].shape, n
        assert torch.allclose(seen[n].double(), e.cache[n].double(), atol=CLOSE), n


def test_zeroing_one_heads_z_is_zeroing_its_slice_of_o_proj(explained):
    e = explained
    D = 8

    def zero_head_1(t, name):
        t = t.clone()
        t[:, 1] = 0
        return t

    def plain(m, args):
        x = args[0].clone()
        x[..., D : 2 * D] = 0
        return (x,)

    got = e.run_with_hooks(fwd_hooks=[(("z", 0), zero_head_1)])
    want = _eager(e.tokens.ids, [("model.layers.0.self_attn.o_proj", "pre", plain)])
    assert torch.allclose(got, want, atol=CLOSE)
    assert (got - _eager(e.tokens.ids, [])).abs().max() > TOL["must_differ"]


def test_a_replaced_pattern_weights_the_values(explained):
    e = explained
    L = len(e.tokens)
    uniform = torch.tril(torch.ones(L, L)) / torch.arange(1, L + 1)[:, None]  # (L, L) causal, uniform
    got = e.run_with_hooks(fwd_hooks=[(("pattern", 1), lambda t, name: uniform.expand_as(t).to(t.dtype))])
    values = {}

    def keep_v(m, a, o):
        values["v"] = o[0].reshape(L, 2, 8)  # (L, Hkv, D)

    def joined(m, args):
        v = values["v"].transpose(0, 1).repeat_interleave(2, dim=0)  # (H, L, D): query head h reads h // 2
        z = uniform.to(v.dtype) @ v  # (H, L, D)
        return (z.transpose(0, 1).reshape(1, L, -1),)

    want = _eager(
        e.tokens.ids,
        [("model.layers.1.self_attn.v_proj", "post", keep_v), ("model.layers.1.self_attn.o_proj", "pre", joined)],
    )
    assert torch.allclose(got, want, atol=CLOSE)


def test_a_replaced_residual_is_the_blocks_output(explained):
    e = explained
    push = torch.zeros(len(e.tokens), 32)
    push[2] = 3.0
    got = e.run_with_hooks(fwd_hooks=[("blocks.0.hook_resid_post", lambda t, name: t + push)])

    def plain(m, a, o):
        return (o[0] + push, *o[1:]) if isinstance(o, tuple) else o + push

    want = _eager(e.tokens.ids, [("model.layers.0", "post", plain)])
    assert torch.allclose(got, want, atol=CLOSE)


def test_nothing_stays_when_a_hook_raises_and_bad_hooks_are_refused(explained):
    e = explained
    model = e.explainer.model
    before = [(n, dict(m._forward_hooks), dict(m._forward_pre_hooks)) for n, m in model.named_modules()]
    clean = e.run_with_hooks(fwd_hooks=[])

    def fail(t, name):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        e.run_with_hooks(fwd_hooks=[("blocks.1.hook_resid_post", fail), ("blocks.0.attn.hook_z", lambda t, n: t * 0)])
    assert [(n, dict(m._forward_hooks), dict(m._forward_pre_hooks)) for n, m in model.named_modules()] == before
    assert torch.equal(e.run_with_hooks(fwd_hooks=[]), clean)
    with pytest.raises(ValueError, match="cannot hook 'blocks.0.attn.hook_attn_scores'"):
        e.run_with_hooks(fwd_hooks=[("blocks.0.attn.hook_attn_scores", fail)])
    with pytest.raises(ValueError, match=r"layer must be in \[0, 1\], got 5"):
        e.run_with_hooks(fwd_hooks=[(("z", 5), fail)])
    with pytest.raises(ValueError, match=r"returned \(3,\), not a tensor of shape"):
        e.run_with_hooks(fwd_hooks=[(("z", 0), lambda t, n: torch.zeros(3))])
