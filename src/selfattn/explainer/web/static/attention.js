/* The attention page: the head view and the model view of weights given directly (selfattn.head_view /
 * model_view in a notebook: transformers' output_attentions, or any (layers, heads, L, L) tensor). The
 * data block holds the tokens, the weights packed by Python (views/packing.py: 0.01 %) and each head's type.
 * The view state is in the URL hash as in the explorer: #view=head&layer=1&head=0&query=0. */

import { $ } from "./dom.js";
import { readPageData, unpack } from "./data.js";
import { readHash, writeHash } from "./hash.js";
import { translator } from "./text.js";
import { arraySource } from "./sources.js";
import { buildViews, showViews, viewNames } from "./viewpanes.js";
import { renderHeadView } from "./render/headview.js";
import { renderModelView } from "./render/modelview.js";

/** render name → draw(body, title, state, t): what this page can draw (no Q/K/V, so no stepper, one text). */
const RENDERERS = {
  head: (body, title, state, t) => {
    title.textContent = t("page.hv_title", { layer: state.src.layerName(state.layer) });
    renderHeadView(body, state.src, { layer: state.layer, heads: state.heads, current: state.head }, t);
  },
  model: (body, title, state, t) => renderModelView(body, state.src, { layer: state.layer, head: state.head }, t),
};

function render(state) {
  const t = translator(state.texts, state.lang);
  const src = state.src;
  document.documentElement.lang = state.lang === "zh" ? "zh-CN" : "en";
  for (const e of document.querySelectorAll("[data-i18n]")) e.textContent = t(e.dataset.i18n);
  $("lang").textContent = t("page.lang");
  $("source").textContent = t("page.aw_source", { layers: src.nLayers, heads: src.nHeads, n: src.tokens.length });
  const view = showViews(state.views, state.view, state.names, state.lang);
  const layerSelect = $("layer");
  if (layerSelect.options.length !== src.nLayers) {
    layerSelect.replaceChildren(...Array.from({ length: src.nLayers }, (_, l) => new Option(String(src.layerName(l)), String(l))));
  }
  layerSelect.value = String(state.layer);
  RENDERERS[view.render]($(`${view.name}-body`), $(`${view.name}-title`), state, t);
  Object.assign($("app").dataset, { view: state.view, layer: src.layerName(state.layer), head: state.head === null ? "" : state.head,
    lang: state.lang });
  writeHash({ view: state.view, layer: src.layerName(state.layer), head: state.head === null ? 0 : state.head, query: 0 },
    $("app"));
  $("app").dataset.ready = "1";
}

/** Open what `want` names, where it exists: a head opens its layer with only that head drawn. A layer is
 * named by its number (`src.layerName`: the model's, where only some layers are drawn), in the hash too. */
function apply(state, want) {
  if (want.view !== undefined && state.names.includes(want.view)) state.view = want.view;
  const l = want.layer === undefined ? -1 : state.src.layerIndex(want.layer);
  if (l >= 0) state.layer = l;
  if (want.head !== undefined && want.head !== null && want.head < state.src.nHeads) {
    state.head = want.head;
    state.heads = new Set([want.head]);
  }
  if (Array.isArray(want.heads)) {
    const drawn = want.heads.filter((h) => Number.isInteger(h) && h < state.src.nHeads);
    if (drawn.length) state.heads = new Set(drawn);
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
  $("view-panes").addEventListener("click", (e) => {
    const pane = e.target.closest("section[data-render]");
    const b = pane && e.target.closest(pane.dataset.render === "head" ? "button[data-head]" : "button.mv-thumb");
    if (!b) return;
    if (pane.dataset.render === "head") {
      const h = Number(b.dataset.head);
      if (state.heads.has(h)) state.heads.delete(h);
      else state.heads.add(h);
    } else {
      apply(state, { view: "head", layer: state.src.layerName(Number(b.dataset.layer)), head: Number(b.dataset.head) });
    }
    render(state);
  });
  window.addEventListener("hashchange", () => { apply(state, readHash(window.location.hash, state.names)); render(state); });
}

async function start() {
  const data = readPageData();
  const weights = await unpack(data.weights);
  const src = arraySource(data.tokens, weights, data.types, data.head_types, data.layer_numbers);
  const names = viewNames(data.views, false);
  const state = { lang: data.lang === "en" ? "en" : "zh", texts: data.texts, src, views: data.views, names,
    view: names[0], layer: src.nLayers - 1, head: null, heads: new Set(Array.from({ length: src.nHeads }, (_, h) => h)) };
  buildViews(data.views);
  apply(state, data.start || {});
  apply(state, readHash(window.location.hash, names));
  bind(state);
  render(state);
}

start().catch((err) => {
  const box = $("error");
  box.textContent = err.message;
  box.hidden = false;
  throw err;
});
