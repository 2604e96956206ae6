/* The token strip: hover a token to see what it attends to, click it to pick it as the query. */

import { $, el } from "../dom.js";
import { shownWeight } from "../data.js";
import { pct, rgb, shade } from "../format.js";

const TOP_ATTENDED = 3; // tokens named in "… attends to"

export function renderTokens(state, t) {
  const box = $("tokens");
  box.replaceChildren();
  const unknownAt = new Set(state.doc.unknown ? state.doc.unknown.positions : []);
  state.doc.tokens.forEach((tok, i) => {
    const span = el("span", { class: "tok", "data-testid": "token", "data-index": i, tabindex: 0, role: "button",
      "aria-label": t("page.tok_label", { i, token: tok }) }, tok);
    if (/^<[^<>]*>$/.test(tok)) span.classList.add("special");
    if (unknownAt.has(i)) span.classList.add("unk");
    box.append(span);
  });
}

/** The strip without weights (a layer the page does not hold): only the query marked. */
export function unpaintTokens(state) {
  const spans = $("tokens").children;
  for (let j = 0; j < spans.length; j++) {
    Object.assign(spans[j].style, { backgroundColor: "", color: "" });
    spans[j].classList.toggle("query", j === state.row);
    spans[j].classList.toggle("selected", j === state.row);
    spans[j].title = "";
  }
  $("attends").textContent = "";
}

/** Colour every token by the weight that query i gives it (the shown head), and name the top ones. */
export function paintTokens(state, t, i) {
  const doc = state.doc;
  if (doc.layers[state.layer].omitted) {
    unpaintTokens(state);
    return;
  }
  const head = doc.layers[state.layer].heads[state.head];
  const L = doc.tokens.length;
  const w = Array.from({ length: L }, (_, j) => shownWeight(head, i, j));
  const spans = $("tokens").children;
  for (let j = 0; j < L; j++) {
    const span = spans[j];
    span.style.backgroundColor = rgb(shade(w[j]));
    span.style.color = w[j] > 0.3 ? "#fff" : "";
    span.classList.toggle("query", j === i);
    span.classList.toggle("selected", j === state.row);
    span.title = pct(w[j]);
  }
  const top = Array.from(w.keys()).sort((a, b) => w[b] - w[a]).slice(0, TOP_ATTENDED).filter((j) => w[j] > 0);
  const list = top.map((j) => `${doc.tokens[j]} ${pct(w[j])}`).join(" · ");
  $("attends").textContent = t("page.attends", { token: doc.tokens[i], list });
}
