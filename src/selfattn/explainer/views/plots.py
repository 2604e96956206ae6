"""Pictures of attention, drawn from an `Explanation`: one head's heatmap, and the layer × head grid. PNG or SVG
(by suffix).

Chinese tick labels need a CJK font; matplotlib is pointed at the first installed one of CJK_FONTS (the
common CJK fonts of Linux, macOS and Windows: Noto Sans CJK, WenQuanYi, PingFang, Hiragino Sans GB, Heiti,
Microsoft YaHei, SimHei …), inside `matplotlib.rc_context` for one picture: each picture is an explicit
Figure on an Agg canvas, so neither the global backend nor the global rcParams are touched. Without such
a font, labels with CJK characters would render as boxes, so `save` refuses with an error that names the
fonts it looked for and says what to install.

Sized for a screen: no picture is wider or taller than MAX_PIXELS. The grid draws each head from its
thumbnail (`HeadAnswers.thumbnails`, `summary.scan`: the weights pooled into at most 64 × 64 cells), so
24 layers × 14 heads of a 512-token input are drawn in seconds; with small cells the heads are named by
their row (layer) and column (head) instead of a title per cell, and the picture's title sits above the
first row, never over it.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...files import check_writable, write_atomic
from . import texts
from .fileset import write_all

if TYPE_CHECKING:
    from ..result import Explanation

CJK_FONTS = (
    "Noto Sans CJK SC",
    "Noto Sans CJK JP",
    "Noto Sans SC",
    "Source Han Sans SC",
    "WenQuanYi Micro Hei",
    "WenQuanYi Zen Hei",
    "PingFang SC",
    "Hiragino Sans GB",
    "Heiti SC",
    "STHeiti",
    "Microsoft YaHei",
    "SimHei",
    "SimSun",
    "Droid Sans Fallback",
    "Arial Unicode MS",
)
"""CJK font families, in order of preference: Linux (Noto, WenQuanYi, Droid), macOS (PingFang, Hiragino,
Heiti), Windows (Microsoft YaHei, SimHei, SimSun)."""
FONT_FILES = (
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/google-noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
    "/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf",
    "/System/Library/Fonts/PingFang.ttc",
    "/System/Library/Fonts/Hiragino Sans GB.ttc",
    "/System/Library/Fonts/STHeiti Light.ttc",
    "/Library/Fonts/Arial Unicode.ttf",
    "C:/Windows/Fonts/msyh.ttc",
    "C:/Windows/Fonts/simhei.ttf",
    "C:/Windows/Fonts/simsun.ttc",
)
"""Where those fonts are installed by default: added to matplotlib's list when its font cache is older."""
FORMATS = (".png", ".svg")
GRID_CELL_INCHES = 2.2
MAX_HEATMAP_INCHES = 12.0
DPI = 150
MAX_PIXELS = 2000
"""No picture is wider or taller than this (at DPI)."""
TITLED_CELL_INCHES = 1.2
"""Grid cells at least this large carry their own title (layer, head, entropy); smaller ones are named by
their row and column."""


def fonts(needs_cjk: bool) -> list[str]:
    """The sans-serif font list for the pictures: the installed CJK fonts first, then DejaVu Sans.
    Refuses (ValueError) when CJK labels must be drawn and no CJK font is installed, naming those looked for."""
    from matplotlib import font_manager

    known = {e.fname for e in font_manager.fontManager.ttflist}
    for f in FONT_FILES:  # a stale font cache may not know a font installed after it was built
        if f not in known and Path(f).is_file():
            try:
                font_manager.fontManager.addfont(f)
            except (OSError, RuntimeError, ValueError):  # a collection matplotlib cannot read: skip it
                continue
    installed = {e.name for e in font_manager.fontManager.ttflist}
    cjk = [f for f in CJK_FONTS if f in installed]
    if needs_cjk and not cjk:
        raise ValueError(
            "no CJK font found for the Chinese labels (looked for "
            + ", ".join(CJK_FONTS)
            + "); install one, e.g. `apt-get install fonts-noto-cjk` or `fonts-wqy-microhei` on Linux "
            "(macOS and Windows ship PingFang / Microsoft YaHei)"
        )
    return cjk + ["DejaVu Sans"]


