"""Inline display in notebooks, and the head/model views of attention tensors given directly.

    Inline(page_html)._repr_html_()        # the page in <iframe sandbox="allow-scripts" srcdoc="…">
    head_view(out.attentions, tokens)      # transformers' output_attentions: a tuple of (B, H, L, L)
    model_view(weights, tokens)            # or one (layers, heads, L, L) / (heads, L, L) / (L, L) tensor

Why an iframe with `srcdoc`: JupyterLab, Notebook 7, VS Code and Colab all show a `text/html` output, but
they differ in whether its scripts run and what they may load (bertviz's views load require.js from a CDN:
blank offline, "require is not defined" in JupyterLab). A sandboxed iframe whose document is the whole
self-contained page (`views.report`: script and data inline, a policy that forbids every request) runs the
same everywhere, and `sandbox="allow-scripts"` without `allow-same-origin` keeps it away from the notebook.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

import numpy as np

from ...files import check_writable, write_atomic
from . import report

__all__ = ["Inline", "frame", "head_view", "model_view", "attention_array", "FRAME_HEIGHT", "ROW_SUM_TOL"]

FRAME_HEIGHT = 900
"""Height of the inline frame, in CSS pixels (the page scrolls inside it)."""
ROW_SUM_TOL = 1e-2
"""A row of attention weights must sum to 1 (or 0: a row that sees nothing) within this (float16 rows)."""
WEIGHT_TOL = 1e-3
"""…and each weight lie in [0, 1] within this."""


def frame(page: str, height: int = FRAME_HEIGHT) -> str:
    """The page as an `<iframe sandbox="allow-scripts" srcdoc="…">` (the srcdoc attribute-escaped)."""
    return (
        f'<iframe sandbox="allow-scripts" srcdoc="{html.escape(page, quote=True)}" '
        f'style="width: 100%; height: {int(height)}px; border: 0" loading="eager"></iframe>'
    )


class Inline:
    """A self-contained page that a notebook shows inline (`_repr_html_`) and that can be saved.

    html    the whole page (one HTML document)
    height  the inline frame's height in pixels"""

    def __init__(self, page: str, *, height: int = FRAME_HEIGHT):
        if not isinstance(page, str) or not page.startswith("<!DOCTYPE html>"):
            raise TypeError("page must be a whole HTML document (from selfattn.explainer.views.report)")
        self.html = page
        self.height = int(height)

    def _repr_html_(self) -> str:
        return frame(self.html, self.height)

    def save_html(self, path: str | os.PathLike, *, force: bool = False) -> Path:
        """Write the page to `path` atomically; an existing file is kept unless force=True."""
        check_writable(path, force=force, flag="force=True")
        return write_atomic(path, self.html, force=force)

    def __repr__(self) -> str:
        return f"<selfattn page, {len(self.html)} characters: display it in a notebook or save_html(path)>"


def head_view(attention, tokens, *, layer: int | None = None, head: int | None = None) -> Inline:
    """bertviz's head view of attention weights given directly: lines from each token to the tokens it
    attends, all heads of one layer in colours, heads toggled (see `attention_array` for `attention`).

    layer, head  what opens first (default: the last layer, every head; a head: only that one highlighted)"""
    weights, tokens = attention_array(attention, tokens)
    start = {"view": "head", "layer": weights.shape[0] - 1 if layer is None else layer, "head": head}
    _check_start(start, weights.shape)
    return Inline(report.render_attention(weights, tokens, start=start))


def model_view(attention, tokens) -> Inline:
    """bertviz's model view: every layer × head as a small heatmap, click one to open its head view."""
    weights, tokens = attention_array(attention, tokens)
    return Inline(report.render_attention(weights, tokens, start={"view": "model"}))


