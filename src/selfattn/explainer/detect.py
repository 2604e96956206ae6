"""TransformerLens' head detector on any model selfattn explains: `detect_head(model, prompts, pattern)`.

    scores = selfattn.detect_head(None, "一只蓝色怪兽走进森林一只蓝色怪兽", "induction_head")   # (layers, heads)
    scores = selfattn.detect_head((hf_model, tok), prompts, my_pattern)                       # a pattern of your own
    _, cache = hooked.run_with_cache(tokens)                    # TransformerLens' own cache, or a dict of its patterns
    scores = selfattn.detect_head((hf_model, tok), prompt, "previous_token_head", cache=cache)

The call and its scores are TransformerLens' (`transformer_lens.head_detector.detect_head`):

    detection_pattern  a head name (HEAD_NAMES: previous_token_head, duplicate_token_head, induction_head) or
                       an (L, L) lower-triangular pattern of your own (a function of the token ids gives one per
                       prompt); one that is not lower-triangular is refused, as TransformerLens refuses it
    heads              the heads to score, [(layer, head), ...] or {layer: [head, ...]}; the others score −1
    cache              the attention patterns to score instead of running the model: a mapping
                       {"blocks.{l}.attn.hook_pattern": (H, L, L) or (B, H, L, L), one row per prompt} (what
                       TransformerLens' ActivationCache holds: `cache["pattern", l, "attn"]`), or an `Explanation`
                       of the prompt (`selfattn.explain`)
    prepend_bos        the model's BOS before each prompt, as TransformerLens' `to_tokens` (`Explainer.bos`):
                       None (default) = True where the model has a BOS token (added where the tokenizer puts none
                       first), False where it has none; False also removes a BOS the tokenizer puts first
    exclude_bos        leave out the weight each query puts on key 0 (a warning where key 0 is no special token
                       such as a BOS: it is then the prompt's first word)
    exclude_current_token  leave out the weight each query puts on itself
    error_measure      "mul": Σ weights × pattern / Σ weights (the share of the head's weight on the pattern;
                       a warning where the pattern holds values other than 0 and 1, as TransformerLens warns);
                       "abs": 1 − round(L · mean |weights − pattern|, 3) (refused for weights above the diagonal)
    several prompts    the mean of their scores (each prompt scored with its own pattern and length)

A head name's pattern is TransformerLens' own (`tl_pattern`): the previous token; every earlier copy of the query's
token; the token after each earlier copy (the query itself where the token is repeated twice in a row). The
weights are those of the explainer's trace (`selfattn.explain` with the same prepend_bos), so the scores are of
the numbers every view shows. Where TransformerLens differs by accident, selfattn follows its documentation:
several prompts with a head name keep the options given (TransformerLens' loop drops them), and the cache is
never changed (its "mul" zeroes the cache's own key-0 column).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

__all__ = ["detect_head", "tl_pattern", "HEAD_NAMES", "ERROR_MEASURES", "HOOK_PATTERN"]

HEAD_NAMES = ("previous_token_head", "duplicate_token_head", "induction_head")
"""TransformerLens' head names: the patterns `tl_pattern` writes out."""

ERROR_MEASURES = ("mul", "abs")
HOOK_PATTERN = "blocks.{layer}.attn.hook_pattern"
"""The name of a layer's attention pattern in a TransformerLens cache (and in a cache= mapping)."""


