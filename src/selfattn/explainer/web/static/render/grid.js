/* The selectors of layer, head and query, and the per-head summary grid (Python's summaries): a deep model's
 * grid opens folded to the rows around the shown layer, with a button for every layer. */

import { $, el, fillSelect } from "../dom.js";
import { pct, rgb, shade } from "../format.js";

const FOLD_LAYERS = 8; // a model with more layers than this opens its grid folded…
const WINDOW_LAYERS = 5; // …to this many rows around the shown layer

export function renderSelectors(state) {
  const doc = state.doc;
  fillSelect($("layer"), doc.layers.map((_, l) => String(l)));
  fillSelect($("head"), doc.summaries[0].map((_, h) => String(h)));
  fillSelect($("query"), doc.tokens.map((tok, i) => `${i} · ${tok}`));
}

export function renderGrid(state, t) {
  const doc = state.doc;
  const top = el("tr");
  top.append(el("th", {}, ""));
  doc.summaries[0].forEach((_, h) => top.append(el("th", {}, t("page.head_n", { head: h }))));
  const [from, to] = foldedRows(state);
  const rows = doc.summaries.map((heads, l) => {
    if (l < from || l > to) return null;
    const tr = el("tr");
    tr.append(el("th", {}, t("common.layer_n", { layer: l })));
    heads.forEach((s, h) => {
      const td = el("td", { "data-testid": "head-cell", "data-layer": l, "data-head": h, tabindex: 0 });
      td.append(el("b", {}, t("page.cell_entropy", { bits: s.entropy.toFixed(2) })),
        el("span", {}, t("page.cell_first", { weight: pct(s.first_token) })));
      const d = doc.descriptions ? doc.descriptions[l][h] : null;
      if (d) { // clamped to a few lines (explorer.css); the whole sentence in its title
        td.append(el("span", { class: "describe", "data-testid": "head-cell-description", title: d.text[state.lang] },
          d.text[state.lang]));
      }
      td.setAttribute("aria-label", d ? t("page.cell_label_text", { layer: l, head: h, text: d.text[state.lang] })
        : t("page.layer_head", { layer: l, head: h }));
      td.classList.toggle("current", l === state.layer && h === state.head);
      td.style.backgroundColor = rgb(shade(s.max_weight * 0.3));
      tr.append(td);
    });
    return tr;
  });
  $("grid").replaceChildren(top, ...rows.filter((tr) => tr !== null));
  renderFold(state, t, from, to);
}

/** The rows the grid shows, [from, to]: every layer, or when the model has more than FOLD_LAYERS and the
 * grid is folded (as it opens), the WINDOW_LAYERS around the shown layer. */
function foldedRows(state) {
  const n = state.doc.summaries.length;
  if (n <= FOLD_LAYERS || $("grid").dataset.unfolded === "1") return [0, n - 1];
  const from = Math.max(0, Math.min(n - WINDOW_LAYERS, state.layer - Math.floor(WINDOW_LAYERS / 2)));
  return [from, from + WINDOW_LAYERS - 1];
}

/** The note under a foldable grid (which layers it shows) and its button (all / only the shown layer's). */
function renderFold(state, t, from, to) {
  const n = state.doc.summaries.length;
  const note = $("grid-note"), button = $("grid-fold");
  note.hidden = button.hidden = n <= FOLD_LAYERS;
  if (n <= FOLD_LAYERS) return;
  const unfolded = $("grid").dataset.unfolded === "1";
  note.textContent = unfolded ? "" : t("page.grid_folded", { from, to, n });
  button.textContent = unfolded ? t("page.grid_fewer") : t("page.grid_all", { n });
  button.setAttribute("aria-expanded", String(unfolded));
  button.onclick = () => {
    $("grid").dataset.unfolded = unfolded ? "0" : "1";
    renderGrid(state, t);
  };
}
