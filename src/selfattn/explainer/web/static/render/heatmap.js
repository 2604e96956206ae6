/* The heatmap: the shown head's L×L weights (0.01 %, as Python stored them) drawn once into an
 * ImageData, then scaled onto the canvas; hover for a cell's weight, click or arrows to pick.
 * A layer with attention sinks gets one more column, set apart right of the matrix and labelled:
 * each row's share of the sink (`sink`, shipped by Python: 1 − the row's weights), on the same scale. */

import { $, el } from "../dom.js";
import { bit, shownWeight, visibleOf } from "../data.js";
import { HIDDEN_RGB, HIGH_RGB, LOW_RGB, pct, rgb, shade } from "../format.js";
import { sharesOf, shownShare } from "./contribution.js";

const LABELLED_HEATMAP = 48; // up to this many tokens the heatmap carries the token texts
const HEATMAP_PX = 520; // side of the drawn L×L picture, in CSS pixels (at most)
const MIN_HEATMAP_PX = 240; // … and at least
const LABELLED_CELL_PX = 36; // side of one cell of a short (labelled) input
const HEATMAP_PAD_PX = 24; // room right of and below the picture for the last tick label
const CJK = /[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]/; // in the saved PNG, written upright
const LABEL_FONT_PX = 13, TICK_FONT_PX = 11; // a token's label, a position's tick
const LABEL_PX = 15; // the thickness of a label (one line of LABEL_FONT_PX) with its gap: labels are this far apart
const MAX_TICKS = 8; // a long input labels at most this many positions per axis
const TICK_BOX_PX = 40; // the width of a tick's label above its column (centred on it)
const SINK_GAP_PX = 14; // the blank between the matrix and the sink column
const MIN_SINK_PX = 14; // the sink column is at least this wide (a long input's cells are thinner)
const FONT = '"WenQuanYi Micro Hei", "Noto Sans CJK SC", "Source Han Sans SC", "PingFang SC", ' +
  '"Microsoft YaHei", sans-serif';

/** An L×L canvas, one pixel per (query, key): colour(value(i, j)) where visible, grey where hidden. */
export function picture(L, visible, value, colour = shade) {
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = L;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(L, L);
  for (let i = 0; i < L; i++) {
    for (let j = 0; j < L; j++) {
      const c = bit(visible, i, j) ? colour(value(i, j)) : HIDDEN_RGB;
      const p = 4 * (i * L + j);
      img.data[p] = c[0];
      img.data[p + 1] = c[1];
      img.data[p + 2] = c[2];
      img.data[p + 3] = 255;
    }
  }
  ctx.putImageData(img, 0, 0);
  return canvas;
}

/** The picture of head (l, h) of a document: its weights, or with measure "contributions" the contribution
 * shares Python shipped for it (the weights where it shipped none: render/contribution.js says so). */
export function headPicture(doc, l, h, measure = "weights") {
  const head = doc.layers[l].heads[h];
  const shares = measure === "contributions" ? sharesOf(doc, l, h) : null;
  const value = shares ? (i, j) => shownShare(shares, i, j) : (i, j) => shownWeight(head, i, j);
  return picture(doc.tokens.length, visibleOf(doc.layers[l], h), value);
}

/** The colour scale: white = 0, the darkest blue = 100%, shades ∝ √weight in between. */
export function renderLegend(t) {
  $("legend-bar").style.background = `linear-gradient(to right, ${rgb(LOW_RGB)}, ${rgb(HIGH_RGB)})`;
  $("legend-low").textContent = pct(0);
  $("legend-mid").textContent = t("page.legend_mid", { weight: pct(1 / 4) });
  $("legend-high").textContent = pct(1);
  $("legend-note").textContent = t("page.legend");
}

/** Row i's share of the sink, as Python shipped it (a head without sinks: undefined). */
export function sinkShare(head, i) {
  return head.sink === undefined ? undefined : head.sink.data[i];
}

