/* The heatmap's two measures: the weights α_ij, or what each key contributes to the head's output,
 * ‖α_ij · v_j W_O^h‖ as a share of its row (Python's views/contribution_words.py, for the head shown first only).
 * The page computes neither: it shows the shares Python shipped (doc.contributions.packed, 0.01 %). */

import { $ } from "../dom.js";

/** Head (l, h)'s contribution shares {shape, data, unit} as Python shipped them, or null (another head). */
export function sharesOf(doc, l, h) {
  const c = doc.contributions;
  return c && c.packed && c.packed.data && c.layer === l && c.head === h ? c.packed : null;
}

/** The share of (i, j) as the page shows it (0.01 %). */
export function shownShare(shares, i, j) {
  return shares.data[i * shares.shape[1] + j] / (shares.unit || 1);
}

/** The measure buttons (hidden without contributions) and the note under them: the shown head's sentence, or
 * why another head has none. */
export function renderMeasure(state, t) {
  const c = state.doc.contributions;
  const box = $("measure");
  box.hidden = !c || !c.packed;
  for (const b of box.querySelectorAll("button[data-measure]")) {
    b.classList.toggle("current", b.dataset.measure === state.measure);
    b.setAttribute("aria-pressed", String(b.dataset.measure === state.measure));
  }
  const note = $("contribution-note");
  note.hidden = true;
  if (box.hidden || state.measure !== "contributions") return;
  if (!sharesOf(state.doc, state.layer, state.head)) {
    note.textContent = t("page.contribution_head_only", { layer: c.layer, head: c.head });
  } else {
    note.textContent = [c.text ? c.text[state.lang] : "", typeWords(state, t)].filter((s) => s).join(" · ");
  }
  note.hidden = !note.textContent;
}

/** Whether the shown head's first-token type holds on the weights and on the contribution shares (Python's
 * head_types measured on each), or "" where either was not measured. */
function typeWords(state, t) {
  const c = state.doc.contributions;
  const described = state.doc.descriptions;
  const onShares = c.first_type ? c.first_type[c.head] : null;
  const onWeights = described ? described[c.layer][c.head].scores.first : null;
  if (!onShares || !onWeights || !onShares.rows || !onWeights.rows) return "";
  const word = (m) => t(m.credited ? "page.type_credited" : "page.type_not_credited");
  return t("page.contribution_type", { on_weights: word(onWeights), on_shares: word(onShares) });
}
