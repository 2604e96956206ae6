/* The page's views as its data lists them (data.views: Python's registry, views/registry.py): a tab in
 * nav#views and a pane in #view-panes for each, built once by `buildViews`; `showViews` marks the open one
 * and writes their words. A pane is section#view-{name}[data-render] holding h2#{name}-title, a hint and
 * div#{name}-body, which the renderer named by the entry's `render` draws into. A view rendered "explore"
 * has no pane: it is the page's .v-explore cards (the stepper). The page holds no list of views. */

import { $, el } from "./dom.js";

/** The tabs and panes of `views` ([{name, label, title, hint, render, needs}]). */
export function buildViews(views) {
  $("views").replaceChildren(...views.map((v) => el("button", { type: "button", "data-view": v.name,
    "data-testid": `view-btn-${v.name}` })));
  $("view-panes").replaceChildren(...views.filter((v) => v.render !== "explore").map((v) => {
    const pane = el("section", { id: `view-${v.name}`, class: "card", "data-testid": `view-${v.name}`,
      "data-view": v.name, "data-render": v.render });
    pane.hidden = true;
    pane.append(el("h2", { id: `${v.name}-title` }), el("p", { class: "hint", id: `${v.name}-hint` }),
      el("div", { id: `${v.name}-body`, "data-testid": `${v.name}-body` }));
    return pane;
  }));
}

/** The names of the views a page offers: those that need a second text only with one. */
export function viewNames(views, hasOther) {
  return views.filter((v) => !v.needs || hasOther).map((v) => v.name);
}

/** Mark view `open`, hide the tabs `offered` leaves out, write every tab's and pane's words in `lang`;
 * returns the open entry. */
export function showViews(views, open, offered, lang) {
  let shown = null;
  for (const v of views) {
    const b = $("views").querySelector(`button[data-view="${v.name}"]`);
    b.textContent = v.label[lang];
    b.hidden = !offered.includes(v.name);
    b.classList.toggle("on", v.name === open);
    b.setAttribute("aria-pressed", String(v.name === open));
    if (v.name === open) shown = v;
    if (v.render === "explore") continue;
    $(`view-${v.name}`).hidden = v.name !== open;
    $(`${v.name}-title`).textContent = v.title[lang];
    const hint = $(`${v.name}-hint`);
    hint.textContent = v.hint[lang];
    hint.hidden = !v.hint[lang];
  }
  for (const e of document.querySelectorAll(".v-explore")) e.hidden = !shown || shown.render !== "explore";
  return shown;
}
