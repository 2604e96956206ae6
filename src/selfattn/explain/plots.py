"""Pictures of attention: one head's heatmap, and the layer × head grid. PNG or SVG (by suffix).

Chinese tick labels need a CJK font; matplotlib is pointed at "WenQuanYi Micro Hei" (Debian's
fonts-wqy-microhei), inside `matplotlib.rc_context` for one picture: each picture is an explicit
Figure on an Agg canvas, so neither the global backend nor the global rcParams are touched. Without such a font, labels with CJK characters would render as boxes,
so `save` refuses with an error that says what to install.
"""

from __future__ import annotations

from pathlib import Path

from .export import head_weights

CJK_FONTS = ("WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "Noto Sans CJK SC", "Noto Sans CJK JP")
FONT_FILES = ("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc", "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc")
FORMATS = (".png", ".svg")
GRID_CELL_INCHES = 2.2
MAX_HEATMAP_INCHES = 12.0
DPI = 150


def fonts(needs_cjk: bool) -> list[str]:
    """The sans-serif font list for the pictures: the installed CJK fonts first, then DejaVu Sans.
    Refuses (ValueError) when CJK labels must be drawn and no CJK font is installed."""
    from matplotlib import font_manager

    for f in FONT_FILES:  # a stale font cache may not know a font installed after it was built
        if Path(f).is_file() and f not in {e.fname for e in font_manager.fontManager.ttflist}:
            font_manager.fontManager.addfont(f)
    installed = {e.name for e in font_manager.fontManager.ttflist}
    cjk = [f for f in CJK_FONTS if f in installed]
    if needs_cjk and not cjk:
        raise ValueError("no CJK font found for the Chinese labels (looked for " + ", ".join(CJK_FONTS) +
                         "); install one, e.g. `apt-get install fonts-wqy-microhei`")
    return cjk + ["DejaVu Sans"]


def rc(needs_cjk: bool) -> dict:
    """matplotlib settings for one picture, applied with `matplotlib.rc_context` (never globally)."""
    return {"font.family": "sans-serif", "font.sans-serif": fonts(needs_cjk), "axes.unicode_minus": False,
            "svg.fonttype": "path"}  # glyphs as outlines: the SVG looks the same without the font


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
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ValueError(f"picture path must end in {' or '.join(FORMATS)}, got {path.name!r}")
    if path.exists() and not force:
        raise FileExistsError(f"{path} already exists; pass --force to overwrite")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def heatmap(doc: dict, layer: int, head: int, path, *, force: bool = False) -> Path:
    """One head's weights, query rows × key columns, token labels on both axes."""
    path = _check_path(path, force)
    tokens = doc["tokens"]
    import matplotlib

    with matplotlib.rc_context(rc(_has_cjk(tokens))):
        return _heatmap(doc, layer, head, path, tokens)


def _heatmap(doc: dict, layer: int, head: int, path: Path, tokens: list[str]) -> Path:
    w = head_weights(doc, layer, head)
    lay = doc["layers"][layer]
    visible = lay["heads"][head].get("visible", lay["visible"])   # a head an intervention changed: its own
    L = len(tokens)
    size = min(MAX_HEATMAP_INCHES, 3.0 + 0.45 * L)
    fig = _figure(figsize=(size + 1.2, size))
    ax = fig.add_subplot()
    im = ax.imshow(w, cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
    if L <= 40:
        ax.set_xticks(range(L), tokens, rotation=90 if L > 8 else 0)
        ax.set_yticks(range(L), tokens)
        if L <= 12:
            for i in range(L):
                for j in range(L):
                    if visible[i][j]:
                        ax.text(j, i, f"{w[i, j]:.0%}", ha="center", va="center", fontsize=8,
                                color="white" if w[i, j] > 0.5 else "black")
    ax.set_xlabel("Key")
    ax.set_ylabel("Query")
    ax.set_title(f"{doc['model']['name']} · layer {layer} · head {head}")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="softmax weight")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    return path


def grid(doc: dict, path, *, force: bool = False) -> Path:
    """Every layer × head as a small heatmap, with its mean entropy and first-token attention."""
    path = _check_path(path, force)
    import matplotlib

    with matplotlib.rc_context(rc(False)):
        return _grid(doc, path)


def _grid(doc: dict, path: Path) -> Path:
    m = doc["model"]
    n_l, n_h = m["n_layers"], m["n_heads"]
    fig = _figure(figsize=(GRID_CELL_INCHES * n_h, GRID_CELL_INCHES * n_l))
    axes = fig.subplots(n_l, n_h, squeeze=False)
    for l in range(n_l):
        for h in range(n_h):
            ax = axes[l][h]
            ax.imshow(head_weights(doc, l, h), cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
            s = doc["summaries"][l][h]
            ax.set_title(f"L{l} H{h}  H={s['entropy']:.2f}b  first={s['first_token']:.0%}", fontsize=7)
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle(f"{m['name']}: attention weights, layer × head")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    return path


def save(doc: dict, out_dir, *, formats=("png", "svg"), force: bool = False) -> list[Path]:
    """The selected head's heatmap and the grid, in each format, into out_dir."""
    out = Path(out_dir)
    sel = doc["selected"]
    paths = []
    for fmt in formats:
        paths.append(heatmap(doc, sel["layer"], sel["head"], out / f"head-L{sel['layer']}-H{sel['head']}.{fmt}", force=force))
        paths.append(grid(doc, out / f"grid.{fmt}", force=force))
    return paths


__all__ = ["heatmap", "grid", "save", "fonts", "rc"]
