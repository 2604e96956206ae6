/* The model view (bertviz's): every layer × head as a small heatmap of its weights (the heatmap's colours),
 * its border coloured by its type where the data has one; click a thumbnail to open that head. The types'
 * colours and names are the data's legend (`src.legend`: doc.head_types, from Python's registry of head
 * types, views/head_types.py), so the page holds no list of types. */

import { el } from "../dom.js";
import { HIDDEN_RGB, layerRanges, shade } from "../format.js";

export const THUMB_MAX = 128; // beyond this many tokens a thumbnail pixel is the largest weight of a block

/** A type's name in the page's language (the legend's label), "" for none. */
function typeLabel(legend, type, lang) {
  return type ? legend.labels[type][lang] : "";
}

/** An n×n canvas of head (l, h): from its thumbnail where the source has one (every head, held or not: pixel
 * (a, b) = the mean weight of its cell, grey where a causal layer hides the whole cell), else pixel (a, b) =
 * shade of the largest weight of its block (block 1: the weight). */
export function thumbnail(src, l, h) {
  const thumb = src.thumb(l, h);
  return thumb ? pooled(src, l, h, thumb) : fromWeights(src, l, h);
}

function pooled(src, l, h, thumb) {
  const L = src.tokens.length;
  const n = thumb.shape[0];
  const exact = n === L && src.held(l); // one cell per weight: the layer's own visibility
  const canvas = painted(n, (a, b) => {
    const hidden = exact ? !src.visible(l, h, a, b) : src.causal(l) && b > a;
    return hidden ? HIDDEN_RGB : shade(thumb.data[a * n + b]);
  });
  return { canvas, block: L / n, mean: true };
}

/** An n × n canvas whose pixel (a, b) is colour(a, b) ([r, g, b]). */
function painted(n, colour) {
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = n;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(n, n);
  for (let a = 0; a < n; a++) {
    for (let b = 0; b < n; b++) {
      const c = colour(a, b);
      img.data.set([c[0], c[1], c[2], 255], 4 * (a * n + b));
    }
  }
  ctx.putImageData(img, 0, 0);
  return canvas;
}

function fromWeights(src, l, h) {
  const L = src.tokens.length;
  const block = Math.ceil(L / THUMB_MAX);
  const n = Math.ceil(L / block);
  const canvas = painted(n, (a, b) => {
    let top = -1;
    for (let i = a * block; i < Math.min(L, (a + 1) * block); i++) {
      for (let j = b * block; j < Math.min(L, (b + 1) * block); j++) {
        if (src.visible(l, h, i, j)) top = Math.max(top, src.weight(l, h, i, j));
      }
    }
    return top < 0 ? HIDDEN_RGB : shade(top);
  });
  return { canvas, block };
}

/** Draw the grid into `root`; current = {layer, head} outlined. A thumbnail is a button.mv-thumb with
 * data-layer / data-head (the page listens on root). */
export function renderModelView(root, src, current, t) {
  const L = src.tokens.length;
  const legend = src.legend;
  const table = el("table", { class: "mv-grid", "data-testid": "mv-grid" });
  const top = el("tr");
  top.append(el("th"));
  for (let h = 0; h < src.nHeads; h++) top.append(el("th", {}, t("page.head_n", { head: h })));
  table.append(top);
  let block = 1, mean = false;
  for (let l = 0; l < src.nLayers; l++) {
    const tr = el("tr");
    const name = el("th", {}, t("common.layer_n", { layer: src.layerName(l) }));
    if (!src.held(l)) {
      name.classList.add("mv-not-held");
      name.title = t("page.mv_not_held");
    }
    tr.append(name);
    for (let h = 0; h < src.nHeads; h++) {
      const td = el("td", { "data-layer": l, "data-head": h });
      if (!src.held(l) && !src.thumb(l, h)) {
        td.append(el("span", { class: "hint" }, t("page.mv_omitted")));
        tr.append(td);
        continue;
      }
      const type = src.type(l, h);
      const thumb = thumbnail(src, l, h);
      block = thumb.block;
      mean = !!thumb.mean;
      const held = src.held(l) ? "" : ` · ${t("page.mv_not_held")}`;
      const button = el("button", { type: "button", class: "mv-thumb", "data-testid": "mv-thumb", "data-layer": l,
        "data-head": h, "data-type": type || "", "data-held": src.held(l) ? "1" : "0",
        title: `${t("page.layer_head", { layer: src.layerName(l), head: h })} · ${type ? typeLabel(legend, type, t.lang) : t("page.mv_untyped")}${held}` });
      thumb.canvas.dataset.testid = "mv-canvas";
      button.style.borderColor = (type && legend.colours[type]) || "transparent";
      if (current && current.layer === l && current.head === h) button.classList.add("current");
      button.append(thumb.canvas);
      td.append(button, el("span", { class: "mv-type" }, typeLabel(legend, type, t.lang)));
      tr.append(td);
    }
    table.append(tr);
  }
  table.style.setProperty("--mv-heads", String(src.nHeads)); // the thumbnails' side: explorer.css .mv-grid
  const scroll = el("div", { class: "mv-scroll" });
  scroll.append(table);
  const parts = [scroll];
  const held = heldNames(src);
  if (held !== null) parts.unshift(el("p", { class: "hint", "data-testid": "mv-held" }, t("page.mv_held", { held })));
  if (block > 1) {
    const words = mean ? t("page.mv_pooled_mean", { n: L, block: block.toFixed(1).replace(/\.0$/, "") }) : t("page.mv_pooled", { n: L, block });
    parts.unshift(el("p", { class: "hint", "data-testid": "mv-pooled" }, words));
  }
  const key = el("p", { class: "mv-legend hint", "data-testid": "mv-legend" });
  for (const type of legend.types) {
    const colour = legend.colours[type];
    if (!colour) continue; // a type the model view does not measure (a tutorial link)
    const s = el("span", { class: "mv-key", "data-type": type }, typeLabel(legend, type, t.lang));
    s.style.borderColor = colour;
    key.append(s);
  }
  parts.push(key);
  root.replaceChildren(...parts);
}

/** The layers a page holds in full as ranges ("14–24"), or null when it holds every one. */
function heldNames(src) {
  const held = Array.from({ length: src.nLayers }, (_, l) => l).filter((l) => src.held(l));
  return held.length === src.nLayers ? null : layerRanges(held.map((l) => src.layerName(l)));
}
