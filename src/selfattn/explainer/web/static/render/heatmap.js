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
const CJK = /[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]/; // a column label with these is written upright
const VERTICAL_LINE_PX = 13; // the step between two upright characters of a column label
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
  ctx.fillStyle = "#333";
  ctx.font = `${L <= LABELLED_HEATMAP ? 13 : 11}px ${FONT}`;
  const visible = visibleOf(doc.layers[state.layer], state.head);
  if (L <= LABELLED_HEATMAP) {
    drawLabels(ctx, doc.tokens, margin, cell);
    drawHidden(ctx, visible, margin, cell, L);
  } else {
    drawTicks(ctx, margin, cell, L);
  }
  const head = doc.layers[state.layer].heads[state.head];
  if (sinkWidth) drawSink(ctx, t, head, { L, margin, cell, sinkLeft, sinkWidth, labelled: L <= LABELLED_HEATMAP });
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

/** The sink column: one cell per query row in the weights' colours, framed, its name above it. */
function drawSink(ctx, t, head, g) {
  for (let i = 0; i < g.L; i++) {
    ctx.fillStyle = rgb(shade(sinkShare(head, i)));
    ctx.fillRect(g.sinkLeft, g.margin + i * g.cell, g.sinkWidth, Math.max(g.cell, 1));
  }
  ctx.strokeStyle = "#6b7280";
  ctx.lineWidth = 1;
  ctx.strokeRect(g.sinkLeft - 0.5, g.margin - 0.5, g.sinkWidth + 1, g.L * g.cell + 1);
  ctx.fillStyle = "#333";
  ctx.save();
  ctx.translate(g.sinkLeft + g.sinkWidth / 2, g.margin - 6);
  if (g.labelled) ctx.rotate(-Math.PI / 3);
  ctx.textAlign = g.labelled ? "left" : "center";
  ctx.fillText(t("common.sink"), 0, 0, g.margin);
  ctx.restore();
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

function drawLabels(ctx, tokens, margin, cell) {
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  tokens.forEach((tok, i) => ctx.fillText(clip(tok), margin - 6, margin + (i + 0.5) * cell, margin - 10));
  ctx.textAlign = "left";
  tokens.forEach((tok, j) => {
    if (CJK.test(tok)) { // written upright, one character under the other (rotated, 一 would read as "/")
      const chars = Array.from(tok.length > 6 ? tok.slice(0, 5) + "…" : tok);
      ctx.textAlign = "center";
      chars.forEach((ch, k) => ctx.fillText(ch, margin + (j + 0.5) * cell, margin - 10 - (chars.length - 1 - k) * VERTICAL_LINE_PX));
      ctx.textAlign = "left";
      return;
    }
    ctx.save();
    ctx.translate(margin + (j + 0.5) * cell, margin - 6);
    ctx.rotate(-Math.PI / 3);
    ctx.fillText(clip(tok), 0, 0, margin);
    ctx.restore();
  });
}


function drawTicks(ctx, margin, cell, L) {
  const step = Math.pow(10, Math.floor(Math.log10(L / 4)));
  ctx.textBaseline = "middle";
  for (let p = 0; p < L; p += step * Math.ceil(L / (step * 8))) {
    ctx.textAlign = "right";
    ctx.fillText(String(p), margin - 4, margin + (p + 0.5) * cell);
    ctx.textAlign = "center";
    ctx.fillText(String(p), margin + (p + 0.5) * cell, margin - 10);
  }
}

function clip(tok) {
  return tok.length > 8 ? tok.slice(0, 7) + "…" : tok;
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
    tip.style.left = `${s.x + 14}px`;
    tip.style.top = `${s.y + 14}px`;
    tip.hidden = false;
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
  tip.style.left = `${c.x + 14}px`;
  tip.style.top = `${c.y + 14}px`;
  tip.hidden = false;
}

export function savePicture(state) {
  $("heatmap").toBlob((blob) => {
    const url = URL.createObjectURL(blob);
    const a = el("a", { href: url, download: `attention-layer${state.layer}-head${state.head}.png` });
    a.click();
    setTimeout(() => URL.revokeObjectURL(url), 0);
  });
}
