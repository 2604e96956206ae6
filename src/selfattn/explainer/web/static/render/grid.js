/* The selectors of layer, head and query, and the per-head summary grid (Python's summaries). */

import { $, el, fillSelect } from "../dom.js";
import { pct, rgb, shade } from "../format.js";

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
  const rows = doc.summaries.map((heads, l) => {
    const tr = el("tr");
    tr.append(el("th", {}, t("common.layer_n", { layer: l })));
    heads.forEach((s, h) => {
      const td = el("td", { "data-testid": "head-cell", "data-layer": l, "data-head": h, tabindex: 0 });
      td.append(el("b", {}, t("page.cell_entropy", { bits: s.entropy.toFixed(2) })),
        el("span", {}, t("page.cell_first", { weight: pct(s.first_token) })));
      const d = doc.descriptions ? doc.descriptions[l][h] : null;
      if (d) td.append(el("span", { class: "describe", "data-testid": "head-cell-description" }, d.text[state.lang]));
      td.setAttribute("aria-label", d ? t("page.cell_label_text", { layer: l, head: h, text: d.text[state.lang] })
        : t("page.layer_head", { layer: l, head: h }));
      td.classList.toggle("current", l === state.layer && h === state.head);
      td.style.backgroundColor = rgb(shade(s.max_weight * 0.3));
      tr.append(td);
    });
    return tr;
  });
  $("grid").replaceChildren(top, ...rows);
}
