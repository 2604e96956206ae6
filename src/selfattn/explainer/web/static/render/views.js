/* The explorer's views, as its data lists them (viewpanes.js, from Python's registry views/registry.py):
 * each is drawn by one of RENDERERS — "explore" (the heatmap, the head grid and the stepper), "head" (the
 * head view), "model" (the model view), "compare" (two texts, offered when the data has a second). Only the
 * open one is drawn. The URL hash follows the view state (hash.js). */

import { $ } from "../dom.js";
import { docSource } from "../sources.js";
import { showViews, viewNames } from "../viewpanes.js";
import { renderHeadView } from "./headview.js";
import { renderModelView } from "./modelview.js";
import { notHeldNote } from "./notheld.js";
import { renderSideBySide } from "./sidebyside.js";

/** render name → draw(body, title, state, src, t); "explore" is the page's own cards (render/page.js). */
export const RENDERERS = {
  explore: () => {},
  head: (body, title, state, src, t) => {
    title.textContent = t("page.hv_title", { layer: state.layer });
    if (src.held(state.layer)) renderHeadView(body, src, { layer: state.layer, heads: state.hvHeads, current: state.head }, t);
    else body.replaceChildren(notHeldNote(state, t));
  },
  model: (body, title, state, src, t) => renderModelView(body, src, { layer: state.layer, head: state.head }, t),
  compare: (body, title, state, src, t) => renderSideBySide(body, title, state, t),
};

/** The names of the views this page can open: those that need a second text only with one. */
export function viewsOf(state) {
  return viewNames(state.views, Boolean(state.other));
}

export function renderViews(state, t) {
  const view = showViews(state.views, state.view, viewsOf(state), t.lang);
  if (!state.source || state.source.doc !== state.doc) state.source = { doc: state.doc, src: docSource(state.doc) };
  if (view) RENDERERS[view.render]($(`${view.name}-body`), $(`${view.name}-title`), state, state.source.src, t);
}
