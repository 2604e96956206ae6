"""`selfattn bench --case hf`: a tiny Llama's forward pass with attn_implementation "selfattn" vs
"sdpa" vs "eager", in one run, as ratios (a benchmark, not a test).

    run_hf_case(length=2048) -> {"length": L, "seconds": {impl: s}, "ratio_to_sdpa": {impl: x}, ...}

The three models share one set of random weights; the calls are timed in interleaved rounds
(`timing.best_seconds_interleaved`), so a burst of other work on the machine hits all three alike.
Target: "selfattn" within 1.2× of "sdpa" at L = 2048.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import checks
from .timing import MIN_SECONDS, QUICK_MIN_SECONDS, best_seconds_interleaved

__all__ = ["run_hf_case", "IMPLEMENTATIONS", "TARGET_RATIO"]

IMPLEMENTATIONS = ("selfattn", "sdpa", "eager")
TARGET_RATIO = 1.2
"""selfattn's time over sdpa's that the target allows at L = 2048."""
LLAMA: dict[str, Any] = dict(
    vocab_size=1024,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=2,
    max_position_embeddings=4096,
)
"""A tiny Llama: attention is a large share of its forward pass at long L (GQA 8/2, D = 32)."""


def run_hf_case(length: int = 2048, *, quick: bool = False, device: str = "cpu", seed: int = 0) -> dict:
    """Time one forward pass (batch 1, `length` tokens) per implementation; ratios against sdpa."""
    checks.integer("length", length, low=1, high=LLAMA["max_position_embeddings"])
    import transformers

    from .. import hf

    hf.register()
    torch.manual_seed(seed)
    models: dict[str, transformers.LlamaForCausalLM] = {}
    for name in IMPLEMENTATIONS:  # one config each: set_attn_implementation writes into the config
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA)).eval().to(device)
        if models:  # the first model's random weights, shared by all three
            model.load_state_dict(next(iter(models.values())).state_dict())
        model.set_attn_implementation(name)
        models[name] = model
    ids = torch.randint(0, LLAMA["vocab_size"], (1, length), generator=torch.Generator().manual_seed(seed))
    ids = ids.to(device)

    def forward(model):
        def call():
            with torch.no_grad():
                return model(ids, use_cache=False).logits

        return call

    outs = {name: forward(m)() for name, m in models.items()}
    implementations = {name: m.config._attn_implementation for name, m in models.items()}
    if implementations != {name: name for name in IMPLEMENTATIONS}:
        raise RuntimeError(f"the models did not get their attention implementations: {implementations}")
    error = float((outs["selfattn"] - outs["eager"]).abs().max())
    timed = best_seconds_interleaved(
        {name: forward(m) for name, m in models.items()}, min_seconds=QUICK_MIN_SECONDS if quick else MIN_SECONDS
    )
    seconds = {name: s for name, (s, _) in timed.items()}
    ratios = {name: seconds[name] / seconds["sdpa"] for name in IMPLEMENTATIONS}
    return {
        "case": "hf",
        "model": "tiny Llama",
        "config": LLAMA,
        "length": length,
        "device": device,
        "seconds": seconds,
        "ratio_to_sdpa": ratios,
        "target_ratio": TARGET_RATIO,
        "met": ratios["selfattn"] <= TARGET_RATIO,
        "max_logit_error_vs_eager": error,
        "rounds": next(iter(timed.values()))[1],
    }