def attention_array(attention, tokens) -> tuple[np.ndarray, list[str]]:
    """(weights (layers, heads, L, L) float64, tokens) from what a person has at hand:

    - the `attentions` of a transformers model run with `output_attentions=True`: a tuple (one per layer)
      of (B, H, L, L) tensors, B = 1 (bertviz's input);
    - one tensor or array (layers, heads, L, L), (heads, L, L) for one layer, or (L, L) for one head.
    tokens: L strings. Every weight must lie in [0, 1] and every row sum to 1 or 0: other values are not
    attention weights, and a ValueError names the first that is not."""
    if isinstance(attention, (tuple, list)):
        if not attention:
            raise ValueError("attention is an empty tuple: run the model with output_attentions=True")
        layers = [_array(a, f"attention[{l}]") for l, a in enumerate(attention)]
        for l, a in enumerate(layers):
            if a.ndim != 4:
                raise ValueError(f"attention[{l}] must be (B, H, L, L) as transformers gives it, got shape {a.shape}")
            if a.shape[0] != 1:
                raise ValueError(f"attention[{l}] holds a batch of {a.shape[0]}: pass one input (B = 1), e.g. a[i:i+1]")
            if a.shape != layers[0].shape:
                raise ValueError(f"attention[{l}] has shape {a.shape} but attention[0] has {layers[0].shape}")
        weights = np.concatenate(layers, axis=0)  # (layers, H, L, L)
    else:
        weights = _array(attention, "attention")
        if weights.ndim == 2:
            weights = weights[None, None]
        elif weights.ndim == 3:
            weights = weights[None]
        elif weights.ndim != 4:
            raise ValueError(
                f"attention must be (layers, heads, L, L), (heads, L, L) or (L, L), got {weights.ndim} dimensions "
                f"{weights.shape}; transformers' attentions tuple is accepted as it is"
            )
    L = weights.shape[-1]
    if weights.shape[-2] != L:
        raise ValueError(f"attention must be square over the tokens (…, L, L), got {weights.shape[-2]}×{L}")
    return _check_values(weights), _tokens(tokens, L)


def _array(a, what: str) -> np.ndarray:
    if hasattr(a, "detach"):  # a torch tensor, on any device, in any float dtype
        a = a.detach().float().cpu().numpy() if a.dtype.is_floating_point else a.detach().cpu().numpy()
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what} must be a torch tensor or a NumPy array, got {type(a).__name__}")
    if a.dtype.kind != "f":
        raise TypeError(f"{what} must hold floating-point weights, got dtype {a.dtype}")
    return a.astype(np.float64)


def _check_values(w: np.ndarray) -> np.ndarray:
    if w.size == 0:
        raise ValueError(f"attention is empty (shape {w.shape})")
    bad = ~np.isfinite(w) | (w < -WEIGHT_TOL) | (w > 1 + WEIGHT_TOL)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"attention{list(at)} = {float(w[at])!r} is not a weight (weights lie in [0, 1])")
    sums = w.sum(-1)
    off = (np.abs(sums - 1) > ROW_SUM_TOL) & (np.abs(sums) > ROW_SUM_TOL)
    if off.any():
        at = tuple(int(i) for i in np.argwhere(off)[0])
        raise ValueError(
            f"row {list(at)} of attention sums to {sums[at]:.4f}, not 1: pass softmax weights (output_attentions), "
            "not scores"
        )
    return np.clip(w, 0.0, 1.0)


def _tokens(tokens, L: int) -> list[str]:
    if isinstance(tokens, str) or not hasattr(tokens, "__len__"):
        raise TypeError(f"tokens must be a list of {L} strings, got {type(tokens).__name__}")
    tokens = list(tokens)
    if len(tokens) != L:
        raise ValueError(f"{len(tokens)} tokens for attention over {L} positions")
    for i, tok in enumerate(tokens):
        if not isinstance(tok, str):
            raise TypeError(f"tokens[{i}] must be a str, got {type(tok).__name__}")
    return tokens


def _check_start(start: dict, shape: tuple[int, ...]) -> None:
    for name, n in (("layer", shape[0]), ("head", shape[1])):
        value = start.get(name)
        if value is not None and not (isinstance(value, int) and 0 <= value < n):
            raise ValueError(f"{name} must be in [0, {n - 1}], got {value!r}")
