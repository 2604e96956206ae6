"""TransformerLens' head detector on any model selfattn explains: `detect_head(model, prompts, pattern)`.

    scores = selfattn.detect_head(None, "一只蓝色怪兽走进森林一只蓝色怪兽", "induction_head")   # (layers, heads)
    scores = selfattn.detect_head((hf_model, tok), prompts, my_pattern)                       # a pattern of your own

The call and its scores are TransformerLens' (`transformer_lens.head_detector.detect_head`):

    detection_pattern  a head name (HEAD_NAMES: previous_token_head, duplicate_token_head, induction_head) or
                       an (L, L) pattern of your own (a function of the token ids gives one per prompt)
    heads              the heads to score, [(layer, head), ...] or {layer: [head, ...]}; the others score −1
    exclude_bos        leave out the weight each query puts on key 0
    exclude_current_token  leave out the weight each query puts on itself
    error_measure      "mul": Σ weights × pattern / Σ weights (the share of the head's weight on the pattern);
                       "abs": 1 − round(L · mean |weights − pattern|, 3)
    several prompts    the mean of their scores (each prompt scored with its own pattern and length)

A head name's pattern is the target keys of `analysis.head_types` (previous, duplicate, induction), the one
definition of those types in selfattn: TransformerLens' own patterns but for an induction target on the
query itself (a token repeated twice in a row), which head_types does not count. The weights are those of
the explainer's trace (`selfattn.explain`), so the scores are of the numbers every view shows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from .analysis import head_types

__all__ = ["detect_head", "HEAD_NAMES", "ERROR_MEASURES"]

HEAD_NAMES = {"previous_token_head": "previous", "duplicate_token_head": "duplicate", "induction_head": "induction"}
"""TransformerLens' head names → the head types of `analysis.head_types` whose targets are their patterns."""

ERROR_MEASURES = ("mul", "abs")


def detect_head(
    model,
    seq: str | Sequence[str],
    detection_pattern,
    heads: Sequence[tuple[int, int]] | Mapping[int, Sequence[int]] | None = None,
    *,
    tokenizer=None,
    exclude_bos: bool = False,
    exclude_current_token: bool = False,
    error_measure: str = "mul",
) -> torch.Tensor:
    """Each head's match with `detection_pattern` on `seq` (a prompt or a list of them): (layers, heads)
    float64, −1 for heads not asked for (see the module doc). `model` is what `selfattn.explain` takes
    (None: the bundled model; a path, a hub id, `(hf_model, tokenizer)`, or an Explainer)."""
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
    scores = []
    for prompt in prompts:
        trace = explainer.trace(prompt)
        ids = trace.token_ids.tolist()
        chosen = _chosen(heads, len(trace.layers), trace.layers[0].n_heads)
        pattern = pattern_of(ids, trace.layers[0].visible.cpu().numpy())
        out = torch.full((len(trace.layers), trace.layers[0].n_heads), -1.0, dtype=torch.float64)
        for l, h in chosen:
            w = trace.layers[l].stages(h, weighted=False)["weights"].detach().cpu().double().numpy()
            out[l, h] = _score(w, pattern, exclude_bos, exclude_current_token, error_measure)
        scores.append(out)
    return torch.stack(scores).mean(0)


def _pattern_source(detection_pattern) -> Callable[[list[int], np.ndarray], np.ndarray]:
    """(ids, visible) → the (L, L) pattern, from a head name, a tensor or array, or a function of the ids."""
    if isinstance(detection_pattern, str):
        if detection_pattern not in HEAD_NAMES:
            raise ValueError(
                f"detection_pattern must be a tensor or one of the head names {list(HEAD_NAMES)}, "
                f"got {detection_pattern!r}"
            )
        kind = HEAD_NAMES[detection_pattern]
        return lambda ids, visible: head_types.targets(ids, causal=False, visible=visible)[kind].astype(np.float64)
    if callable(detection_pattern):
        return lambda ids, visible: _matrix(detection_pattern(list(ids)), len(ids))
    fixed = _as_array(detection_pattern)
    return lambda ids, visible: _matrix(fixed, len(ids))


def _as_array(pattern) -> np.ndarray:
    if hasattr(pattern, "detach"):
        pattern = pattern.detach().cpu().double().numpy()
    if not isinstance(pattern, np.ndarray):
        raise TypeError(
            f"detection_pattern must be a head name, a tensor, an array or a function of the ids, "
            f"got {type(pattern).__name__}"
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


def _score(w: np.ndarray, pattern: np.ndarray, exclude_bos: bool, exclude_current: bool, measure: str) -> float:
    """TransformerLens' similarity of one head's weights `w` (L, L) with `pattern` (L, L)."""
    kept = np.ones_like(w, dtype=bool)  # the (query, key) pairs compared
    if exclude_bos:
        kept[:, 0] = False
    if exclude_current:
        np.fill_diagonal(kept, False)
    if measure == "abs":
        diff = np.where(kept, np.abs(w - pattern), 0.0)
        return 1.0 - round(float(diff.mean() * len(diff)), 3)
    w = np.where(kept, w, 0.0)
    total = w.sum()
    return float((w * pattern).sum() / total) if total > 0 else 0.0
