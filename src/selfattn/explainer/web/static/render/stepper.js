/* The stage stepper: the real numbers of the selected query row, step by step, and the key table.
 * A layer with attention sinks adds the sink as a last column of the key table, set apart: its logit in
 * the masked row and the row's share of it in the weights row, both as Python shipped them. */

import { $, el } from "../dom.js";
import { row, shownWeight } from "../data.js";
import { sinkShare } from "./heatmap.js";
import { sharesOf, shownShare } from "./contribution.js";
import { num, pct, rgb, shade } from "../format.js";
import { comparable } from "../state.js";
import { KEY_ROWS, STAGE_NAMES, STAGES, keyValue, stageRow } from "../stages.js";
import { layerVector, meaningBars, mixBars, qkProducts, vector } from "./vectors.js";

const NOT_STORED = "…"; // a number the page does not hold (a long row stores its top keys)

/** The name of step s (the ÷√d_k step is named by the data: it depends on the intervention). */
function stageTitle(state, t, s) {
  const stage = STAGES[s];
  return stage.text ? t(stage.text) : state.doc.scale_words.stage[state.lang];
}

export function renderStepper(state, t) {
  $("steps").replaceChildren(...STAGES.map((stage, s) => {
    const b = el("button", { type: "button", "data-testid": `stage-btn-${stage.name}`, "data-stage": s }, stageTitle(state, t, s));
    b.classList.toggle("current", s === state.stage);
    b.classList.toggle("done", s < state.stage);
    return b;
  }));
  $("prev").disabled = state.stage === 0;
  $("next").disabled = state.stage === STAGES.length - 1;
  renderPanel(state, t);
}

function renderPanel(state, t) {
  const doc = state.doc;
  const { layer: l, head: h, row: i } = state;
  const st = stageRow(doc, l, h, i);
  const name = STAGE_NAMES[state.stage];
  const panel = $("panel");
  const layer = doc.layers[l];
  const head = layer.heads[h];
  panel.replaceChildren(el("h3", {}, t("page.step", { n: state.stage + 1, total: STAGES.length, name: stageTitle(state, t, state.stage) })));
  panel.append(el("p", { class: "explain", "data-testid": "stage-explain" }, explanation(state, t, name, st)));
  if (name === "x") panel.append(layerVector(t, doc, l, "x", t("page.x") + `[${i}]`, i));
  if (name === "scores") panel.append(qkProducts(t, row(head.q, i), row(head.k, state.focus), keyValue(st, "scores", state.focus)));
  if (name === "qkv") {
    const j = state.focus;
    panel.append(vector(t, "q", `${t("page.vec_q")}[${i}]`, row(head.q, i)),
      vector(t, "k", `${t("page.vec_k")}[${j}] “${doc.tokens[j]}”`, row(head.k, j)),
      vector(t, "v", `${t("page.vec_v")}[${j}] “${doc.tokens[j]}”`, row(head.v, j)));
  }
  if (state.stage >= STAGE_NAMES.indexOf("qkv")) panel.append(keyTable(state, t, st));
  if (name === "softmax" || name === "weighted") {
    panel.append(el("p", { class: "hint", "data-testid": "weights-sum" }, t("page.sum", { sum: pct(st.sum) })));
    const sink = sinkShare(head, i);
    if (sink !== undefined) {
      const words = t("page.sink_sum", { sink: pct(sink), logit: num(layer.sinks[h]) });
      panel.append(el("p", { class: "hint", "data-testid": "sink-sum", "data-value": String(sink) }, words));
    }
  }
  if (name === "weighted") {
    panel.append(vector(t, "weighted", `${t("common.weighted")}[${i}]`, st.weighted), mixBars(t, doc, head, i, st.weighted),
      meaningBars(t, doc, head, i));
    if (sharesOf(doc, l, h) && doc.contributions.text) {
      panel.append(el("p", { class: "explain", "data-testid": "contribution-text" }, doc.contributions.text[state.lang]));
    }
  }
  if (name === "output") {
    panel.append(layerVector(t, doc, l, "attn_out", `${t("common.attn_out")}[${i}]`, i),
      layerVector(t, doc, l, "output", `${t("common.layer_output")}[${i}]`, i));
  }
  for (const j of [i, state.focus]) { // keep the query's own column and the focused key in view
    const cell = panel.querySelector(`.keys th[data-key="${j}"]`);
    const wrap = cell ? cell.closest(".scroll") : null;
    if (wrap && (cell.offsetLeft < wrap.scrollLeft || cell.offsetLeft + cell.offsetWidth > wrap.scrollLeft + wrap.clientWidth)) {
      wrap.scrollLeft = cell.offsetLeft - wrap.clientWidth / 2;
    }
  }
}

function explanation(state, t, name, st) {
  const doc = state.doc;
  const i = state.row;
  const layer = doc.layers[state.layer];
  switch (name) {
    case "x": return t("page.ex_x", { i, token: doc.tokens[i], d_model: doc.model.d_model, norm: formulaText(state, t, "x") });
    case "qkv": return t("page.ex_qkv", { head: state.head, formula: formulaText(state, t, "qkv") });
    case "scores": return t("page.ex_scores");
    case "scaled": return t("page.ex_scaled", { scale: num(layer.scale), how: doc.scale_words.how[state.lang] });
    case "mask": return layer.causal ? t("page.ex_mask_on") : t("page.ex_mask_off");
    case "softmax": return layer.sinks ? t("page.ex_softmax_sink", { lse: num(st.lse), sink: num(layer.sinks[state.head]) })
      : t("page.ex_softmax", { lse: num(st.lse) });
    case "weighted": return t("page.ex_weighted", { head: state.head });
    default: return t("page.ex_output");
  }
}