def rc(needs_cjk: bool) -> dict:
    """matplotlib settings for one picture, applied with `matplotlib.rc_context` (never globally)."""
    return {
        "font.family": "sans-serif",
        "font.sans-serif": fonts(needs_cjk),
        "axes.unicode_minus": False,
        "svg.fonttype": "path",
    }  # glyphs as outlines: the SVG looks the same without the font


def _figure(**kwargs):
    """A Figure on its own Agg canvas: no pyplot, no global backend switch."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def _has_cjk(labels) -> bool:
    return any("\u2e80" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff" for s in labels for ch in s)


def _check_path(path, force: bool) -> Path:
    """`path` if a picture may be written there (PNG/SVG suffix; its folder is made), before anything is drawn."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ValueError(f"picture path must end in {' or '.join(FORMATS)}, got {path.name!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    return check_writable(path, force=force)


ZOOM = 48
"""A longer input is drawn zoomed on its last ZOOM tokens (rows and keys), so each cell stays visible."""
GRID_LABELS = 12
"""Up to this many tokens the grid carries token labels."""
SHOWN_COLOUR = "#dc2626"


def _say(lang: str, key: str, **values) -> str:
    return texts.text(key, lang, **values)


def _minus(x: str) -> str:
    return x.replace("-", "−")


def _encode(fig, suffix: str) -> bytes:
    """The figure as PNG or SVG bytes."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format=suffix.lstrip(".").lower(), dpi=DPI)
    return buffer.getvalue()


def heatmap(e: Explanation, layer: int, head: int, path, *, force: bool = False, lang: str = "zh") -> Path:
    """One head's weights, query rows × key columns, token labels on both axes (zoomed on the last
    ZOOM tokens of a longer input)."""
    layer, head = e.check_head(layer, head)
    return _draw(lambda: _heatmap(e, layer, head, lang), e, lang, {_check_path(path, force): force})[0]


def _draw(build, e: Explanation, lang: str, paths: dict[Path, bool]) -> list[Path]:
    """Build one figure (`build()`, inside its rc_context) and save it to each path (path -> force)."""
    data = _draw_bytes(build, e, lang, [p.name for p in paths])
    return [write_atomic(path, d, force=force) for (path, force), d in zip(paths.items(), data, strict=True)]


def _draw_bytes(build, e: Explanation, lang: str, names: list[str]) -> list[bytes]:
    """Build one figure (`build()`, inside its rc_context) and encode it once per name (format by suffix)."""
    import matplotlib

    with matplotlib.rc_context(rc(lang == "zh" or _has_cjk(e.tokens.labels))):
        fig = build()
        return [_encode(fig, Path(name).suffix) for name in names]


def _heatmap(e: Explanation, layer: int, head: int, lang: str):
    t = partial(_say, lang)
    tokens = list(e.tokens.names)
    w = e.weights(layer, head).numpy()
    lay = e.trace.layers[layer]
    visible = lay.head_rule(head)[2].cpu().numpy().astype(bool)
    L = len(tokens)
    start = max(0, L - ZOOM)
    w, visible, shown = w[start:, start:], visible[start:, start:], tokens[start:]
    n = len(shown)
    size = min(MAX_HEATMAP_INCHES, 3.0 + 0.45 * n)
    fig = _figure(figsize=(size + 1.2, size))
    ax = fig.add_subplot()
    drawn = np.ma.masked_where(~visible, w)
    cmap = matplotlib_cmap()
    im = ax.imshow(drawn, cmap=cmap, norm=_norm(), interpolation="nearest")
    ticks = [_glyphs(tok) if "@" in tok else f"{start + i} {_glyphs(tok)}" for i, tok in enumerate(shown)]
    ax.set_xticks(range(n), ticks, rotation=90 if n > 8 else 0, fontsize=8 if n > 24 else 10)
    ax.set_yticks(range(n), ticks, fontsize=8 if n > 24 else 10)
    if n <= 12:
        for i in range(n):
            for j in range(n):
                if visible[i][j]:
                    ax.text(
                        j,
                        i,
                        f"{w[i, j]:.0%}",
                        ha="center",
                        va="center",
                        fontsize=8,
                        color="white" if w[i, j] > 0.5 else "black",
                    )
    ax.set_xlabel(t("plots.key"))
    ax.set_ylabel(t("plots.query"))
    title = t("plots.title", name=e.card.name, layer=layer, head=head)
    ax.set_title(title + (t("plots.zoom", n=n) if start else ""))
    sink = lay.sink(head)
    if sink is None:
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label=t("plots.weight"))
    else:
        _sink_column(fig, ax, im, sink.cpu().numpy()[start:], t)
    fig.tight_layout()
    return fig


def _sink_column(fig, ax, im, sink: np.ndarray, t) -> None:
    """The sink's share of each shown row (`LayerTrace.sink`: 1 − the row's weights), as one column set apart
    right of the heatmap, on the same scale, labelled; then the colour bar."""
    from mpl_toolkits.axes_grid1 import make_axes_locatable

    n = len(sink)
    divider = make_axes_locatable(ax)
    sax = divider.append_axes("right", size=f"{100 / n:.2f}%", pad=SINK_GAP_INCHES, sharey=ax)
    sax.imshow(sink[:, None], cmap=matplotlib_cmap(), norm=_norm(), interpolation="nearest", aspect="auto")
    sax.set_xticks([0], [t("common.sink")], fontsize=10)
    sax.tick_params(axis="y", left=False, labelleft=False)
    if n <= 12:
        for i, x in enumerate(sink):
            sax.text(0, i, f"{x:.0%}", ha="center", va="center", fontsize=8, color="white" if x > 0.5 else "black")
    cax = divider.append_axes("right", size="4%", pad=SINK_GAP_INCHES)
    fig.colorbar(im, cax=cax, label=t("plots.weight"))


SINK_GAP_INCHES = 0.3
"""Space between the heatmap and its sink column (and between that and the colour bar)."""


def _norm():
    """Shade ∝ √weight on 0 → 1, as in the page: small weights of a long input stay visible, 61% and 100% apart."""
    from matplotlib.colors import PowerNorm

    return PowerNorm(0.5, vmin=0.0, vmax=1.0)


def matplotlib_cmap():
    """Blues from white, with hidden cells (mask 0) hatched grey: distinct from a low weight."""
    import matplotlib

    return matplotlib.colormaps["Blues"].with_extremes(bad="#9ca3af")


def grid(e: Explanation, path, *, force: bool = False, lang: str = "zh") -> Path:
    """Every layer × head as a small heatmap, with its mean entropy and first-token attention; the
    shown head framed; token labels up to GRID_LABELS tokens; zoomed on the last ZOOM tokens beyond."""
    return _draw(lambda: _grid(e, lang), e, lang, {_check_path(path, force): force})[0]


def _grid(e: Explanation, lang: str):
    """The layer × head grid (see the module doc: from the thumbnails, at most MAX_PIXELS a side): one small
    heatmap per head with its title when the cells are large enough (TITLED_CELL_INCHES), else one mosaic
    image of every head's thumbnail, rows named by layer and columns by head."""
    n_l, n_h = e.card.n_layers, e.card.n_heads
    room = MAX_PIXELS / DPI - 1.2  # inches for the cells, after the title and the labels
    cell = min(GRID_CELL_INCHES, room / n_h, room / n_l)
    L = len(e.tokens.names)
    start = 0 if _thumbnails(e) else max(0, L - ZOOM)
    t = partial(_say, lang)
    title = t("plots.grid", name=e.card.name) + (t("plots.zoom", n=L - start) if start else "")
    if cell >= TITLED_CELL_INCHES:
        fig = _grid_cells(e, t, cell, start)
    else:
        fig = _grid_mosaic(e, cell)
    height = fig.get_figheight()
    fig.suptitle(title, y=1 - 0.15 / height)
    fig.tight_layout(rect=(0, 0, 1, 1 - TITLE_INCHES / height), pad=0.3, h_pad=0.2, w_pad=0.2)
    return fig


