/* Vectors and their parts: a vector's length and largest dimensions, q·k as D products, ·V as stacked
 * bars, and the walkthrough's "meaning" bar. Every number is the data's; a product shown (q[d]·k[d],
 * w_j·V_j[d]) is one of the numbers the page holds (q, k, v in float16), beside the score or Σ w·V Python computed
 * from the exact vectors. A layer's d_model vectors are whole only in the layers held in full (doc.full_layers);
 * elsewhere the page holds each row's length and top dimensions, and says so. */

import { el } from "../dom.js";
import { normOf, row, shownWeight, topOf } from "../data.js";
import { num, pct, wholePct } from "../format.js";

const VECTOR_TOP = 4; // a long vector is summarised by its norm and this many largest dimensions
const LEGEND_KEYS = 24; // keys named under the ·V bars
const MIX_DIMS = 32; // a longer V (d_k 256) draws the bars of its MIX_DIMS dims with the largest |Σ w·V|
const PALETTE = ["#1d4ed8", "#f97316", "#059669", "#a21caf", "#dc2626", "#0891b2", "#ca8a04", "#4b5563"];
const MEANINGS = [ // the roles of selfattn.explainer.relations, then the first token, then the rest
  { role: "qm", text: "page.meaning_qm", colour: "#1d4ed8" },
  { role: "colour", text: "page.meaning_colour", colour: "#f97316" },
  { role: "noun", text: "page.meaning_noun", colour: "#059669" },
  { role: "verb", text: "page.meaning_verb", colour: "#a21caf" },
  { role: "place", text: "page.meaning_place", colour: "#dc2626" },
  { role: null, text: "common.first_token", colour: "#9ca3af" },
  { role: null, text: "common.other", colour: "#d1d5db" },
];

/** A labelled vector: its length (`norm`, else of `values`) and largest `count` dimensions, every number one click
 * away (each carries its dimension in data-dim). */
export function vector(t, name, label, values, norm = undefined, count = VECTOR_TOP) {
  const box = el("div", { class: "vec", "data-testid": `vec-${name}` });
  box.append(el("div", { class: "label" }, `${label} (${values.length})`));
  const order = Array.from(values.keys()).sort((a, b) => Math.abs(values[b]) - Math.abs(values[a]));
  const top = order.slice(0, count).map((d) => `d${d} = ${num(values[d])}`).join(" · ");
  const length = norm === undefined ? Math.hypot(...values) : norm; // the exact vector's, where Python sent it
  box.append(el("div", { class: "summary", "data-testid": `vec-${name}-summary` },
    t("page.norm", { norm: num(length), top })));
  const details = el("details", {});
  details.append(el("summary", {}, t("page.all_numbers")));
  const nums = el("div", { class: "nums" });
  values.forEach((v, d) => nums.append(el("span", { "data-dim": d }, num(v))));
  details.append(nums);
  box.append(details);
  return box;
}

/** Row i of one of layer l's d_model vectors (name: x, attn_out, output): whole where the page holds the layer in
 * full, else its length and top dimensions as Python sent them (`topOf`), with the sentence that says where the
 * whole vector is. Never a number of another layer. */
export function layerVector(t, doc, l, name, label, i) {
  const layer = doc.layers[l];
  if (layer[name]) return vector(t, name, label, row(layer[name], i), normOf(layer, name, i), doc.vector_top);
  const { dims, values } = topOf(layer, name, i);
  const box = el("div", { class: "vec", "data-testid": `vec-${name}`, "data-full": "0" });
  box.append(el("div", { class: "label" }, `${label} (${doc.model.d_model})`));
  const top = Array.from(dims, (d, r) => `d${d} = ${num(values[r])}`).join(" · ");
  box.append(el("div", { class: "summary", "data-testid": `vec-${name}-summary` },
    t("page.norm", { norm: num(normOf(layer, name, i)), top })));
  const full = (doc.full_layers || []).join(", ");
  box.append(el("p", { class: "hint", "data-testid": `vec-${name}-top-only` },
    t("page.vector_top_only", { layer: l, n: dims.length, full })));
  return box;
}

/** q·k as D products q[d]·k[d] of the q and k the page holds (one cell each, data-value exact), and the score of the
 * data, which Python computed from the exact vectors (the products add up to it up to float16's rounding). */
export function qkProducts(t, q, k, score) {
  const box = el("div", { class: "qk", "data-testid": "qk-products" });
  box.append(el("div", { class: "label" }, t("page.qk", { n: q.length })));
  const table = el("table", { class: "keys" });
  const head = el("tr"), prod = el("tr");
  head.append(el("th", {}, "d"));
  prod.append(el("th", {}, "q·k"));
  for (let d = 0; d < q.length; d++) {
    const p = q[d] * k[d];
    head.append(el("th", {}, d));
    const td = el("td", { "data-dim": d, "data-value": p }, num(p, 2));
    td.style.backgroundColor = p >= 0 ? `rgba(29, 78, 216, ${Math.min(0.5, Math.abs(p) / 4)})`
      : `rgba(220, 38, 38, ${Math.min(0.5, Math.abs(p) / 4)})`;
    prod.append(td);
  }
  head.append(el("th", {}, t("page.qk_sum")));
  const shown = score === undefined ? "…" : num(score);
  prod.append(el("td", { "data-testid": "qk-sum", "data-value": score === undefined ? "" : score }, shown));
  table.append(head, prod);
  const wrap = el("div", { class: "scroll" });
  wrap.append(table);
  box.append(wrap);
  return box;
}

