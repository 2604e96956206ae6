"""The page's views as a registry: one `View` entry each, from which everything that lists views is generated.

    VIEWS                 {name: View}, in the order of the page's tabs
    register(View(...))   a new view: its tab, its pane, `Explanation.show(name)` and `#view=name` follow
    names(page, other)    the views a page opens (`start["view"]`, the URL hash's `view=`, `Explanation.show`)
    as_data(page)         the entries the page builds its tabs and panes from (its data block's "views")

A view draws with one of the page's renderers (`web/static/render/views.js` RENDERERS: "explore" the
stepper's cards, "head" the head view, "model" the model view, "compare" two texts), so a view that shows
what a renderer draws is one entry; a new way of drawing is that renderer and its entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from .texts import LANGS, TEXTS

__all__ = ["View", "VIEWS", "PAGES", "RENDERERS", "register", "unregister", "names", "as_data"]

PAGES = ("explorer", "attention")
"""The explorer (the report and the app: `report.render_html`, `render_app`) and the attention page of
weights given directly (`report.render_attention`: no Q/K/V, so no stepper)."""
RENDERERS = ("explore", "head", "model", "compare")
"""What the page's JS can draw a view with (render/views.js and attention.js)."""
NEEDS = (None, "other")
"""What a view needs besides the shown text: nothing, or a second text (the compare view)."""


@dataclass(frozen=True)
class View:
    """One view of the page.

    name    its key: the tab's data-view, `start["view"]`, `#view=name`, `Explanation.show(name)`
    label   {zh, en}: its tab
    title   {zh, en}: its pane's heading (a renderer may write a fuller one: the head view names its layer)
    hint    {zh, en}: how to read it, under the heading ("" for none)
    (the built-in views' words are the text table's: view_head, hv_hint, …)
    render  one of RENDERERS
    needs   one of NEEDS: a view that needs a second text is offered only with one
    pages   the PAGES that have it"""

    name: str
    label: dict[str, str]
    title: dict[str, str]
    hint: dict[str, str]
    render: str
    needs: str | None = None
    pages: tuple[str, ...] = ("explorer",)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"a view's name must be an identifier, got {self.name!r}")
        for field in ("label", "title", "hint"):
            said = getattr(self, field)
            if not isinstance(said, dict) or not all(isinstance(said.get(lang), str) for lang in LANGS):
                raise ValueError(f"view {self.name!r} needs {field} = {{zh, en}}, got {said!r}")
        if self.render not in RENDERERS:
            raise ValueError(f"view {self.name!r}: render must be one of {', '.join(RENDERERS)}, got {self.render!r}")
        if self.needs not in NEEDS:
            raise ValueError(f"view {self.name!r}: needs must be None or 'other', got {self.needs!r}")
        if not self.pages or any(p not in PAGES for p in self.pages):
            raise ValueError(f"view {self.name!r}: pages must be some of {', '.join(PAGES)}, got {self.pages!r}")
        if self.render == "explore" and "attention" in self.pages:
            raise ValueError(f"view {self.name!r}: the attention page has no stepper to explore with")

    def as_data(self) -> dict:
        return {
            "name": self.name,
            "label": dict(self.label),
            "title": dict(self.title),
            "hint": dict(self.hint),
            "render": self.render,
            "needs": self.needs,
        }


VIEWS: dict[str, View] = {}
"""Every view, in the order of the page's tabs (`register` adds one)."""


def register(view: View) -> View:
    """Add a view (its name must be new): the page's tabs, the URL hash and `Explanation.show` offer it."""
    if not isinstance(view, View):
        raise TypeError(f"register takes a View, got {type(view).__name__}")
    if view.name in VIEWS:
        raise ValueError(f"view {view.name!r} is already registered")
    VIEWS[view.name] = view
    return view


def unregister(name: str) -> None:
    """Remove a view `register` added."""
    if name not in VIEWS:
        raise ValueError(f"no view {name!r}: the registered ones are {', '.join(VIEWS)}")
    del VIEWS[name]


def names(page: str = "explorer", *, other: bool = True) -> tuple[str, ...]:
    """The views `page` can open; other=False leaves out those that need a second text."""
    if page not in PAGES:
        raise ValueError(f"page must be one of {', '.join(PAGES)}, got {page!r}")
    return tuple(v.name for v in VIEWS.values() if page in v.pages and (other or v.needs is None))


def as_data(page: str = "explorer") -> list[dict]:
    """The entries of `page` as its data block carries them (the JS builds the tabs and panes from them)."""
    return [VIEWS[name].as_data() for name in names(page)]


NO_HINT = {"zh": "", "en": ""}

for _view in (
    View("explore", TEXTS["page.view_explore"], TEXTS["page.view_explore"], NO_HINT, render="explore"),
    View("head", TEXTS["page.view_head"], TEXTS["page.view_head"], TEXTS["page.hv_hint"], render="head", pages=PAGES),
    View("model", TEXTS["page.view_model"], TEXTS["page.mv_title"], TEXTS["page.mv_hint"], render="model", pages=PAGES),
    View(
        "compare",
        TEXTS["page.view_compare"],
        TEXTS["page.view_compare"],
        TEXTS["page.cmp_hint"],
        render="compare",
        needs="other",
    ),
):
    register(_view)
