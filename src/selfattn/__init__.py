"""selfattn: scaled dot-product self-attention, exact, fast and explainable.

    import selfattn
    out = selfattn.attention(q, k, v, causal=True)          # (B, H, L, D)
    trace = selfattn.reference.self_attention(x, wq, wk, wv) # every step, float64
    e = selfattn.explain("一只蓝色怪兽走进森林")              # an Explanation: inline in a notebook
    r = selfattn.explain_dataset("prompts.jsonl", model)     # every prompt, and each number's mean with its CI
    selfattn.compat.flash_attn_func(q, k, v, causal=True)     # other libraries' calls, their semantics

`import selfattn` imports neither NumPy nor torch: each name below loads its module on first use
(`selfattn.reference` needs only NumPy), so `selfattn walkthrough` starts without torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names below load on first use (`__getattr__`); a type checker sees them here
    from . import compat
    from .explainer.api import DatasetResult, Explanation, explain, explain_dataset, heads_dataset
    from .explainer.capture.named_hooks import run_with_hooks
    from .explainer.detect import detect_head
    from .explainer.views.notebook import head_view, model_view
    from .functional import AttentionOutput, attention, intercept, use_backend
    from .modules import KVCache, MultiHeadSelfAttention, SelfAttention
    from .weights import attention_weights, weights_from_lse

__version__ = "0.1.0"
"""The package's version (PEP 440), read by the exports (--json's selfattn_version) and the wheel's metadata."""

_LAZY: dict[str, tuple[str, str | None]] = {
    "attention": ("selfattn.functional", "attention"),
    "AttentionOutput": ("selfattn.functional", "AttentionOutput"),
    "intercept": ("selfattn.functional", "intercept"),
    "use_backend": ("selfattn.functional", "use_backend"),
    "attention_weights": ("selfattn.weights", "attention_weights"),
    "weights_from_lse": ("selfattn.weights", "weights_from_lse"),
    "SelfAttention": ("selfattn.modules", "SelfAttention"),
    "MultiHeadSelfAttention": ("selfattn.modules", "MultiHeadSelfAttention"),
    "KVCache": ("selfattn.modules", "KVCache"),
    "explain": ("selfattn.explainer.api", "explain"),  # a plain function: selfattn.explain(text, model) -> Explanation
    "Explanation": ("selfattn.explainer.api", "Explanation"),
    "explain_dataset": ("selfattn.explainer.api", "explain_dataset"),  # every prompt of a dataset, and the means
    "heads_dataset": ("selfattn.explainer.api", "heads_dataset"),
    "DatasetResult": ("selfattn.explainer.api", "DatasetResult"),
    "run_with_hooks": ("selfattn.explainer.capture.named_hooks", "run_with_hooks"),  # one call with named hooks
    "head_view": ("selfattn.explainer.views.notebook", "head_view"),
    "model_view": ("selfattn.explainer.views.notebook", "model_view"),
    "detect_head": ("selfattn.explainer.detect", "detect_head"),  # TransformerLens' head detector
    "compat": ("selfattn.compat", None),  # a module: FlashAttention's, SDPA's and xFormers' calls (docs/compat.md)
}
"""Each public name: (the module it lives in, its name there; None: the module itself)."""

__all__ = [
    "__version__",
    "attention",
    "AttentionOutput",
    "intercept",
    "use_backend",
    "attention_weights",
    "weights_from_lse",
    "SelfAttention",
    "MultiHeadSelfAttention",
    "KVCache",
    "explain",
    "Explanation",
    "explain_dataset",
    "heads_dataset",
    "DatasetResult",
    "run_with_hooks",
    "head_view",
    "model_view",
    "detect_head",
    "compat",
]


def __getattr__(name: str) -> object:
    if name in _LAZY:
        module, attr = _LAZY[name]
        if module.startswith("selfattn.explainer."):  # the explainer's names: the extra named for the name asked
            from .extras import require

            require("explain", f"selfattn.{name}")
        loaded = importlib.import_module(module)
        value = loaded if attr is None else getattr(loaded, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'selfattn' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