/** The model's own formula of a step (Python's explainer/formula.py, read from its modules), in the page's language. */
function formulaText(state, t, step) {
  const f = state.doc.model.formula;
  if (f) return f.text[step][state.lang];
  return step === "x" ? t("page.formula_x_unknown") : t("page.formula_qkv_unknown");
}

/** The key columns: the keys the row stores (all of a short input; the top ones of a long one) and the focus. */
function shownKeys(state, st) {
  const keys = new Set(st.keys);
  if (state.focus !== null) keys.add(state.focus);
  return Array.from(keys).sort((a, b) => a - b);
}

function keyTable(state, t, st) {
  const doc = state.doc;
  const L = doc.tokens.length;
  const keys = shownKeys(state, st);
  const wrap = el("div", { class: "scroll" });
  const table = el("table", { class: "keys", "data-testid": "key-table" });
  const top = el("tr");
  top.append(el("th", {}, t("page.key")));
  for (const j of keys) {
    const th = el("th", { "data-key": j, class: "keyhead" });
    th.append(el("span", { class: "idx" }, j), el("span", { class: "word" }, doc.tokens[j]));
    th.classList.toggle("focus", j === state.focus);
    top.append(th);
  }
  const head = doc.layers[state.layer].heads[state.head];
  const withSink = sinkShare(head, state.row) !== undefined;
  if (withSink) top.append(setApart(el("th", { "data-testid": "sink-head", class: "keyhead" }, t("common.sink"))));
  table.append(top);
  for (const { name, from, text } of KEY_ROWS) {
    if (state.stage < STAGE_NAMES.indexOf(from)) continue;
    const label = text ? t(text) : doc.scale_words.row[state.lang];
    const cells = name === "weights" ? weightCells(head, state.row, keys) : keys.map((j) => {
      const v = keyValue(st, name, j);
      return { j, value: v, text: v === undefined ? NOT_STORED : name === "visible" ? String(v) : num(v) };
    });
    const tr = keyRow(state, t, name, label, cells);
    if (withSink) tr.append(sinkCell(state, name));
    table.append(tr);
  }
  const shares = sharesOf(doc, state.layer, state.head);
  if (shares && state.stage >= STAGE_NAMES.indexOf("weighted")) { // beside the weights: what each key contributes
    const cells = keys.map((j) => {
      const share = shownShare(shares, state.row, j);
      return { j, value: share, text: pct(share), shade: share };
    });
    table.append(keyRow(state, t, "contribution", t("page.tab_contributions"), cells));
  }
  const base = comparable(state);
  if (base && !base.layers[state.layer].omitted && state.stage >= STAGE_NAMES.indexOf("softmax")) {
    const before = base.layers[state.layer].heads[state.head];
    table.append(keyRow(state, t, "baseline", t("page.baseline"), weightCells(before, state.row, keys)));
    const delta = keys.map((j) => {
      const v = shownWeight(head, state.row, j) - shownWeight(before, state.row, j);
      return { j, value: v, text: pct(v) };
    });
    table.append(keyRow(state, t, "delta", t("page.difference"), delta));
  }
  wrap.append(table);
  const box = el("div", {});
  if (keys.length < L) box.append(el("p", { class: "hint" }, t("page.shown_keys", { n: keys.length, n_keys: L, top: doc.shown_keys.top })));
  box.append(wrap);
  return box;
}

/** The sink's cell of a key-table row: its logit in the masked row, the row's share in the weights row, else
 * empty (the sink is no token: it has no q·k score and no visibility of its own). */
function sinkCell(state, name) {
  const layer = state.doc.layers[state.layer];
  const td = setApart(el("td", { "data-testid": `sink-${name}` }, ""));
  if (name === "masked") {
    td.textContent = num(layer.sinks[state.head]);
    td.dataset.value = String(layer.sinks[state.head]);
  } else if (name === "weights") {
    const w = sinkShare(layer.heads[state.head], state.row);
    td.textContent = pct(w);
    td.dataset.value = String(w);
    td.style.backgroundColor = rgb(shade(w));
    if (w > 0.3) td.style.color = "#fff";
  }
  return td;
}

function setApart(cell) {
  cell.style.borderLeft = "3px double #9ca3af";
  return cell;
}

/** Weights: shown as the page shows every weight (0.01 %), the number it holds in data-value. */
function weightCells(head, i, keys) {
  return keys.map((j) => {
    const shown = shownWeight(head, i, j);
    return { j, value: shownWeight(head, i, j), text: pct(shown), shade: shown };
  });
}

function keyRow(state, t, name, label, cells) {
  const tr = el("tr", { "data-testid": `row-${name}` });
  tr.append(el("th", {}, label));
  for (const { j, value, text, shade: w } of cells) {
    const td = el("td", { "data-key": j }, text);
    if (value !== undefined) td.dataset.value = String(value);
    else td.title = t("page.not_stored");
    if (w !== undefined) td.style.backgroundColor = rgb(shade(w));
    if (w !== undefined && w > 0.3) td.style.color = "#fff";
    if (name === "visible" && !value) td.classList.add("hidden");
    td.classList.toggle("focus", j === state.focus);
    tr.append(td);
  }
  return tr;
}