TITLE_INCHES = 0.6
"""Room kept above the grid for its title, so the title never covers the first row."""


def _grid_cells(e: Explanation, t, cell: float, start: int):
    """One axes per head, titled with its layer, head, entropy and first-token share; token labels up to
    GRID_LABELS tokens."""
    n_l, n_h = e.card.n_layers, e.card.n_heads
    shown_tokens = list(e.tokens.names)[start:]
    labelled = len(shown_tokens) <= GRID_LABELS
    fig = _figure(figsize=(cell * n_h + (0.8 if labelled else 0.5), cell * n_l + TITLE_INCHES + 0.3))
    axes = fig.subplots(n_l, n_h, squeeze=False)
    for l in range(n_l):
        for h in range(n_h):
            ax = axes[l][h]
            image = _grid_image(e, l, h, start)
            ax.imshow(image, cmap=matplotlib_cmap(), norm=_norm(), interpolation="nearest")
            shown = (l, h) == (e.shown.layer, e.shown.head)
            s = e.answers.summaries[l][h]
            ax.set_title(
                t("plots.cell", layer=l, head=h, entropy=f"{s['entropy']:.2f}", first=f"{s['first_token']:.0%}")
                + (t("plots.shown") if shown else ""),
                fontsize=7,
                color=SHOWN_COLOUR if shown else "black",
            )
            ticks = range(image.shape[0])
            tick_labels = [_glyphs(x) for x in shown_tokens] if labelled and image.shape[0] == len(shown_tokens) else []
            ax.set_xticks(ticks, tick_labels if l == n_l - 1 else [], rotation=90, fontsize=6)
            ax.set_yticks(ticks, tick_labels if h == 0 else [], fontsize=6)
            if shown:
                for spine in ax.spines.values():
                    spine.set_edgecolor(SHOWN_COLOUR)
                    spine.set_linewidth(3)
    return fig


