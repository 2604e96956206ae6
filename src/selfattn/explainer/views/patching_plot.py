"""The picture of an activation-patching run: layers × heads, and layers × positions of the residual stream.

    render(p, lang=) -> {"patching.png": bytes, "patching.svg": bytes}   p = `experiments.patching`'s dict
    display(p) -> {limit, label_min, light_from}: the colour scale (±limit), the least |share| labelled and
                  where labels turn white, which the page's heatmaps use too (p["display"])

Each cell is the share of the logit difference (target − foil) recovered when that head's output (left) or
that layer's residual at that position (right) is taken from the clean run into the corrupted one: blue
recovers, red works against, on one scale centred at 0; the heads the sentence names are framed. Drawn on an
explicit Figure with `plots.rc` (the CJK font for Chinese), never touching matplotlib's global state.
"""

from __future__ import annotations

import io

import numpy as np

from ..pieces import shown_text
from .findings import name, quote
from .plots import rc
from .tables import number
from .texts import TEXTS

__all__ = ["FILES", "render", "display", "LABEL_MIN", "LEAST_LIMIT", "LIGHT_FROM"]

FILES = ("patching.png", "patching.svg")
DPI = 150
FRAME = "#111827"
CHANGED = "#dc2626"
"""The tick labels of the positions where the corrupted text differs."""
LABEL_MIN = 0.05
"""Cells whose |share| is at least this carry their percentage as a label."""
LEAST_LIMIT = 0.2
"""The colour scale reaches at least ±20 %, so that shares near 0 stay pale."""
LIGHT_FROM = 0.6
"""A label is white on cells darker than this share of the scale."""


def _has_cjk(labels) -> bool:
    return any("\u2e80" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff" for s in labels for ch in s)


def _figure(**kwargs):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def display(p: dict) -> dict:
    """{limit, label_min, light_from}: one colour scale for both panels, ±limit = the largest |share| (at least
    LEAST_LIMIT); cells labelled from LABEL_MIN, in white from LIGHT_FROM × limit."""
    heads = np.abs(np.array(p["heads"], dtype=float))
    residual = np.abs(np.array(p["residual"], dtype=float))
    limit = max(LEAST_LIMIT, float(heads.max()), float(residual.max()))
    return {"limit": limit, "label_min": LABEL_MIN, "light_from": LIGHT_FROM}


def _panel(ax, values: np.ndarray, vmax: float, annotate: bool):
    im = ax.imshow(values, cmap="RdBu", vmin=-vmax, vmax=vmax, aspect="auto", interpolation="nearest")
    if annotate:
        for (i, j), v in np.ndenumerate(values):
            if abs(v) >= LABEL_MIN:
                ax.text(
                    j,
                    i,
                    number(100 * v, 0),
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white" if abs(v) > LIGHT_FROM * vmax else "black",
                )
    return im


def _draw(p: dict, lang: str):
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import FuncFormatter

    heads = np.array(p["heads"], dtype=float)  # (n_layers, n_heads)
    residual = np.array(p["residual"], dtype=float)  # (n_layers, L)
    n_layers, n_heads = heads.shape
    L = residual.shape[1]
    vmax = display(p)["limit"]
    height = max(4.0, 0.28 * n_layers + 1.8)
    fig = _figure(figsize=(0.42 * n_heads + 0.42 * L + 3.2, height))
    grid = fig.add_gridspec(1, 3, width_ratios=[n_heads, L, 0.6], wspace=0.25)
    left, right, bar = fig.add_subplot(grid[0]), fig.add_subplot(grid[1]), fig.add_subplot(grid[2])
    im = _panel(left, heads, vmax, True)
    _panel(right, residual, vmax, True)
    for x in p["top_heads"]:
        left.add_patch(Rectangle((x["head"] - 0.5, x["layer"] - 0.5), 1, 1, fill=False, lw=2, ec=FRAME))
    left.set_title(TEXTS["patching.heads"][lang], fontsize=9)
    right.set_title(TEXTS["patching.residual"][lang], fontsize=9)
    left.set_xticks(range(n_heads), [str(h) for h in range(n_heads)], fontsize=7)
    left.set_xlabel(TEXTS["common.head"][lang])
    for ax in (left, right):
        ax.set_yticks(range(n_layers), [str(l) for l in range(n_layers)], fontsize=6)
        ax.set_ylabel(TEXTS["common.layer"][lang])
    shown = p["clean"].get("labels") or [shown_text(t.strip(" ") or t) for t in p["clean"]["tokens"]]
    ticks = [f"{i} {tok}" for i, tok in enumerate(shown)]  # as every view reads them (`pieces.shown_text`)
    right.set_xticks(range(L), ticks, rotation=90, fontsize=7)
    for q in p["differ"]:
        right.get_xticklabels()[q].set_color(CHANGED)
    right.set_xlabel(TEXTS["patching.position"][lang])
    cb = fig.colorbar(im, cax=bar, label=TEXTS["patching.share"][lang])
    cb.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: number(100 * v, 0) + "%"))
    t, f = quote(p["target"]["token"]), quote(p["foil"]["token"])
    title = TEXTS["patching.title"][lang].format(
        model=p.get("model", ""), t=t, f=f, c=number(p["clean_ld"]), x=number(p["corrupted_ld"])
    )
    names = ("、" if lang == "zh" else ", ").join(
        f"{name(x['layer'], x['head'])} {100 * x['recovered']:.0f}%" for x in p["top_heads"]
    )
    fig.suptitle(title + ("\n" + TEXTS["patching.top"][lang].format(names=names) if names else ""), fontsize=10)
    fig.subplots_adjust(left=0.06, right=0.94, bottom=0.14, top=0.88)
    return fig


def render(p: dict, *, lang: str = "zh") -> dict[str, bytes]:
    """{file name: bytes} of the picture in PNG and SVG, drawn once."""
    import matplotlib

    labels = [*p["clean"]["tokens"], p["target"]["token"], p["foil"]["token"], p.get("model", "")]
    with matplotlib.rc_context(rc(lang == "zh" or _has_cjk(labels))):
        fig = _draw(p, lang)
        out = {}
        for file in FILES:
            buffer = io.BytesIO()
            fig.savefig(buffer, format=file.rsplit(".", 1)[1], dpi=DPI)
            out[file] = buffer.getvalue()
    return out
