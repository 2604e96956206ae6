/* What the page shows now: one object, created by main.js and passed to whoever reads or changes it.
 * The rules of a change (what a new head or row resets, which key is shown by default) live here. */

import { START_ALL_HEADS } from "./render/headview.js";
import { stageRow, topKey } from "./stages.js";

/** The state of a page built from its data block (`readPageData`). */
export function createState(data) {
  return {
    lang: "zh",
    mode: data.mode,
    texts: data.texts,
    interventions: data.interventions || [],
    pickRule: data.pick_rule || {},
    limits: data.limits || null,
    api: data.api || null,
    doc: null, // the shown page document, arrays unpacked
    baseline: null, // live mode: the same text without intervention
    layer: 0,
    head: 0,
    rule: null, // how (layer, head) was chosen: "auto", "within layer", "within head", null / "user" = by you
    row: 0, // the selected query position i
    stage: 0, // index into STAGES
    focus: null, // the key j whose K and V are shown
    hover: null, // the query position under the mouse (token strip)
    picture: null, // {key: "layer/head/measure", canvas} the heatmap's L×L picture of the shown head
    measure: "weights", // what the heatmap draws: "weights" or "contributions" (render/contribution.js)
    seq: 0, // live mode: number of the latest request
    shows: 0, // number of the latest document being shown (`show` unpacks its layer first)
    want: null, // live mode: the (layer, head) last picked, while its layer is being fetched
    loading: {}, // live mode: layer → the request fetching its arrays
    pending: null, // live mode: the head {layer, head} whose layer is being fetched (main.js showLoading)
    views: data.views, // the page's views, in the order of its tabs (viewpanes.js: Python's views/registry.py)
    view: data.views[0].name, // the open view's name: explore, head, model, compare, … (render/views.js)
    other: null, // the compare view's second document, arrays unpacked
    hvHeads: new Set(), // the heads the head view draws
    source: null, // {doc, src}: the head and model views' reader of state.doc (sources.js)
  };
}

/** Open what `want` names ({view, layer, head, query}: the data's start, then the URL hash), where it
 * exists in the document; anything out of range is left as it was. A layer whose arrays the page does not
 * hold is opened too: the page then says so (render/notheld.js), never showing another layer under its name. */
export function applyWanted(state, want, views) {
  const doc = state.doc;
  if (want.view !== undefined && views.includes(want.view)) state.view = want.view;
  const layer = want.layer !== undefined && want.layer < doc.layers.length ? want.layer : state.layer;
  const head = want.head !== undefined && want.head < doc.model.n_heads ? want.head : state.head;
  if (layer !== state.layer || head !== state.head) select(state, { layer, head });
  if (want.query !== undefined && want.query < doc.tokens.length) select(state, { row: want.query });
}

/** Show `doc`; keepSelection keeps the layer, head and row when they exist in it. */
export function setDoc(state, doc, keepSelection) {
  const L = doc.tokens.length;
  state.doc = doc;
  state.picture = null;
  state.want = null;
  if (!keepSelection || state.layer >= doc.layers.length || state.head >= doc.model.n_heads) {
    state.layer = doc.selected.layer;
    state.head = doc.selected.head;
    state.rule = doc.selected.rule;
  }
  const n = doc.model.n_heads || 0;
  state.hvHeads = new Set(n <= START_ALL_HEADS ? Array.from({ length: n }, (_, h) => h) : [state.head]);
  if (!keepSelection || state.row >= L) {
    // Python's choice (export.opened_query): a row the mask hides keys from, so the mask step shows −inf
    state.row = doc.opened && doc.opened.row < L ? doc.opened.row : L - 1;
    state.focus = null;
  }
}

/** Apply a change of layer, head, row, stage or focus: a new head is "yours", a new row forgets the focus. */
export function select(state, changes) {
  Object.assign(state, changes);
  if ("layer" in changes || "head" in changes) {
    state.rule = "user";
    state.picture = null;
    if (state.hvHeads.size === 1) state.hvHeads = new Set([state.head]); // a head view of one head follows it
  }
  if ("row" in changes && !("focus" in changes)) state.focus = null;
}

/** The key whose K and V are shown, when none is picked: the row's largest weight. */
export function ensureFocus(state) {
  if (state.focus === null) state.focus = topKey(stageRow(state.doc, state.layer, state.head, state.row));
}

/** No intervention applied (the scope alone changes nothing). */
export function isIdentity(applied) {
  return Object.keys(applied).every((name) => name === "layer" || name === "head");
}

function sameTokens(a, b) {
  return !!a && !!b && a.tokens.length === b.tokens.length && a.tokens.every((tok, i) => tok === b.tokens[i]);
}

/** Live mode with an intervention: the baseline document to compare with, or null. */
export function comparable(state) {
  const base = state.baseline;
  if (!base || base === state.doc || isIdentity(state.doc.experiment.applied) || !sameTokens(base, state.doc)) return null;
  return base;
}
