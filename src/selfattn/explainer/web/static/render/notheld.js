/* A layer whose arrays the page does not hold (a long input over the page's budget, or `--layers`): the page
 * says so under that layer's name, names the layers it holds and how to get this one, and draws the head's
 * thumbnail (every head has one: Python's doc.display) — never another layer's heatmap or stages. The
 * heatmap, its legend and the stepper are marked .arrays in the template and hidden while #app[data-held="0"]. */

import { $, el } from "../dom.js";
import { layerRanges } from "../format.js";
import { docSource } from "../sources.js";
import { thumbnail } from "./modelview.js";

const NOTE_THUMB_PX = 240; // the side of the thumbnail drawn in the note, in CSS pixels

/** The layers whose arrays the document holds. */
export function heldLayers(doc) {
  return doc.layers.map((layer, l) => (layer.omitted ? null : l)).filter((l) => l !== null);
}

/** The note for the shown (layer, head) when its layer is not held, with the head's thumbnail. */
export function notHeldNote(state, t) {
  const doc = state.doc;
  const box = el("div", { class: "not-held", "data-testid": "not-held", "data-layer": state.layer });
  const live = state.mode === "live";
  box.append(el("p", { class: "warn" }, t(live ? "page.not_held_live" : "page.not_held", { layer: state.layer,
    head: state.head, held: layerRanges(heldLayers(doc)) || "—" })));
  const src = docSource(doc);
  if (src.thumb(state.layer, state.head)) {
    const { canvas } = thumbnail(src, state.layer, state.head);
    canvas.style.width = canvas.style.height = `${NOTE_THUMB_PX}px`;
    canvas.dataset.testid = "not-held-thumb";
    box.append(canvas, el("p", { class: "hint" }, t("page.not_held_thumb", { layer: state.layer, head: state.head })));
  }
  return box;
}

/** Show the note in the explore view when the shown layer is not held, else hide it. */
export function renderNotHeld(state, t) {
  const root = $("not-held");
  if (!state.doc.layers[state.layer].omitted) {
    root.replaceChildren();
    root.hidden = true;
    return;
  }
  root.hidden = false;
  root.replaceChildren(notHeldNote(state, t));
}