/** ·V as stacked bars: for each dimension d, one segment w_j·V_j[d] per key j (positive to the right
 * of the axis, negative to the left) beside the data's Σ_j w_j·V_j[d]. */
export function mixBars(t, doc, head, i, weighted) {
  const box = el("div", { class: "mix", "data-testid": "mix-bars" });
  box.append(el("div", { class: "label" }, t("page.mix")));
  const L = doc.tokens.length, dv = weighted.length;
  const w = Array.from({ length: L }, (_, j) => shownWeight(head, i, j));
  const keys = Array.from(w.keys()).filter((j) => w[j] > 0);
  const part = (j, d) => w[j] * row(head.v, j)[d];
  let scale = 1e-9;
  for (let d = 0; d < dv; d++) {
    let pos = 0, neg = 0;
    for (const j of keys) {
      const c = part(j, d);
      if (c > 0) pos += c; else neg -= c;
    }
    scale = Math.max(scale, pos, neg);
  }
  const dims = Array.from(weighted.keys());
  if (dv > MIX_DIMS) {
    dims.sort((a, b) => Math.abs(weighted[b]) - Math.abs(weighted[a]));
    dims.length = MIX_DIMS;
    dims.sort((a, b) => a - b);
    box.append(el("p", { class: "hint", "data-testid": "mix-some" }, t("page.mix_some", { n: MIX_DIMS, dv })));
  }
  for (const d of dims) {
    const bar = el("div", { class: "mixrow", "data-testid": "mix-row", "data-dim": d, "data-value": weighted[d] });
    bar.append(el("span", { class: "dim" }, `d${d}`));
    const track = el("span", { class: "track" });
    let left = 50, right = 50;
    for (const j of keys) {
      const c = part(j, d);
      const width = (50 * Math.abs(c)) / scale;
      const seg = el("span", { class: "seg", "data-key": j, "data-value": c, title: `${doc.tokens[j]}: ${num(c)}` });
      seg.style.width = `${width}%`;
      seg.style.left = `${c >= 0 ? right : left - width}%`;
      seg.style.backgroundColor = PALETTE[j % PALETTE.length];
      if (c >= 0) right += width; else left -= width;
      track.append(seg);
    }
    bar.append(track, el("span", { class: "val" }, num(weighted[d])));
    box.append(bar);
  }
  const legend = el("div", { class: "mixlegend" });
  for (const j of keys.slice(0, LEGEND_KEYS)) {
    const item = el("span", {}, `${doc.tokens[j]} ${pct(shownWeight(head, i, j))}`);
    item.style.borderLeft = `10px solid ${PALETTE[j % PALETTE.length]}`;
    legend.append(item);
  }
  box.append(legend);
  if (L > keys.length) box.dataset.hiddenKeys = String(L - keys.length);
  return box;
}

/** The walkthrough's one-hot-V "meaning" table on these tokens: the row's weights summed per meaning
 * (doc.roles: each piece's part-of-speech role, selfattn.explainer.analysis.roles), as one stacked bar. */
export function meaningBars(t, doc, head, i) {
  const roles = doc.roles || [];
  const sums = MEANINGS.map(() => 0);
  const first = MEANINGS.length - 2, other = MEANINGS.length - 1;
  for (let j = 0; j < doc.tokens.length; j++) {
    const k = MEANINGS.findIndex((m) => m.role !== null && m.role === roles[j]);
    sums[k >= 0 ? k : j === 0 ? first : other] += shownWeight(head, i, j);
  }
  const box = el("div", { class: "meaning", "data-testid": "meaning" });
  box.append(el("div", { class: "label" }, t("page.meaning")));
  const bar = el("div", { class: "stack" });
  const key = el("div", { class: "mixlegend", "data-testid": "meaning-legend" }); // every label whole, below
  MEANINGS.forEach((m, k) => {
    if (sums[k] <= 0) return;
    const words = `${t(m.text)} ${wholePct(sums[k])}`;
    const seg = el("span", { "data-testid": "meaning-seg", "data-value": sums[k], title: words }, sums[k] >= 0.12 ? words : "");
    seg.style.width = `${100 * sums[k]}%`;
    seg.style.backgroundColor = m.colour;
    bar.append(seg);
    const item = el("span", {}, words);
    item.style.borderLeft = `10px solid ${m.colour}`;
    key.append(item);
  });
  box.append(bar, key);
  return box;
}
