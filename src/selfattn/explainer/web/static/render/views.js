/* The page's views: "explore" (the heatmap, the head grid and the stepper), "head" (the head view),
 * "model" (the model view) and "compare" (two texts, when the data has a second). The nav shows which is
 * open; only the open one is drawn. The URL hash follows the view state (hash.js). */

import { $ } from "../dom.js";
import { docSource } from "../sources.js";
import { renderHeadView } from "./headview.js";
import { renderModelView } from "./modelview.js";
import { renderSideBySide } from "./sidebyside.js";

export const VIEWS = ["explore", "head", "model", "compare"];

/** The views this page can open: "compare" only with a second text. */
export function viewsOf(state) {
  return state.other ? VIEWS : VIEWS.slice(0, 3);
}

export function renderViews(state, t) {
  for (const b of $("views").querySelectorAll("button[data-view]")) {
    b.hidden = !viewsOf(state).includes(b.dataset.view);
    b.classList.toggle("on", b.dataset.view === state.view);
    b.setAttribute("aria-pressed", String(b.dataset.view === state.view));
  }
  for (const e of document.querySelectorAll(".v-explore")) e.hidden = state.view !== "explore";
  for (const name of VIEWS.slice(1)) $(`view-${name}`).hidden = state.view !== name;
  if (!state.source || state.source.doc !== state.doc) state.source = { doc: state.doc, src: docSource(state.doc) };
  const src = state.source.src;
  if (state.view === "head") {
    $("hv-title").textContent = t("hv_title", { layer: state.layer });
    if (!src.held(state.layer)) return;
    renderHeadView($("hv-body"), src, { layer: state.layer, heads: state.hvHeads, current: state.head }, t);
  } else if (state.view === "model") {
    renderModelView($("mv-body"), src, { layer: state.layer, head: state.head }, t);
  } else if (state.view === "compare") {
    renderSideBySide(state, t);
  }
}