GAP = 0.08
"""The white gap between two heads of the mosaic, as a share of one head's side."""


def _grid_mosaic(e: Explanation, cell: float):
    """Every head's thumbnail in one RGBA image (hidden cells grey, white gaps between heads): one axes and
    one image, so 24 × 14 heads draw in about a second; the shown head framed in red."""
    from matplotlib.patches import Rectangle

    n_l, n_h = e.card.n_layers, e.card.n_heads
    images = [[_grid_image(e, l, h, 0) for h in range(n_h)] for l in range(n_l)]
    T = images[0][0].shape[0]
    gap = max(1, round(GAP * T))
    step = T + gap
    rgba = np.ones((n_l * step - gap, n_h * step - gap, 4))  # white
    cmap, norm = matplotlib_cmap(), _norm()
    for l, row in enumerate(images):
        for h, image in enumerate(row):
            rgba[l * step : l * step + T, h * step : h * step + T] = cmap(norm(image))
    fig = _figure(figsize=(cell * n_h + 0.6, cell * n_l + TITLE_INCHES + 0.3))
    ax = fig.add_subplot()
    ax.imshow(rgba, interpolation="nearest")
    ax.set_xticks([h * step + T / 2 for h in range(n_h)], [f"H{h}" for h in range(n_h)], fontsize=7)
    ax.set_yticks([l * step + T / 2 for l in range(n_l)], [f"L{l}" for l in range(n_l)], fontsize=7)
    ax.tick_params(length=0, labeltop=True, labelbottom=False)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.add_patch(
        Rectangle(
            (e.shown.head * step - 0.5 - gap / 2, e.shown.layer * step - 0.5 - gap / 2),
            T + gap,
            T + gap,
            fill=False,
            edgecolor=SHOWN_COLOUR,
            linewidth=2,
        )
    )
    return fig


