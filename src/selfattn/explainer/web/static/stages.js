/* The tutorial's stages for one query row, read from the data Python computed (views/packing.py):
 *
 *     X → Q/K/V → QKᵀ → ÷√d_k → mask → softmax → ·V → output
 *
 * Nothing here computes a stage: the scores, scaled and masked scores, weights, Σ w·V and Σ w of the
 * row are looked up for the keys the row stores. */

import { bit, row, shownWeight, visibleOf } from "./data.js";

/** The steps, in order, and the text naming each (the ÷√d_k step is named by the data: doc.scale_words). */
export const STAGES = [
  { name: "x", text: "page.x" },
  { name: "qkv", text: "page.st_qkv" },
  { name: "scores", text: "page.qkt" },
  { name: "scaled", text: null },
  { name: "mask", text: "page.st_mask" },
  { name: "softmax", text: "page.st_softmax" },
  { name: "weighted", text: "page.st_weighted" },
  { name: "output", text: "page.st_output" },
];
export const STAGE_NAMES = STAGES.map((s) => s.name);

/** Rows of the key table (one number per key j), the step from which each is shown, and its text. */
export const KEY_ROWS = [
  { name: "scores", from: "scores", text: "page.qkt" },
  { name: "scaled", from: "scaled", text: null },
  { name: "visible", from: "mask", text: "page.row_visible" },
  { name: "masked", from: "mask", text: "page.row_masked" },
  { name: "weights", from: "softmax", text: "page.row_weights" },
];

const STAGE_ROWS = { scores: 0, scaled: 1, masked: 2 }; // the planes of a head's `key_stages` (3, K, L)

/** Query row i of head (l, h): its stored keys (ascending) and, per stored key, its stages. */
export function stageRow(doc, l, h, i) {
  const layer = doc.layers[l];
  const head = layer.heads[h];
  const slots = head.slots[i];
  const keys = Array.from(slots.keys());
  const K = head.keys.shape[1], L = head.weights.shape[1];
  const visible = visibleOf(layer, h);
  const data = head.key_stages.data; // slot-major: stage s, slot c, row i at (s·K + c)·L + i
  const plane = (name) => Float64Array.from({ length: K }, (_, c) => data[(STAGE_ROWS[name] * K + c) * L + i]);
  return {
    keys,
    slots,
    scores: plane("scores"),
    scaled: plane("scaled"),
    masked: plane("masked"),
    weights: Float64Array.from(row(head.keys, i), (j) => (j < L ? shownWeight(head, i, j) : 0)), // per slot
    visible: (j) => bit(visible, i, j),
    weighted: row(head.weighted, i),
    sum: head.sums.data[i],
    lse: head.lse.data[i],
  };
}

/** The value of one key-table row for key j, or undefined when the row does not store key j. */
export function keyValue(st, name, j) {
  if (name === "visible") return st.visible(j);
  const slot = st.slots.get(j);
  return slot === undefined ? undefined : st[name][slot];
}

/** The stored key with the largest weight (the first of equals). */
export function topKey(st) {
  let best = st.keys[0];
  for (const j of st.keys) if (keyValue(st, "weights", j) > keyValue(st, "weights", best)) best = j;
  return best;
}
