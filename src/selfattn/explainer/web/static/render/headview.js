/* The head view (bertviz's): queries on the left, keys on the right, one line per (query, key) weight of
 * every head of one layer switched on; width ∝ weight, colour = head. Hover a token: only its lines.
 * A long input draws only the lines above a threshold, and says which. */

import { el } from "../dom.js";
import { pct } from "../format.js";

export const LINE_PX = 8; // the width of a line of weight 100%, in CSS pixels
export const MIN_WEIGHT = 0.01; // weights below 1% draw no line
export const START_ALL_HEADS = 8; // up to this many heads the view starts with all drawn; past it, the shown one
export const MAX_LINES = 3000; // at most this many lines (a long input keeps only the strongest)
const ROW_PX = 22, LONG_ROW_PX = 14; // the height of one token row (short input, long input)
const LONG = 64; // from this many tokens on, the rows are LONG_ROW_PX
const WIDTH_PX = 560, TEXT_PX = 150; // the drawing, and the room for each column of token texts
const SVG = "http://www.w3.org/2000/svg";
export const HEAD_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
  "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"];

export function headColour(h) {
  return HEAD_COLOURS[h % HEAD_COLOURS.length];
}

/** The lines to draw: every visible (query, key) of the heads switched on with weight ≥ threshold.
 * threshold = MIN_WEIGHT, raised to the MAX_LINES-th largest weight when more pairs pass it. */
export function headLines(src, l, heads) {
  const L = src.tokens.length;
  let lines = [];
  for (const h of heads) {
    for (let i = 0; i < L; i++) {
      for (let j = 0; j < L; j++) {
        if (!src.visible(l, h, i, j)) continue;
        const w = src.weight(l, h, i, j);
        if (w >= MIN_WEIGHT) lines.push({ h, i, j, w });
      }
    }
  }
  const total = lines.length;
  let threshold = MIN_WEIGHT;
  if (total > MAX_LINES) {
    const sorted = lines.map((line) => line.w).sort((a, b) => b - a);
    threshold = sorted[MAX_LINES - 1];
    lines = lines.filter((line) => line.w >= threshold);
  }
  return { lines, threshold, total, limited: total > MAX_LINES };
}

function svgEl(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

/** The button that draws every head (when some are off), or only the shown one again (when all are on):
 * it changes view.heads (the page's set) and draws the view again. */
function allOrOne(root, src, view, t) {
  const all = view.heads.size < src.nHeads;
  const one = view.current === null || view.current === undefined ? 0 : view.current;
  const b = el("button", { type: "button", class: "hv-all", "data-testid": all ? "hv-all" : "hv-one" },
    all ? t("page.hv_all", { n: src.nHeads }) : t("page.hv_only", { head: one }));
  b.addEventListener("click", () => {
    view.heads.clear();
    for (let h = 0; h < src.nHeads; h++) if (all || h === one) view.heads.add(h);
    renderHeadView(root, src, view, t);
  });
  return b;
}

/** Draw into `root` (a container): the head toggles, the note, the drawing. view = {layer, heads: Set,
 * current: head highlighted or null}. A toggle is a button[data-head] (the page listens on root). */
export function renderHeadView(root, src, view, t) {
  const L = src.tokens.length;
  const toggles = el("div", { class: "hv-heads", "data-testid": "hv-heads" });
  for (let h = 0; h < src.nHeads; h++) {
    const on = view.heads.has(h);
    const b = el("button", { type: "button", class: on ? "hv-head on" : "hv-head", "data-head": h,
      "data-testid": "hv-toggle", "aria-pressed": on, title: t("page.hv_toggle", { head: h }) }, t("page.head_n", { head: h }));
    b.style.borderColor = headColour(h);
    if (on) b.style.backgroundColor = headColour(h);
    if (h === view.current) b.classList.add("current");
    toggles.append(b);
  }
  if (src.nHeads > 1) toggles.append(allOrOne(root, src, view, t));
  const { lines, threshold, total, limited } = headLines(src, view.layer, [...view.heads].sort((a, b) => a - b));
  const note = el("p", { class: "hint", "data-testid": "hv-note" },
    t(limited ? "page.hv_note_long" : "page.hv_note", { drawn: lines.length, total, threshold: pct(threshold) }));
  if (view.heads.size === 1 && src.nHeads > START_ALL_HEADS) note.prepend(`${t("page.hv_folded", { n: src.nHeads, head: [...view.heads][0] })} `);
  const row = L >= LONG ? LONG_ROW_PX : ROW_PX;
  const height = row * L + row;
  const svg = svgEl("svg", { width: WIDTH_PX, height, viewBox: `0 0 ${WIDTH_PX} ${height}`, "data-testid": "hv-svg",
    role: "img", "data-threshold": threshold, "data-lines": lines.length, "data-layer": view.layer });
  const y = (i) => row * (i + 1);
  const left = TEXT_PX, right = WIDTH_PX - TEXT_PX;
  const group = svgEl("g", { class: "hv-lines" });
  for (const line of lines) {
    group.append(svgEl("line", { x1: left + 4, y1: y(line.i), x2: right - 4, y2: y(line.j), stroke: headColour(line.h),
      "stroke-width": line.w * LINE_PX, "stroke-opacity": 0.55, "data-head": line.h, "data-i": line.i,
      "data-j": line.j, "data-w": line.w, "data-testid": "hv-line" }));
  }
  svg.append(group);
  const font = L >= LONG ? 11 : 13;
  src.tokens.forEach((tok, i) => {
    for (const side of ["q", "k"]) {
      const text = svgEl("text", { x: side === "q" ? left - 6 : right + 6, y: y(i), "text-anchor": side === "q" ? "end" : "start",
        "dominant-baseline": "middle", "font-size": font, class: "hv-tok", "data-side": side, "data-index": i,
        "data-testid": `hv-${side}` });
      text.textContent = tok.length > 14 ? tok.slice(0, 13) + "…" : tok;
      svg.append(text);
    }
  });
  const focus = (side, i) => {
    for (const line of group.children) {
      const mine = side === null || Number(line.dataset[side === "q" ? "i" : "j"]) === i;
      line.style.display = mine ? "" : "none";
    }
    svg.dataset.focus = side === null ? "" : `${side}${i}`;
  };
  svg.addEventListener("mouseover", (e) => {
    const tok = e.target.closest(".hv-tok");
    if (tok) focus(tok.dataset.side, Number(tok.dataset.index));
  });
  svg.addEventListener("mouseleave", () => focus(null));
  root.replaceChildren(toggles, note, el("div", { class: "hv-scroll" }));
  root.lastChild.append(svg);
}