def _glyphs(label: str) -> str:
    """A token label with the marks no CJK font draws replaced: "␣" (a space piece) as "_"."""
    return label.replace("␣", "_")


def _thumbnails(e: Explanation) -> bool:
    """Whether every head has its thumbnail (`summary.scan`'s cells), which the grid draws."""
    thumbs = e.answers.thumbnails
    return bool(thumbs) and all(len(row) == e.card.n_heads for row in thumbs)


def _grid_image(e: Explanation, layer: int, head: int, start: int):
    """One grid cell's picture: the head's thumbnail (`HeadAnswers.thumbnails`, the weights pooled into at most
    T × T cells) with the cells no query may see masked (the head's rule), or without thumbnails its weights
    (zoomed from `start`)."""
    visible = e.trace.layers[layer].head_rule(head)[2].cpu().numpy().astype(bool)
    if not _thumbnails(e):
        w = e.weights(layer, head).numpy()
        return np.ma.masked_where(~visible[start:, start:], w[start:, start:])
    thumb = e.answers.thumbnails[layer][head].float().cpu().numpy()
    L, T = len(e.tokens.names), thumb.shape[0]
    bins = np.arange(L) * T // L
    seen = np.zeros((T, T), dtype=bool)
    np.logical_or.at(seen, (bins[:, None], bins[None, :]), visible)
    return np.ma.masked_where(~seen, thumb)


def file_names(selected: tuple[int, int] | None, formats=FORMATS) -> list[str]:
    """The names `render` / `save` write, in order: the shown head's heatmap and the grid, per format
    (head-L{layer}-H{head}.png, grid.png, …); `selected` None: the grid's only (the head is not known yet)."""
    out = []
    for fmt in _formats(formats):
        if selected is not None:
            out.append(f"head-L{selected[0]}-H{selected[1]}{fmt}")
        out.append(f"grid{fmt}")
    return out


def _formats(formats) -> list[str]:
    suffixes = [f if f.startswith(".") else f".{f}" for f in formats]
    bad = [f for f in suffixes if f.lower() not in FORMATS]
    if bad:
        raise ValueError(f"picture formats are {' and '.join(FORMATS)}, got {bad[0]!r}")
    return suffixes


def render(e: Explanation, *, formats=FORMATS, lang: str = "zh") -> dict[str, bytes]:
    """{file name: bytes} of the shown head's heatmap and the grid in each format (`file_names`' names and
    order), drawn in memory: each figure once, saved in every format."""
    layer, head = e.shown.layer, e.shown.head
    names = file_names((layer, head), formats)
    heads, grids = names[0::2], names[1::2]
    out = dict.fromkeys(names, b"")
    for build, wanted in (
        (lambda: _heatmap(e, layer, head, lang), heads),
        (lambda: _grid(e, lang), grids),
    ):
        for name, data in zip(wanted, _draw_bytes(build, e, lang, wanted), strict=True):
            out[name] = data
    return out


def save(e: Explanation, out_dir, *, formats=("png", "svg"), force: bool = False, lang: str = "zh") -> list[Path]:
    """The shown head's heatmap and the grid, in each format, into out_dir as one set (`fileset.write_all`:
    all the files or none). Every path is checked before anything is drawn."""
    out = Path(out_dir)
    for name in file_names((e.shown.layer, e.shown.head), formats):
        _check_path(out / name, force)
    return write_all({out / name: data for name, data in render(e, formats=formats, lang=lang).items()}, force=force)


__all__ = ["heatmap", "grid", "save", "render", "file_names", "fonts", "rc"]
