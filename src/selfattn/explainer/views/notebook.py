"""Inline display in notebooks, and the head/model views of attention tensors given directly.

    Inline(page_html)._repr_html_()        # the page in <iframe sandbox="allow-scripts" srcdoc="…">
    head_view(out.attentions, tokens)      # transformers' output_attentions: a tuple of (B, H, L, L)
    model_view(weights, tokens)            # or one (layers, heads, L, L) / (heads, L, L) / (L, L) tensor

head_view and model_view take bertviz's arguments in bertviz's order (sentence_b_start, prettify_tokens,
layer, heads, encoder_attention, include_layers, include_heads, html_action): code written for bertviz runs
unchanged where the meaning is the same, and a ValueError names what the page cannot show.

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
from ..pieces import shown_text
from . import report

__all__ = [
    "Inline",
    "frame",
    "head_view",
    "model_view",
    "attention_array",
    "FRAME_HEIGHT",
    "ROW_SUM_TOL",
    "HTML_ACTIONS",
]

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

    @property
    def data(self) -> str:
        """The whole page, as bertviz's HTML object holds it (`head_view(..., html_action="return").data`)."""
        return self.html

    def __repr__(self) -> str:
        return f"<selfattn page, {len(self.html)} characters: display it in a notebook or save_html(path)>"


HTML_ACTIONS = ("view", "return")
"""bertviz's html_action values: both give the `Inline` page (a notebook shows it as a cell's last value;
"return" users read its whole document from `.data`, as from bertviz's HTML object)."""


def head_view(
    attention=None,
    tokens=None,
    sentence_b_start: int | None = None,
    prettify_tokens: bool = True,
    layer: int | None = None,
    heads: list[int] | None = None,
    encoder_attention=None,
    decoder_attention=None,
    cross_attention=None,
    encoder_tokens=None,
    decoder_tokens=None,
    include_layers: list[int] | None = None,
    html_action: str = "view",
    *,
    head: int | None = None,
    lang: str | None = None,
) -> Inline:
    """bertviz's head view of attention weights given directly: lines from each token to the tokens it
    attends, all heads of one layer in colours, heads toggled (see `attention_array` for `attention`).

    The arguments and their order are bertviz's `head_view`:
    sentence_b_start  where sentence B of an encoder pair starts (checked; the page shows all the pairs'
                      attention, bertviz's default "All" filter)
    prettify_tokens   drop BPE marks as bertviz does ("Ġ" and "▁" become a space, "</w>" goes)
    layer, heads      what opens first (default: the last layer, every head); `heads=[3, 5]` draws those
                      heads, `heads=[h]` (or `head=h`) that one alone, highlighted
    encoder_attention, encoder_tokens  an encoder's self-attention, as `attention`, `tokens`
    decoder_attention, cross_attention  encoder–decoder models: not drawn here (a ValueError says so)
    include_layers    the layers to draw (bertviz: their indices, e.g. [5, 6]; default every layer), shown and
                      linked under the model's own numbers; `layer` is one of them
    html_action       "view" or "return" (`HTML_ACTIONS`)
    lang              the page's language first, "zh" or "en" (default: Chinese when a token holds a
                      Chinese character, else English); a button on the page switches it"""
    given = locals()
    weights, tokens = _bertviz_input(**{name: given[name] for name in BERTVIZ_INPUT})
    numbers = _layers(include_layers, weights.shape[0])
    weights = weights[numbers]
    if layer is not None and layer not in numbers:
        raise ValueError(f"layer {layer!r} is not among the layers drawn (include_layers): {numbers}")
    start = {"view": "head", "layer": numbers[-1] if layer is None else layer}
    start |= _heads(heads, head, weights.shape[1])
    _check_start(start, weights.shape)
    return Inline(
        report.render_attention(weights, tokens, start=start, lang=_lang(lang, tokens), layer_numbers=numbers)
    )


