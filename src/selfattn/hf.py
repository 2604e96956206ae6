"""selfattn as an attention implementation of Hugging Face transformers.

    import selfattn.hf
    selfattn.hf.register()                                   # once per process
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="selfattn")
    # or: model.set_attn_implementation("selfattn")

Every attention layer of the model then calls `selfattn.attention`, so every backend ("auto"
included, and `selfattn.use_backend(...)`) serves it and the explainer captures it through
`selfattn.intercept` — one capture point for our own modules and for transformers models.

What transformers passes, and where it goes:

    query (B, Hq, Lq, D), key/value (B, Hkv, Lk, D|Dv)   after RoPE; GQA heads are NOT repeated
    attention_mask  None: the structure is `is_causal` (the module's, or the kwarg) and `sliding_window`
                    bool (B, 1, Lq, Lk), True = may look (the "selfattn" mask interface is SDPA's)
                    float, additive (0 / large negative): passed as an additive mask
    scaling, dropout, softcap, sliding_window  -> scale, dropout_p, softcap, window
    s_aux (gpt-oss's attention sinks, (Hq,))   -> sinks
    position_ids that restart (a packed batch) -> segments (one id per packed sequence)
    cu_seq_lens_q/k, max_length_q/k           -> segments (transformers' packed-sequence keywords, B = 1)
    output_attentions=True                    -> the weights are returned as transformers expects

A bool mask that is exactly the causal (and sliding-window) pattern is turned back into
`causal=True, window=w` with no mask, so the fast causal paths run and an intervention can switch
the causal rule off; a bidirectional layer's sliding window (ModernBERT: |i − j| <= w, passed as
sliding_window = w + 1) becomes the two-sided window (w, w); a packed batch's block-diagonal mask
becomes segments. A mask that also hides padding keeps its padding part. KV-cache decoding
(Lq < Lk) needs no special case: selfattn's causal rule is bottom-right aligned.

A `position_bias` (T5-style, additive, broadcastable to (B, Hq, Lq, Lk)) is folded into the additive mask:
added to it, or −inf where a bool mask hides. Anything else that changes the computation (a `head_mask`, ...)
is refused with a ValueError naming it.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch

from .compat import check_cu_seqlens, segments_of
from .functional import AttentionOutput, attention
from .masks import visibility

__all__ = ["NAME", "register", "attention_forward", "split_mask", "with_bias", "cu_segments"]

NAME = "selfattn"
"""The `attn_implementation` name this module registers."""

HANDLED = (
    "dropout",
    "scaling",
    "softcap",
    "sliding_window",
    "is_causal",
    "output_attentions",
    "s_aux",
    "position_ids",
    "position_bias",
    "cu_seq_lens_q",
    "cu_seq_lens_k",
    "max_length_q",
    "max_length_k",
)
IGNORED = (
    "cache_position",
    "use_cache",
    "output_hidden_states",
    "return_dict",
    "past_key_values",
    "cache",
    "layer_idx",
    "encoder_hidden_states",
    "encoder_attention_mask",
    "position_embeddings",
    "token_type_ids",
    "deterministic",
    "output_router_logits",
)
"""Keyword arguments transformers passes that do not change what attention computes here: positions
are already inside the rotated Q/K, and the cache already inside K/V."""

_LOCK = threading.Lock()


def register() -> str:
    """Register "selfattn" with transformers' AttentionInterface and AttentionMaskInterface; returns
    the name. Idempotent and thread-safe. Without transformers: `extras.MissingExtra` (an ImportError) naming
    the [explain] extra."""
    from .extras import require

    require("explain", "selfattn.hf.register()", modules=("transformers",))
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    with _LOCK:
        AttentionInterface.register(NAME, attention_forward)
        AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """transformers' attention-function signature on top of `selfattn.attention`.

    query (B, Hq, Lq, D), key (B, Hkv, Lk, D), value (B, Hkv, Lk, Dv)
    returns (output (B, Lq, Hq, Dv), weights (B, Hq, Lq, Lk) or None)
    """
    _refuse_unknown(kwargs)
    is_causal = kwargs.get("is_causal")
    causal = bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)
    window = kwargs.get("sliding_window")
    Lq, Lk = query.shape[2], key.shape[2]
    if attention_mask is None:
        if causal and 1 < Lq < Lk:
            # Only an empty static cache gets here (transformers skips the mask when it may): its keys
            # beyond Lq are unwritten slots, not a past. Keep the first Lq, as transformers' SDPA does.
            key, value = key[:, :, :Lq], value[:, :, :Lq]
        mask = None
        if not causal:
            window = None  # a bidirectional layer without a mask sees everything
    else:
        if not causal and window is not None:
            window = (window - 1, window - 1)  # bidirectional: flash's inclusive sliding_window, both sides
        causal, window, mask = split_mask(attention_mask, Lq, Lk, causal=causal, window=window)
    segments = cu_segments(kwargs, Lq, Lk, query.shape[0], query.device)
    if segments is not None:  # packed sequences given by their boundaries: a mask keeps only what hides more
        if mask is not None:
            mask = _segments_of_mask(mask, segments, causal, window)[0]
    elif mask is not None:  # transformers draws a packed batch's mask only without a cache: the mask decides
        segments = packed_segments(kwargs.get("position_ids"), Lq, Lk, query.shape[0])
        if segments is not None:
            mask, segments = _segments_of_mask(mask, segments, causal, window)
    bias = kwargs.get("position_bias")
    if bias is not None:
        mask = with_bias(mask, bias)
    want = bool(kwargs.get("output_attentions", False)) or _recording_attentions()
    keywords: dict[str, Any] = dict(
        causal=causal,
        mask=mask,
        window=window,
        scale=scaling,
        softcap=kwargs.get("softcap"),
        dropout_p=float(dropout or 0.0),
        sinks=kwargs.get("s_aux"),
        segments=segments,
    )
    if want:
        result = attention(query, key, value, return_weights=True, **keywords)
    else:
        result = AttentionOutput(attention(query, key, value, **keywords), None, None)
    weights = None if result.weights is None else result.weights.to(query.dtype)
    return result.output.transpose(1, 2).contiguous(), weights


def split_mask(mask: torch.Tensor, n_q: int, n_k: int, *, causal: bool, window):
    """(causal, window, mask) for `selfattn.attention` from the mask transformers built.

    mask  bool (B, 1|H, Lq, Lk) True = may look, or additive float
    A bool mask equal to the causal/window rule everywhere becomes (causal, window, None); one that
    only adds hidden keys to the rule keeps the rule as rule and itself as mask (same result); any
    other mask is taken as it is, with no rule (causal False, window None). A bidirectional layer
    (causal False) keeps a rule only for its two-sided window.
    """
    if mask.dtype != torch.bool or not (causal or isinstance(window, tuple)):
        return False, None, mask
    rule = visibility(n_q, n_k, causal=causal, window=window, device=mask.device)  # (Lq, Lk)
    if bool((mask == rule).all()):
        return causal, window, None
    if not bool((mask & ~rule).any()):
        return causal, window, mask
    return False, None, mask


def with_bias(mask: torch.Tensor | None, bias) -> torch.Tensor:
    """An additive `bias` (transformers' position_bias) joined with `mask`: added to an additive mask, −inf
    where a bool mask hides, the bias alone without a mask."""
    if not isinstance(bias, torch.Tensor) or not bias.dtype.is_floating_point:
        got = f"dtype {bias.dtype}" if isinstance(bias, torch.Tensor) else type(bias).__name__
        raise TypeError(f"position_bias must be a floating tensor (additive), got {got}")
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return torch.where(mask, bias, torch.tensor(float("-inf"), dtype=bias.dtype, device=bias.device))
    return mask + bias


def packed_segments(position_ids, n_q: int, n_k: int, batch: int) -> torch.Tensor | None:
    """(B, L) segment ids of a packed batch — a new id wherever the positions do not go up by one, as
    transformers' `find_packed_sequence_indices` — or None when no row restarts (or Lq ≠ Lk: decoding)."""
    if not isinstance(position_ids, torch.Tensor) or position_ids.dim() != 2 or n_q != n_k:
        return None
    if position_ids.shape[1] != n_q:
        return None
    ids = position_ids.expand(batch, -1) if position_ids.shape[0] == 1 else position_ids
    step = ids[:, 1:] - ids[:, :-1]
    if bool((step == 1).all()):
        return None
    starts = torch.cat([torch.zeros_like(ids[:, :1]), (step != 1).long()], dim=1)
    return starts.cumsum(dim=1)


def cu_segments(kwargs: dict, n_q: int, n_k: int, batch: int, device: torch.device) -> torch.Tensor | None:
    """(1, L) segment ids from transformers' packed-sequence keywords (`cu_seq_lens_q`, `cu_seq_lens_k`: the
    cumulative lengths DataCollatorWithFlattening(return_flash_attn_kwargs=True) gives, with `max_length_q/k`),
    checked as FlashAttention's cu_seqlens are; None when they are not given."""
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is None and cu_k is None:
        return None
    if cu_q is None or cu_k is None:
        given = "cu_seq_lens_q" if cu_k is None else "cu_seq_lens_k"
        raise ValueError(f"cu_seq_lens_q and cu_seq_lens_k go together; only {given} was given")
    if batch != 1 or n_q != n_k:
        raise ValueError(
            f"packed sequences (cu_seq_lens_q/k) are one row of Lq = Lk tokens; got B = {batch}, Lq = {n_q}, Lk = {n_k}"
        )
    starts_q = check_cu_seqlens("cu_seq_lens_q", cu_q, n_q, kwargs.get("max_length_q"), "max_length_q")
    starts_k = check_cu_seqlens("cu_seq_lens_k", cu_k, n_k, kwargs.get("max_length_k"), "max_length_k")
    if starts_q != starts_k:
        raise ValueError(f"cu_seq_lens_q {starts_q} and cu_seq_lens_k {starts_k} differ: selfattn packs Lq = Lk")
    return segments_of(starts_q, device)


def _segments_of_mask(mask: torch.Tensor, segments: torch.Tensor, causal: bool, window):
    """(mask, segments): the packed batch's block-diagonal part of a bool `mask` taken over by segments —
    the mask dropped where it is exactly rule ∧ same segment, kept (with segments) where it only hides more;
    anything else leaves the mask as it is and no segments."""
    if mask.dtype != torch.bool:
        return mask, None
    n = segments.shape[1]
    rule = visibility(n, n, causal=causal, window=window, device=mask.device)
    same = segments[:, None, :, None] == segments[:, None, None, :]  # (B, 1, L, L)
    visible = same & rule
    if bool((mask == visible).all()):
        return None, segments
    if not bool((mask & ~visible).any()):
        return mask, segments
    return mask, None


@functools.cache
def _output_collector():
    """transformers' output recorder (a context variable), or None in a transformers layout without it;
    looked up once per process, not on every attention call."""
    try:
        from transformers.utils.output_capturing import _active_collector
    except ImportError:  # another transformers layout: the keyword alone decides
        return None
    return _active_collector


def _recording_attentions() -> bool:
    """Whether transformers is collecting attention weights for this forward pass. Some models
    (GPT-2) keep `output_attentions` to themselves; transformers' output recorder (a context
    variable) says it for every model."""
    collector = _output_collector()
    if collector is None:
        return False
    try:
        collected = collector.get()
    except LookupError:  # no model forward has set it in this context
        return False
    return isinstance(collected, dict) and "attentions" in collected


def _refuse_unknown(kwargs: dict) -> None:
    for name, value in kwargs.items():
        if name in HANDLED or name in IGNORED or value is None:
            continue
        raise ValueError(
            f"selfattn attention cannot honour {name!r} (given {type(value).__name__}); "
            f"use attn_implementation='eager' for this model"
        )
