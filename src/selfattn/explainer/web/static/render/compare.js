/* Live mode with an intervention: the baseline, the head now and their difference, side by side on one
 * fixed scale (weights 0 → 100%, differences −100 → +100 points). */

import { $ } from "../dom.js";
import { shownWeight, visibleOf } from "../data.js";
import { diverging } from "../format.js";
import { comparable } from "../state.js";
import { headPicture, picture } from "./heatmap.js";

const COMPARE_PX = 200; // side of the baseline / now / difference pictures

export function renderCompare(state) {
  const base = comparable(state);
  $("compare").hidden = !base;
  if (!base || base.layers[state.layer].omitted) return;
  const { layer: l, head: h } = state;
  const before = base.layers[l].heads[h], now = state.doc.layers[l].heads[h];
  const delta = (i, j) => shownWeight(now, i, j) - shownWeight(before, i, j);
  paintSmall($("basemap"), headPicture(base, l, h));
  paintSmall($("nowmap"), state.picture.canvas);
  paintSmall($("diffmap"), picture(state.doc.tokens.length, visibleOf(state.doc.layers[l], h), delta, diverging));
}

function paintSmall(canvas, source) {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = canvas.height = Math.round(COMPARE_PX * dpr);
  canvas.style.width = canvas.style.height = `${COMPARE_PX}px`;
  const ctx = canvas.getContext("2d");
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(source, 0, 0, canvas.width, canvas.height);
}