def model_view(
    attention=None,
    tokens=None,
    sentence_b_start: int | None = None,
    prettify_tokens: bool = True,
    display_mode: str = "dark",
    encoder_attention=None,
    decoder_attention=None,
    cross_attention=None,
    encoder_tokens=None,
    decoder_tokens=None,
    include_layers: list[int] | None = None,
    include_heads: list[int] | None = None,
    html_action: str = "view",
    *,
    lang: str | None = None,
) -> Inline:
    """bertviz's model view: every layer × head as a small heatmap, click one to open its head view.

    The arguments and their order are bertviz's `model_view` (see `head_view`); include_layers as in
    `head_view`; include_heads is every head or the first n. display_mode ("dark" or "light") is checked, not
    applied: the page has one colour scheme. lang as in `head_view`."""
    if display_mode not in ("dark", "light"):
        raise ValueError(f"display_mode must be 'dark' or 'light', got {display_mode!r}")
    given = locals()
    weights, tokens = _bertviz_input(**{name: given[name] for name in BERTVIZ_INPUT})
    numbers = _layers(include_layers, weights.shape[0])
    weights = weights[numbers][:, : _prefix("include_heads", include_heads, weights.shape[1])]
    page = report.render_attention(
        weights, tokens, start={"view": "model"}, lang=_lang(lang, tokens), layer_numbers=numbers
    )
    return Inline(page)


BERTVIZ_INPUT = (
    "attention",
    "tokens",
    "sentence_b_start",
    "prettify_tokens",
    "encoder_attention",
    "decoder_attention",
    "cross_attention",
    "encoder_tokens",
    "decoder_tokens",
    "html_action",
)
"""The arguments `head_view` and `model_view` share with bertviz's, read by `_bertviz_input` (one list)."""


def _bertviz_input(
    attention,
    tokens,
    sentence_b_start,
    prettify_tokens,
    encoder_attention,
    decoder_attention,
    cross_attention,
    encoder_tokens,
    decoder_tokens,
    html_action,
) -> tuple[np.ndarray, list[str]]:
    """(weights, tokens) from bertviz's arguments, each checked."""
    if html_action not in HTML_ACTIONS:
        raise ValueError(f"html_action must be 'view' or 'return', got {html_action!r}")
    if decoder_attention is not None or cross_attention is not None or decoder_tokens is not None:
        raise ValueError(
            "decoder_attention, cross_attention and decoder_tokens are bertviz's encoder–decoder views, which "
            "selfattn does not draw: pass a decoder's or an encoder's self-attention as attention (or "
            "encoder_attention)"
        )
    if encoder_attention is not None or encoder_tokens is not None:
        if attention is not None or tokens is not None:
            raise ValueError("pass attention and tokens, or encoder_attention and encoder_tokens, not both")
        attention, tokens = encoder_attention, encoder_tokens
    if attention is None or tokens is None:
        if attention is None and tokens is not None:
            raise ValueError(_NO_WEIGHTS.format(what="attention is None"))
        raise ValueError("head_view and model_view need attention and tokens")
    weights, tokens = attention_array(attention, tokens)
    if sentence_b_start is not None:
        if isinstance(sentence_b_start, bool) or not isinstance(sentence_b_start, int):
            raise TypeError(f"sentence_b_start must be an int, got {type(sentence_b_start).__name__}")
        if not 0 < sentence_b_start < len(tokens):
            raise ValueError(
                f"sentence_b_start must be in [1, {len(tokens) - 1}] for {len(tokens)} tokens, got {sentence_b_start}"
            )
    if not isinstance(prettify_tokens, bool):
        raise TypeError(f"prettify_tokens must be True or False, got {prettify_tokens!r}")
    if prettify_tokens:
        tokens = [t.replace("Ġ", " ").replace("▁", " ").replace("</w>", "") for t in tokens]
    return weights, [shown_text(t) for t in tokens]  # the one notation of every view: "␣cat", ⟨U+00A0⟩, ⇥


def _layers(chosen, n: int) -> list[int]:
    """The layers bertviz's include_layers draws, in the model's order: every one of the n, or those listed."""
    if chosen is None:
        return list(range(n))
    if isinstance(chosen, (str, bytes)) or not hasattr(chosen, "__iter__"):
        raise TypeError(f"include_layers must be a list of layer indices, got {type(chosen).__name__}")
    chosen = list(chosen)
    if not chosen or not all(isinstance(i, int) and not isinstance(i, bool) for i in chosen):
        raise ValueError(f"include_layers must be a non-empty list of layer indices, got {chosen!r}")
    if not all(0 <= i < n for i in chosen):
        raise ValueError(f"include_layers must hold layer indices in [0, {n - 1}], got {chosen!r}")
    return sorted(set(chosen))