function geometry(L, sink = false) {
  const labelled = L <= LABELLED_HEATMAP;
  const margin = labelled ? 96 : 36;
  const size = labelled ? Math.min(HEATMAP_PX, Math.max(MIN_HEATMAP_PX, L * LABELLED_CELL_PX)) : HEATMAP_PX;
  const cell = size / L;
  const sinkWidth = sink ? Math.max(cell, MIN_SINK_PX) : 0;
  return { L, margin, size, cell, sinkLeft: margin + size + SINK_GAP_PX, sinkWidth };
}

function shownGeometry(state) {
  return geometry(state.doc.tokens.length, sinkShare(state.doc.layers[state.layer].heads[state.head], 0) !== undefined);
}

export function drawHeatmap(state, t) {
  const doc = state.doc;
  const canvas = $("heatmap");
  const { L, margin, size, cell, sinkLeft, sinkWidth } = shownGeometry(state);
  const height = margin + size + HEATMAP_PAD_PX;
  const width = height + (sinkWidth ? SINK_GAP_PX + sinkWidth : 0);
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, width, height);
  ctx.imageSmoothingEnabled = L > size; // shrink a long input smoothly, enlarge a short one crisply
  ctx.drawImage(state.picture.canvas, margin, margin, size, size);
  const visible = visibleOf(doc.layers[state.layer], state.head);
  if (L <= LABELLED_HEATMAP) drawHidden(ctx, visible, margin, cell, L);
  const head = doc.layers[state.layer].heads[state.head];
  if (sinkWidth) drawSink(ctx, head, { L, margin, cell, sinkLeft, sinkWidth });
  const g = shownGeometry(state);
  placeLabels(axisLabels(doc.tokens, g, t), g, L <= LABELLED_HEATMAP);
  ctx.strokeStyle = "#f97316"; // the selected query row
  ctx.lineWidth = 2;
  ctx.strokeRect(margin - 1, margin + state.row * cell - 1, size + 2, Math.max(cell, 1) + 2);
  if (sinkWidth) ctx.strokeRect(sinkLeft - 1, margin + state.row * cell - 1, sinkWidth + 2, Math.max(cell, 1) + 2);
  if (state.focus !== null) { // the key whose K and V are shown
    ctx.strokeStyle = "#111827";
    ctx.strokeRect(margin + state.focus * cell, margin + state.row * cell, Math.max(cell, 2), Math.max(cell, 2));
  }
  const j = state.focus === null ? state.row : state.focus;
  const w = shownWeight(doc.layers[state.layer].heads[state.head], state.row, j);
  canvas.setAttribute("aria-label", t("page.map_label",
    { i: state.row, query: doc.tokens[state.row], j, key: doc.tokens[j], weight: pct(w) }));
}

/** The sink column: one cell per query row in the weights' colours, framed (its name: a label above it). */
function drawSink(ctx, head, g) {
  for (let i = 0; i < g.L; i++) {
    ctx.fillStyle = rgb(shade(sinkShare(head, i)));
    ctx.fillRect(g.sinkLeft, g.margin + i * g.cell, g.sinkWidth, Math.max(g.cell, 1));
  }
  ctx.strokeStyle = "#6b7280";
  ctx.lineWidth = 1;
  ctx.strokeRect(g.sinkLeft - 0.5, g.margin - 0.5, g.sinkWidth + 1, g.L * g.cell + 1);
}

/** A hatch over every hidden cell (mask 0) of a short input: not a colour that could be read as a weight. */
function drawHidden(ctx, visible, margin, cell, L) {
  ctx.strokeStyle = "rgba(255, 255, 255, 0.7)";
  ctx.lineWidth = 1;
  for (let i = 0; i < L; i++) {
    for (let j = 0; j < L; j++) {
      if (bit(visible, i, j)) continue;
      const x = margin + j * cell, y = margin + i * cell;
      ctx.beginPath();
      ctx.moveTo(x + 2, y + cell - 2);
      ctx.lineTo(x + cell - 2, y + 2);
      ctx.stroke();
    }
  }
}

