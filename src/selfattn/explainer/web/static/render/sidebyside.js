/* The compare view: one head (the shown layer and head) on two texts side by side, the selected query's
 * row of weights in each, and their difference when the texts have the same number of tokens. */

import { el } from "../dom.js";
import { shownWeight, visibleOf } from "../data.js";
import { diverging, pct } from "../format.js";
import { headPicture, picture } from "./heatmap.js";

const SIDE_PX = 240; // the side of each picture

function paint(source) {
  const canvas = document.createElement("canvas");
  const dpr = window.devicePixelRatio || 1;
  canvas.width = canvas.height = Math.round(SIDE_PX * dpr);
  canvas.style.width = canvas.style.height = `${SIDE_PX}px`;
  const ctx = canvas.getContext("2d");
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(source, 0, 0, canvas.width, canvas.height);
  return canvas;
}

function figure(caption, canvas, testid) {
  canvas.dataset.testid = testid;
  const f = el("figure");
  f.append(el("figcaption", {}, caption), canvas);
  return f;
}

function rowTable(t, docs, l, h, i) {
  const [a, b] = docs;
  const table = el("table", { class: "cmp-rows", "data-testid": "cmp-rows" });
  const names = [["page.cmp_which_a", a], ["page.cmp_which_b", b]];
  for (const [key, doc] of names) {
    const tr = el("tr", { "data-testid": key === "page.cmp_which_a" ? "cmp-row-a" : "cmp-row-b" });
    tr.append(el("th", {}, t(key)));
    if (i >= doc.tokens.length) {
      tr.append(el("td", { class: "hint" }, t("page.cmp_no_row", { i })));
    } else {
      doc.tokens.forEach((tok, j) => {
        const td = el("td", { "data-key": j, title: tok }, pct(shownWeight(doc.layers[l].heads[h], i, j)));
        td.prepend(el("span", { class: "word" }, tok));
        tr.append(td);
      });
    }
    table.append(tr);
  }
  if (a.tokens.length === b.tokens.length) {
    const tr = el("tr", { "data-testid": "cmp-row-d" });
    tr.append(el("th", {}, t("page.difference")));
    a.tokens.forEach((_, j) => {
      const d = shownWeight(b.layers[l].heads[h], i, j) - shownWeight(a.layers[l].heads[h], i, j);
      tr.append(el("td", { "data-key": j }, pct(d)));
    });
    table.append(tr);
  }
  return table;
}

/** Draw into `root` (its heading: `title`) state.doc (first text) and state.other (second) on (state.layer,
 * state.head). */
export function renderSideBySide(root, title, state, t) {
  const a = state.doc, b = state.other;
  const { layer: l, head: h, row: i } = state;
  title.textContent = t("page.cmp_title", { layer: l, head: h });
  if (a.layers[l].omitted || b.layers[l].omitted) {
    root.replaceChildren(el("p", { class: "hint" }, t("page.mv_omitted")));
    return;
  }
  const pictures = el("div", { class: "cmp-pictures" });
  pictures.append(figure(t("page.cmp_a", { text: a.text }), paint(headPicture(a, l, h)), "cmp-a"),
    figure(t("page.cmp_b", { text: b.text }), paint(headPicture(b, l, h)), "cmp-b"));
  const parts = [pictures];
  if (a.tokens.length === b.tokens.length) {
    const L = a.tokens.length;
    const delta = (p, q) => shownWeight(b.layers[l].heads[h], p, q) - shownWeight(a.layers[l].heads[h], p, q);
    pictures.append(figure(t("page.cmp_diff"), paint(picture(L, visibleOf(a.layers[l], h), delta, diverging)), "cmp-diff"));
  } else {
    parts.push(el("p", { class: "hint", "data-testid": "cmp-lengths" }, t("page.cmp_lengths", { a: a.tokens.length, b: b.tokens.length })));
  }
  parts.push(el("h3", {}, t("page.cmp_row", { i })), rowTable(t, [a, b], l, h, i));
  root.replaceChildren(...parts);
}