def _prefix(name: str, chosen, n: int) -> int:
    """How many of the n layers (heads) `chosen` keeps: None or every one, or the first k (range(k))."""
    if chosen is None:
        return n
    if isinstance(chosen, (str, bytes)) or not hasattr(chosen, "__iter__"):
        raise TypeError(f"{name} must be a list of indices, got {type(chosen).__name__}")
    chosen = list(chosen)
    if not chosen or not all(isinstance(i, int) and not isinstance(i, bool) for i in chosen):
        raise ValueError(f"{name} must be a non-empty list of indices, got {chosen!r}")
    if chosen == list(range(len(chosen))) and len(chosen) <= n:
        return len(chosen)
    if sorted(chosen) == list(range(n)):
        return n
    raise ValueError(
        f"{name}={chosen!r}: the page numbers what it draws from 0, so it draws every one of the {n} or the first "
        f"k (list(range(k))), under their own numbers; open another with layer= (head_view) or click it"
    )


def _heads(heads, head: int | None, n: int) -> dict:
    """What the head view draws first, from bertviz's `heads` list or selfattn's `head`: {"head": h} (that
    one alone, highlighted), {"heads": [...]} (those), or {} (every head)."""
    if heads is None:
        return {} if head is None else {"head": head}
    if head is not None:
        raise ValueError("pass heads=[h] (bertviz) or head=h (selfattn), not both")
    if isinstance(heads, (str, bytes)) or not hasattr(heads, "__iter__"):
        raise TypeError(f"heads must be a list of head indices, got {type(heads).__name__}")
    heads = list(heads)
    for h in heads:
        if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < n:
            raise ValueError(f"heads must hold head indices in [0, {n - 1}], got {heads!r}")
    if not heads or sorted(set(heads)) == list(range(n)):
        return {}
    return {"head": heads[0]} if len(heads) == 1 else {"heads": sorted(set(heads))}


def _lang(lang: str | None, tokens: list[str]) -> str:
    """The page's first language: `lang`, or Chinese when a token holds a CJK character, else English."""
    if lang is None:
        return (
            "zh" if any("\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf" for t in tokens for ch in t) else "en"
        )
    if lang not in ("zh", "en"):
        raise ValueError(f"lang must be 'zh' or 'en', got {lang!r}")
    return lang


_NO_WEIGHTS = (
    "{what}: the model returned no attention weights. transformers' default attention (SDPA) computes none, even "
    'with output_attentions=True: load the model with attn_implementation="eager" (or "selfattn", after '
    "selfattn.hf.register()) and run it with output_attentions=True"
)


def attention_array(attention, tokens) -> tuple[np.ndarray, list[str]]:
    """(weights (layers, heads, L, L) float64, tokens) from what a person has at hand:

    - the `attentions` of a transformers model run with `output_attentions=True`: a tuple (one per layer)
      of (B, H, L, L) tensors, B = 1 (bertviz's input);
    - one tensor or array (layers, heads, L, L), (heads, L, L) for one layer, or (L, L) for one head.
    tokens: L strings. Every weight must lie in [0, 1] and every row sum to 1 or 0: other values are not
    attention weights, and a ValueError names the first that is not."""
    if isinstance(attention, (tuple, list)):
        if not attention:
            raise ValueError(_NO_WEIGHTS.format(what="attention is an empty tuple"))
        if any(a is None for a in attention):
            raise ValueError(_NO_WEIGHTS.format(what="attention holds None"))
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
        if attention is None:
            raise ValueError(_NO_WEIGHTS.format(what="attention is None"))
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
    for name, n in (("head", shape[1]),):
        value = start.get(name)
        if value is not None and not (isinstance(value, int) and 0 <= value < n):
            raise ValueError(f"{name} must be in [0, {n - 1}], got {value!r}")
