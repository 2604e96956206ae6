/* The attention page: the head view and the model view of weights given directly (selfattn.head_view /
 * model_view in a notebook: transformers' output_attentions, or any (layers, heads, L, L) tensor). The
 * data block holds the tokens, the weights packed by Python (views/packing.py: 0.01 %) and each head's type.
 * The view state is in the URL hash as in the explorer: #view=head&layer=1&head=0&query=0. */

import { $ } from "./dom.js";
import { readPageData, unpack } from "./data.js";
import { readHash, writeHash } from "./hash.js";
import { translator } from "./text.js";
import { arraySource } from "./sources.js";
import { renderHeadView } from "./render/headview.js";
import { renderModelView } from "./render/modelview.js";

const VIEWS = ["head", "model"];

function render(state) {
  const t = translator(state.texts, state.lang);
  const src = state.src;
  document.documentElement.lang = state.lang === "zh" ? "zh-CN" : "en";
  for (const e of document.querySelectorAll("[data-i18n]")) e.textContent = t(e.dataset.i18n);
  $("lang").textContent = t("lang");
  $("source").textContent = t("aw_source", { layers: src.nLayers, heads: src.nHeads, n: src.tokens.length });
  for (const b of $("views").querySelectorAll("button[data-view]")) b.classList.toggle("on", b.dataset.view === state.view);
  $("view-head").hidden = state.view !== "head";
  $("view-model").hidden = state.view !== "model";
  const layerSelect = $("layer");
  if (layerSelect.options.length !== src.nLayers) {
    layerSelect.replaceChildren(...Array.from({ length: src.nLayers }, (_, l) => new Option(String(l), String(l))));
  }
  layerSelect.value = String(state.layer);
  if (state.view === "head") {
    $("hv-title").textContent = t("hv_title", { layer: state.layer });
    renderHeadView($("hv-body"), src, { layer: state.layer, heads: state.heads, current: state.head }, t);
  } else {
    renderModelView($("mv-body"), src, { layer: state.layer, head: state.head }, t);
  }
  Object.assign($("app").dataset, { view: state.view, layer: state.layer, head: state.head === null ? "" : state.head,
    lang: state.lang });
  writeHash({ view: state.view, layer: state.layer, head: state.head === null ? 0 : state.head, query: 0 }, $("app"));
  $("app").dataset.ready = "1";
}

/** Open what `want` names, where it exists: a head opens its layer with only that head drawn. */
function apply(state, want) {
  if (want.view !== undefined && VIEWS.includes(want.view)) state.view = want.view;
  if (want.layer !== undefined && want.layer < state.src.nLayers) state.layer = want.layer;
  if (want.head !== undefined && want.head !== null && want.head < state.src.nHeads) {
    state.head = want.head;
    state.heads = new Set([want.head]);
  }
}

function bind(state) {
  $("lang").addEventListener("click", () => {
    state.lang = state.lang === "zh" ? "en" : "zh";
    render(state);
  });
  $("views").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-view]");
    if (b) { state.view = b.dataset.view; render(state); }
  });
  $("layer").addEventListener("change", (e) => { state.layer = Number(e.target.value); render(state); });
  $("hv-body").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-head]");
    if (!b) return;
    const h = Number(b.dataset.head);
    if (state.heads.has(h)) state.heads.delete(h);
    else state.heads.add(h);
    render(state);
  });
  $("mv-body").addEventListener("click", (e) => {
    const b = e.target.closest("button.mv-thumb");
    if (!b) return;
    apply(state, { view: "head", layer: Number(b.dataset.layer), head: Number(b.dataset.head) });
    render(state);
  });
  window.addEventListener("hashchange", () => { apply(state, readHash(window.location.hash, VIEWS)); render(state); });
}

async function start() {
  const data = readPageData();
  const weights = await unpack(data.weights);
  const src = arraySource(data.tokens, weights, data.types, data.head_types);
  const state = { lang: "zh", texts: data.texts, src, view: "head", layer: src.nLayers - 1, head: null,
    heads: new Set(Array.from({ length: src.nHeads }, (_, h) => h)) };
  apply(state, data.start || {});
  apply(state, readHash(window.location.hash, VIEWS));
  bind(state);
  render(state);
}

start().catch((err) => {
  const box = $("error");
  box.textContent = err.message;
  box.hidden = false;
  throw err;
});
