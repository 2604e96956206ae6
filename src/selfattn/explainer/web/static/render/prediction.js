/* The next-token prediction, and in live mode with an intervention the prediction without it. */

import { $, el } from "../dom.js";
import { pct } from "../format.js";
import { comparable } from "../state.js";

export function renderPrediction(state, t) {
  const box = $("prediction");
  const doc = state.doc;
  if (!doc.prediction.length) {
    box.replaceChildren(el("p", { class: "hint" }, t("page.no_prediction")));
    return;
  }
  const base = comparable(state);
  const lists = [predictionList("prediction-row", base ? t("page.pred_now") : null, doc.prediction)];
  if (base) lists.push(predictionList("baseline-row", t("page.baseline"), base.prediction));
  box.replaceChildren(el("div", { class: "preds" }));
  box.firstChild.append(...lists);
}

/** A list of next tokens with their probabilities as bars; `word(p)` is the token as written (default: as a person
 * reads it, Python's `shown` — "␣Mary", a part of a character as its bytes "⟨E8⟩", never U+FFFD). */
export function predictionList(testid, title, prediction, word = (p) => (p.shown !== undefined ? p.shown : p.token)) {
  const list = el("div", { class: "pred" });
  if (title) list.append(el("h3", {}, title));
  for (const p of prediction) {
    const r = el("div", { class: "predrow", "data-testid": testid, "data-id": p.id });
    const bar = el("span", { class: "bar" });
    bar.style.width = `${(100 * p.prob).toFixed(1)}%`;
    r.append(el("span", { class: "word" }, word(p)), el("span", { class: "prob" }, pct(p.prob)), el("span", { class: "track" }));
    r.lastChild.append(bar);
    list.append(r);
  }
  return list;
}
