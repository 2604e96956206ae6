"""selfattn: scaled dot-product self-attention, exact, fast and explainable.

    import selfattn
    out = selfattn.attention(q, k, v, causal=True)          # (B, H, L, D)
    trace = selfattn.reference.self_attention(x, wq, wk, wv) # every step, float64
    e = selfattn.explain("一只蓝色怪兽走进森林")              # an Explanation: inline in a notebook

`import selfattn` imports neither NumPy nor torch: each name below loads its module on first use
(`selfattn.reference` needs only NumPy), so `selfattn walkthrough` starts without torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names below load on first use (`__getattr__`); a type checker sees them here
    from .explainer.api import Explanation, explain
    from .explainer.detect import detect_head
    from .explainer.views.notebook import head_view, model_view
    from .functional import AttentionOutput, attention, intercept, use_backend
    from .modules import KVCache, MultiHeadSelfAttention, SelfAttention
    from .weights import attention_weights, weights_from_lse

__version__ = "0.1.0"

_LAZY = {
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
    "head_view": ("selfattn.explainer.views.notebook", "head_view"),
    "model_view": ("selfattn.explainer.views.notebook", "model_view"),
    "detect_head": ("selfattn.explainer.detect", "detect_head"),  # TransformerLens' head detector
}

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
    "head_view",
    "model_view",
    "detect_head",
]


def __getattr__(name: str):
    if name in _LAZY:
        module, attr = _LAZY[name]
        if module.startswith("selfattn.explainer."):  # the explainer's names: the extra named for the name asked
            from .extras import require

            require("explain", f"selfattn.{name}")
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'selfattn' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