/** The axis labels the heatmap shows: {axis: "row" | "col" | "sink", index, text, title, at} with `at` the
 * centre of its row or column in CSS px from the picture's corner. A short input names its tokens, a long one
 * its positions (ticks); either way only every `step`-th, so that no two labels are closer than LABEL_PX
 * (the labels are LABEL_PX thick: one line across a row, one upright line along a column). */
export function axisLabels(tokens, g, t) {
  const { L, margin, cell } = g;
  const labelled = L <= LABELLED_HEATMAP;
  const step = labelled ? Math.ceil(LABEL_PX / cell) : tickStep(L);
  const out = [];
  for (let i = 0; i < L; i += step) {
    const text = labelled ? clip(tokens[i], CJK.test(tokens[i]) ? 6 : 8) : String(i);
    const title = `${i} · ${tokens[i]}`;
    out.push({ axis: "row", index: i, text, title, at: margin + (i + 0.5) * cell });
    out.push({ axis: "col", index: i, text, title, at: margin + (i + 0.5) * cell });
  }
  if (!g.sinkWidth) return out;
  const sink = g.sinkLeft + g.sinkWidth / 2; // a tick too close to the sink's name gives way to it
  const room = (labelled ? LABEL_PX : TICK_BOX_PX + LABEL_PX) / 2;
  const kept = out.filter((lab) => lab.axis === "row" || sink - lab.at >= room);
  return [...kept, { axis: "sink", index: -1, text: t("common.sink"), title: t("common.sink"), at: sink }];
}

/** Ticks of a long input: a round step (1, 2, 5 × 10^k) giving at most MAX_TICKS of them. */
function tickStep(L) {
  const unit = Math.pow(10, Math.floor(Math.log10(L / MAX_TICKS)));
  return [1, 2, 5, 10].map((k) => k * unit).find((s) => L / s <= MAX_TICKS);
}

/** The labels as text in the page (#heatmap-labels over the canvas): each a span whose title names its
 * position and whole token. Rows right-aligned left of the picture; a token's column label upright above
 * its column, a tick level above it. */
function placeLabels(labels, g, labelled) {
  const spans = labels.map((lab) => {
    const kind = lab.axis === "row" ? "row" : labelled || lab.axis === "sink" ? "col" : "tick";
    const span = el("span", { class: `hl hl-${kind}`, title: lab.title, "data-testid": "heatmap-label",
      "data-axis": lab.axis, "data-index": lab.index }, lab.text);
    span.style.fontSize = `${labelled ? LABEL_FONT_PX : TICK_FONT_PX}px`;
    if (kind === "row") Object.assign(span.style, { top: `${lab.at - LABEL_PX / 2}px`, width: `${g.margin - 8}px` });
    else if (kind === "col") Object.assign(span.style, { left: `${lab.at - LABEL_PX / 2}px`, height: `${g.margin - 8}px` });
    else Object.assign(span.style, { left: `${lab.at - TICK_BOX_PX / 2}px`, top: `${g.margin - 8 - LABEL_PX}px` });
    return span;
  });
  $("heatmap-labels").replaceChildren(...spans);
}

/** The same labels drawn onto a copy of the picture (the saved PNG): columns upright, CJK one character
 * under the other (rotated, 一 would read as "|"). */
function drawLabels(ctx, labels, g, labelled) {
  ctx.fillStyle = "#333";
  ctx.font = `${labelled ? LABEL_FONT_PX : TICK_FONT_PX}px ${FONT}`;
  ctx.textBaseline = "middle";
  for (const lab of labels) {
    if (lab.axis === "row") {
      ctx.textAlign = "right";
      ctx.fillText(lab.text, g.margin - 8, lab.at, g.margin - 10);
    } else if (!labelled && lab.axis !== "sink") {
      ctx.textAlign = "center";
      ctx.fillText(lab.text, lab.at, g.margin - 8 - LABEL_PX / 2, TICK_BOX_PX);
    } else if (CJK.test(lab.text)) {
      const chars = Array.from(lab.text);
      ctx.textAlign = "center";
      chars.forEach((ch, k) => ctx.fillText(ch, lab.at, g.margin - 12 - (chars.length - 1 - k) * LABEL_PX));
    } else {
      ctx.save();
      ctx.translate(lab.at, g.margin - 6);
      ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left";
      ctx.fillText(lab.text, 0, 0, g.margin - 8);
      ctx.restore();
    }
  }
}