def detect_head(
    model,
    seq: str | Sequence[str],
    detection_pattern,
    heads: Sequence[tuple[int, int]] | Mapping[int, Sequence[int]] | None = None,
    cache=None,
    *,
    tokenizer=None,
    prepend_bos: bool | None = None,
    exclude_bos: bool = False,
    exclude_current_token: bool = False,
    error_measure: str = "mul",
) -> torch.Tensor:
    """Each head's match with `detection_pattern` on `seq` (a prompt or a list of them): (layers, heads)
    float64, −1 for heads not asked for (see the module doc). `model` is what `selfattn.explain` takes
    (None: the bundled model; a path, a hub id, `(hf_model, tokenizer)`, or an Explainer): its tokenizer cuts the
    prompts, and it runs them unless `cache` holds their patterns."""
    from .api import explainer_of

    prompts = [seq] if isinstance(seq, str) else list(seq)
    if not prompts or not all(isinstance(p, str) for p in prompts):
        raise TypeError(f"seq must be a string or a non-empty list of strings, got {seq!r:.80}")
    if error_measure not in ERROR_MEASURES:
        raise ValueError(f"error_measure must be one of {ERROR_MEASURES}, got {error_measure!r}")
    pattern_of = _pattern_source(detection_pattern)
    for name, flag in (("exclude_bos", exclude_bos), ("exclude_current_token", exclude_current_token)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, got {flag!r}")
    explainer = explainer_of(model, tokenizer)
    weights_of = _cached_weights(cache, len(prompts))
    scores = []
    for k, prompt in enumerate(prompts):
        cut = explainer.cut(prompt, prepend_bos)
        ids = [int(i) for i in cut[1]]
        if len(ids) < 2:
            raise ValueError(
                f"prompt {prompt!r:.80} is {len(ids)} token: the detector needs at least 2 (as TransformerLens')"
            )
        pattern = pattern_of(ids)
        _check_pattern(pattern, error_measure)
        if exclude_bos and not cut[3].special[0]:
            warnings.warn(
                f"exclude_bos leaves out key 0, and key 0 of {prompt!r:.40} is its first token "
                f"{explainer.decode(ids[0])!r}, not a BOS (prepend_bos={prepend_bos!r})",
                stacklevel=2,
            )
        layers = weights_of(k, ids) if weights_of is not None else _trace_weights(explainer, prompt, prepend_bos, ids)
        n_layers, n_heads = len(layers), layers[0].shape[0]
        out = torch.full((n_layers, n_heads), -1.0, dtype=torch.float64)
        for l, h in _chosen(heads, n_layers, n_heads):
            out[l, h] = _score(layers[l][h], pattern, exclude_bos, exclude_current_token, error_measure, (l, h))
        scores.append(out)
    return torch.stack(scores).mean(0)


def tl_pattern(name: str, ids: Sequence[int]) -> np.ndarray:
    """TransformerLens' pattern `name` (one of HEAD_NAMES) of the token ids, (L, L) float64 of 0 and 1, lower
    triangular: previous_token_head (i, i−1); duplicate_token_head (i, j) for j < i with the same token;
    induction_head (i, j + 1) for each such j (j + 1 = i where the token is repeated twice in a row)."""
    if name not in HEAD_NAMES:
        raise ValueError(
            f"detection_pattern must be a tensor or one of the head names {list(HEAD_NAMES)}, got {name!r}"
        )
    arr = np.asarray(list(ids))
    L = len(arr)
    i, j = np.arange(L)[:, None], np.arange(L)[None, :]
    if name == "previous_token_head":
        return (j == i - 1).astype(np.float64)
    duplicate = (arr[:, None] == arr[None, :]) & (j < i)
    if name == "duplicate_token_head":
        return duplicate.astype(np.float64)
    induction = np.zeros((L, L))
    induction[:, 1:] = duplicate[:, :-1]
    return np.tril(induction)


def _trace_weights(explainer, prompt: str, prepend_bos, ids: list[int]) -> list[np.ndarray]:
    """Per layer the (H, L, L) float64 weights of the explainer's trace of `prompt`."""
    from . import tracing

    trace = tracing.trace(explainer, prompt, prepend_bos=prepend_bos)
    assert trace.token_ids.reshape(-1).tolist() == ids  # the same cut as the pattern's
    return _trace_weights_of(trace)


def _cached_weights(cache, n_prompts: int) -> Callable[[int, list[int]], list[np.ndarray]] | None:
    """(prompt index, its ids) → per layer (H, L, L) float64, read from `cache` (see the module doc); None: none."""
    if cache is None:
        return None
    from .result import Explanation

    if isinstance(cache, Explanation):
        if n_prompts != 1:
            raise ValueError(f"an Explanation holds one prompt's patterns; seq has {n_prompts} prompts")

        def from_explanation(k: int, ids: list[int]) -> list[np.ndarray]:
            got = cache.trace.token_ids.reshape(-1).tolist()
            if got != ids:
                raise ValueError(
                    f"cache is the Explanation of other tokens ({len(got)}: {got[:8]}…) than the prompt's "
                    f"({len(ids)}: {ids[:8]}…): explain the same text with the same prepend_bos"
                )
            return _trace_weights_of(cache.trace)

        return from_explanation
    if not hasattr(cache, "__getitem__"):
        raise TypeError(
            f"cache must be a mapping of {HOOK_PATTERN} patterns (a TransformerLens ActivationCache) or an "
            f"Explanation, got {type(cache).__name__}"
        )
    layers: list[np.ndarray] = []
    while (found := _pattern_at(cache, len(layers))) is not None:
        layers.append(_as_array(found, "cache pattern"))
    if not layers:
        raise ValueError(f"cache holds no {HOOK_PATTERN.format(layer=0)!r}: give each layer's attention pattern")

    def from_mapping(k: int, ids: list[int]) -> list[np.ndarray]:
        out = []
        for l, w in enumerate(layers):
            if w.ndim == 4:
                if w.shape[0] != n_prompts:
                    raise ValueError(
                        f"cache pattern of layer {l} has {w.shape[0]} rows (B, H, L, L) for {n_prompts} prompts"
                    )
                w = w[k]
            elif n_prompts != 1 or w.ndim != 3:
                raise ValueError(
                    f"cache pattern of layer {l} must be (H, L, L) for one prompt or (B, H, L, L) for {n_prompts}, "
                    f"got shape {w.shape}"
                )
            if w.shape[-2:] != (len(ids), len(ids)):
                raise ValueError(
                    f"cache pattern of layer {l} is {w.shape[-2]} × {w.shape[-1]}; the prompt is {len(ids)} tokens "
                    "(square, one row and column per token: cut with the same prepend_bos)"
                )
            out.append(w)
        return out

    return from_mapping


def _pattern_at(cache, layer: int):
    """cache["blocks.{layer}.attn.hook_pattern"], or None where it holds none (read by item only, as TransformerLens'
    ActivationCache answers)."""
    try:
        return cache[HOOK_PATTERN.format(layer=layer)]
    except KeyError:
        return None


def _trace_weights_of(trace) -> list[np.ndarray]:
    return [
        np.stack(
            [layer.stages(h, weighted=False)["weights"].detach().cpu().double().numpy() for h in range(layer.n_heads)]
        )
        for layer in trace.layers
    ]


def _check_pattern(pattern: np.ndarray, measure: str) -> None:
    """TransformerLens' checks of a detection pattern: lower triangular (refused otherwise); with "mul", a warning
    for values other than 0 and 1."""
    above = np.triu(pattern, 1)
    if np.any(above != 0):
        i, j = (int(x) for x in np.argwhere(above != 0)[0])
        raise ValueError(
            f"detection_pattern must be lower triangular (a query sees no later key): it has {pattern[i, j]:g} at "
            f"query {i}, key {j}"
        )
    if measure == "mul" and not np.isin(pattern, (0.0, 1.0)).all():
        warnings.warn("Using detection pattern with values other than 0 or 1 with error_measure 'mul'", stacklevel=3)


def _pattern_source(detection_pattern) -> Callable[[list[int]], np.ndarray]:
    """ids → the (L, L) pattern, from a head name (`tl_pattern`), a tensor or array, or a function of the ids."""
    if isinstance(detection_pattern, str):
        tl_pattern(detection_pattern, [0, 1])  # an unknown name refused before the model runs
        return lambda ids: tl_pattern(detection_pattern, ids)
    if callable(detection_pattern):
        return lambda ids: _matrix(detection_pattern(list(ids)), len(ids))
    fixed = _as_array(detection_pattern)
    return lambda ids: _matrix(fixed, len(ids))


def _as_array(pattern, what: str = "detection_pattern") -> np.ndarray:
    if hasattr(pattern, "detach"):
        pattern = pattern.detach().cpu().double().numpy()
    if not isinstance(pattern, np.ndarray):
        raise TypeError(
            f"{what} must be a head name, a tensor, an array or a function of the ids, got {type(pattern).__name__}"
        )
    return pattern.astype(np.float64)


def _matrix(pattern, L: int) -> np.ndarray:
    p = _as_array(pattern)
    if p.shape != (L, L):
        raise ValueError(f"detection_pattern must be (L, L) for the prompt's L = {L} tokens, got shape {p.shape}")
    if not np.isfinite(p).all():
        raise ValueError("detection_pattern holds a NaN or an infinity")
    return p


def _chosen(heads, n_layers: int, n_heads: int) -> list[tuple[int, int]]:
    if heads is None:
        return [(l, h) for l in range(n_layers) for h in range(n_heads)]
    pairs = [(l, h) for l, hs in heads.items() for h in hs] if isinstance(heads, Mapping) else list(heads)
    for pair in pairs:
        l, h = pair
        if not (isinstance(l, int) and isinstance(h, int) and 0 <= l < n_layers and 0 <= h < n_heads):
            raise ValueError(f"head {pair!r} does not exist: the model has {n_layers} layers × {n_heads} heads")
    return pairs


def _score(
    w: np.ndarray, pattern: np.ndarray, exclude_bos: bool, exclude_current: bool, measure: str, head: tuple[int, int]
) -> float:
    """TransformerLens' similarity of one head's weights `w` (L, L) with `pattern` (L, L)
    (`compute_head_attention_similarity_score`): NaN, with a warning, where "mul" compares no weight at all."""
    kept = np.ones_like(w, dtype=bool)  # the (query, key) pairs compared
    if exclude_bos:
        kept[:, 0] = False
    if exclude_current:
        np.fill_diagonal(kept, False)
    if measure == "abs":
        diff = np.abs(w - pattern)
        if np.any(np.triu(diff, 1) != 0):
            raise ValueError(
                f"head {head[0]}.{head[1]} puts weight on later keys (its pattern is not lower triangular): "
                "error_measure 'abs' compares causal patterns only"
            )
        diff = np.where(kept, diff, 0.0)
        return 1.0 - round(float(diff.mean() * len(diff)), 3)
    w = np.where(kept, w, 0.0)
    total = w.sum()
    if total == 0:
        warnings.warn(f"head {head[0]}.{head[1]} puts no weight on the keys compared: its score is NaN", stacklevel=3)
        return float("nan")
    return float((w * pattern).sum() / total)