function clip(tok, n) {
  return tok.length > n ? tok.slice(0, n - 1) + "…" : tok;
}

/** The (query, key) cell under a mouse event, or null. */
export function cellAt(state, event) {
  const { L, margin, size } = shownGeometry(state);
  const rect = $("heatmap").getBoundingClientRect();
  const x = event.clientX - rect.left - margin;
  const y = event.clientY - rect.top - margin;
  if (x < 0 || y < 0 || x >= size || y >= size) return null;
  return { i: Math.floor((y / size) * L), j: Math.floor((x / size) * L), x: x + margin, y: y + margin };
}

/** The query row of the sink column under a mouse event, or null. */
function sinkAt(state, event) {
  const { L, margin, size, sinkLeft, sinkWidth } = shownGeometry(state);
  const rect = $("heatmap").getBoundingClientRect();
  const x = event.clientX - rect.left, y = event.clientY - rect.top - margin;
  if (!sinkWidth || x < sinkLeft || x >= sinkLeft + sinkWidth || y < 0 || y >= size) return null;
  return { i: Math.floor((y / size) * L), x, y: y + margin };
}

export function showTip(state, t, event) {
  const tip = $("tip");
  const doc = state.doc;
  const s = sinkAt(state, event);
  const c = s ? null : cellAt(state, event);
  if (s) {
    const value = pct(sinkShare(doc.layers[state.layer].heads[state.head], s.i));
    tip.textContent = t("page.sink_tip", { i: s.i, query: doc.tokens[s.i], value });
    placeTip(tip, s.x, s.y);
    return;
  }
  if (!c) {
    tip.hidden = true;
    return;
  }
  const layer = doc.layers[state.layer];
  const visible = bit(visibleOf(layer, state.head), c.i, c.j);
  const value = visible ? pct(shownWeight(layer.heads[state.head], c.i, c.j)) : t("page.tip_hidden");
  tip.textContent = t("page.tip", { i: c.i, query: doc.tokens[c.i], j: c.j, key: doc.tokens[c.j], value });
  const shares = state.measure === "contributions" ? sharesOf(doc, state.layer, state.head) : null;
  if (shares && visible) tip.textContent += " · " + t("page.contribution_bar", { share: pct(shownShare(shares, c.i, c.j)) });
  placeTip(tip, c.x, c.y);
}

/** Show the tip beside the pointer at (x, y) (CSS px in the picture), on the side with the more room, so
 * that it stays inside the picture's box (which scrolls on a narrow page and would clip it). */
function placeTip(tip, x, y) {
  const box = $("heatmap");
  const right = x < box.clientWidth / 2, below = y < box.clientHeight / 2;
  tip.style.left = right ? `${x + 14}px` : "";
  tip.style.right = right ? "" : `${box.clientWidth - x + 14}px`;
  tip.style.top = below ? `${y + 14}px` : "";
  tip.style.bottom = below ? "" : `${box.clientHeight - y + 14}px`;
  tip.hidden = false;
}

/** Save the heatmap as a PNG: the picture with its labels drawn in. */
export function savePicture(state, t) {
  const shown = $("heatmap");
  const copy = document.createElement("canvas");
  copy.width = shown.width;
  copy.height = shown.height;
  const ctx = copy.getContext("2d");
  ctx.drawImage(shown, 0, 0);
  const dpr = window.devicePixelRatio || 1;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  const g = shownGeometry(state);
  drawLabels(ctx, axisLabels(state.doc.tokens, g, t), g, g.L <= LABELLED_HEATMAP);
  copy.toBlob((blob) => {
    const url = URL.createObjectURL(blob);
    const a = el("a", { href: url, download: `attention-layer${state.layer}-head${state.head}.png` });
    a.click();
    setTimeout(() => URL.revokeObjectURL(url), 0);
  });
}
