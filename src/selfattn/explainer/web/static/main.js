/* selfattn explorer: one page for the HTML report (data inline) and the local web app (`selfattn serve`,
 * data from POST /api/explain). It walks through the tutorial's stages on the real numbers of a model,
 * every number as Python computed it (views/packing.py), every sentence from the data (the catalogue, explainer/locale).
 *
 * The page is ES modules, one job each; report.py inlines them, in dependency order, into the one
 * self-contained file. This one owns the state, wires the events and starts the page. */

import { $ } from "./dom.js";
import { deferred, loadDoc, readPageData, unpackLayers } from "./data.js";
import { relabel } from "./controls.js";
import { fetchLayer, findRemote, setupLive } from "./live.js";
import { applyWanted, createState, isIdentity, select, setDoc } from "./state.js";
import { readHash } from "./hash.js";
import { viewsOf } from "./render/views.js";
import { buildViews } from "./viewpanes.js";
import { STAGES } from "./stages.js";
import { translator } from "./text.js";
import { cellAt, savePicture, showTip } from "./render/heatmap.js";
import { renderAll, renderSelection } from "./render/page.js";
import { paintTokens } from "./render/tokens.js";
import { rankHeld, renderSearchResults, searchPair } from "./render/search.js";
import { renderWords } from "./render/header.js";
import { heldLayers } from "./render/notheld.js";

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

/** The page's controller: the state and what each event does to it. */
function controller(state) {
  const t = () => translator(state.texts, state.lang);
  const redraw = () => {
    if (state.doc) renderAll(state, t());
    else renderWords(state, t());
    relabel($("controls"), state.lang);
  };
  /** Show `doc` on the layer it opens on (its choice, or one `wanted` names, or the kept one), unpacked first. */
  const show = async (doc, keep, wanted = []) => {
    const started = performance.now();
    const mine = ++state.shows;
    const opens = [doc.selected.layer, keep ? state.layer : undefined, ...wanted.map((want) => want.layer)];
    await unpackShown(state, doc, opens.filter((l) => Number.isInteger(l) && l >= 0 && l < doc.layers.length));
    if (mine !== state.shows) return; // a later answer is being shown
    setDoc(state, doc, keep);
    for (const want of wanted) applyWanted(state, want, viewsOf(state));
    redraw();
    $("app").dataset.renderMs = String(Math.round(performance.now() - started));
  };
  const change = (changes) => {
    select(state, changes);
    renderSelection(state, t());
  };

  /** Show head (l, h); its layer's arrays first: in live mode a layer the answer left out is asked for, and a
   * held layer not unpacked yet is unpacked (`loadDoc`), once however often it is picked meanwhile; only the
   * latest pick is shown when it arrives. */
  const pickHead = async (l, h) => {
    state.want = { layer: l, head: h };
    const fetch = state.doc.layers[l].omitted && state.mode === "live"; // offline, the page says it does not hold it
    if (fetch || waiting(state, l)) {
      const doc = state.doc;
      $("app").dataset.ready = "0";
      if (fetch) showLoading(state, l, h, t()); // the numbers of the head shown so far are hidden meanwhile
      if (!state.loading[l]) {
        state.loading[l] = (fetch ? fetchLayer(state, l) : unpackShown(state, doc, [l])).finally(() => delete state.loading[l]);
      }
      try {
        await state.loading[l];
      } catch (err) {
        showError(err.message);
        $("app").dataset.ready = "1";
        return;
      } finally {
        if (!Object.keys(state.loading).length) showLoading(state, null);
      }
      if (state.doc !== doc) return; // a new answer replaced the page meanwhile (and drew itself)
    }
    if (state.want && state.want.layer === l && state.want.head === h) change({ layer: l, head: h });
    else if (!Object.keys(state.loading).length) $("app").dataset.ready = "1";
  };

  const findHeads = async () => {
    const { i, j } = searchPair();
    const doc = state.doc;
    let ranked = rankHeld(doc, i, j);
    if (!ranked && doc.layers.some((layer, l) => !layer.omitted && deferred(doc, l))) { // every held layer's weights
      $("app").dataset.busy = "1";
      try {
        await unpackLayers(doc, doc.layers.map((_, l) => l));
      } finally {
        $("app").dataset.busy = "0";
      }
      if (state.doc !== doc) return;
      ranked = rankHeld(doc, i, j);
    }
    let held = null;
    if (!ranked && state.mode !== "live") { // offline, the layers left out are nowhere to ask for
      ranked = rankHeld(doc, i, j, true);
      held = heldLayers(doc);
    }
    if (!ranked) {
      $("app").dataset.busy = "1";
      try {
        ranked = await findRemote(state, i, j);
      } catch (err) {
        showError(err.message);
        return;
      } finally {
        $("app").dataset.busy = "0";
      }
    }
    renderSearchResults(t(), ranked, held);
  };
  return { t, redraw, show, change, pickHead, findHeads };
}

/** While layer l is fetched for head (l, h): the page says so and hides every number of the head shown so far (its
 * sentence, its arrays, the stepper), and a request sent meanwhile asks for (l, h) (`state.pending`, read by
 * live.js). l null: the wait is over. */
function showLoading(state, l, h, t) {
  const box = $("loading");
  if (l === null) {
    state.pending = null;
    delete $("app").dataset.loading;
    box.hidden = true;
    return;
  }
  state.pending = { layer: l, head: h };
  $("app").dataset.loading = String(l);
  box.textContent = t("page.loading_layer", { layer: l, head: h });
  box.hidden = false;
}

/** The documents shown beside `doc`: the compare view's second text, the baseline of an intervention. */
function besides(state, doc) {
  return [state.other, state.baseline].filter((d) => d && d !== doc);
}

/** Layers `ls` unpacked in `doc` and in the documents shown beside it. */
async function unpackShown(state, doc, ls) {
  await Promise.all([doc, ...besides(state, doc)].map((d) => unpackLayers(d, ls)));
}

/** Whether layer l of the shown document, or of one beside it, is held but not unpacked yet. */
function waiting(state, l) {
  return [state.doc, ...besides(state, state.doc)].some((d) => d.layers[l] && !d.layers[l].omitted && deferred(d, l));
}

/** The nav of views, the head view's toggles, the model view's thumbnails, and the URL hash. */
function bindViews(state, c) {
  $("views").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-view]");
    if (b && state.doc) c.change({ view: b.dataset.view });
  });
  // a pane's clicks, by what draws it: the head view's toggles, the model view's thumbnails
  $("view-panes").addEventListener("click", (e) => {
    const render = (e.target.closest("section[data-render]") || { dataset: {} }).dataset.render;
    const b = e.target.closest(render === "head" ? "button[data-head]" : "button.mv-thumb");
    if (!b || (render !== "head" && render !== "model")) return;
    if (render === "head") {
      const h = Number(b.dataset.head);
      if (state.hvHeads.has(h)) state.hvHeads.delete(h);
      else state.hvHeads.add(h);
      c.change({});
    } else {
      state.view = state.views[0].name;
      c.pickHead(Number(b.dataset.layer), Number(b.dataset.head));
    }
  });
  window.addEventListener("hashchange", () => {
    if (!state.doc) return;
    const want = readHash(window.location.hash, viewsOf(state));
    if (want.view !== undefined && viewsOf(state).includes(want.view)) state.view = want.view;
    const l = want.layer !== undefined && want.layer < state.doc.layers.length ? want.layer : state.layer;
    const h = want.head !== undefined && want.head < state.doc.model.n_heads ? want.head : state.head;
    const row = want.query !== undefined && want.query < state.doc.tokens.length ? want.query : state.row;
    if (row !== state.row) select(state, { row });
    if (l !== state.layer || h !== state.head) c.pickHead(l, h); // live: a layer not held is fetched first
    else c.change({});
  });
}

function bindEvents(state, c) {
  $("lang").addEventListener("click", () => {
    state.lang = state.lang === "zh" ? "en" : "zh";
    c.redraw();
  });
  $("layer").addEventListener("change", (e) => c.pickHead(Number(e.target.value), state.head));
  $("head").addEventListener("change", (e) => c.pickHead((state.want || state).layer, Number(e.target.value)));
  $("query").addEventListener("change", (e) => c.change({ row: Number(e.target.value) }));
  $("grid").addEventListener("click", (e) => {
    const td = e.target.closest("td[data-layer]");
    if (td) c.pickHead(Number(td.dataset.layer), Number(td.dataset.head));
  });
  $("grid").addEventListener("keydown", (e) => {
    const td = e.target.closest("td[data-layer]");
    if (td && (e.key === "Enter" || e.key === " ")) {
      e.preventDefault();
      c.pickHead(Number(td.dataset.layer), Number(td.dataset.head));
    }
  });
  bindTokens(state, c);
  bindHeatmap(state, c);
  $("find").addEventListener("click", () => c.findHeads());
  $("search-results").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-layer]");
    if (b) c.pickHead(Number(b.dataset.layer), Number(b.dataset.head));
  });
  $("steps").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-stage]");
    if (b) c.change({ stage: Number(b.dataset.stage) });
  });
  $("prev").addEventListener("click", () => c.change({ stage: Math.max(0, state.stage - 1) }));
  $("next").addEventListener("click", () => c.change({ stage: Math.min(STAGES.length - 1, state.stage + 1) }));
  $("panel").addEventListener("click", (e) => {
    const cell = e.target.closest("[data-key]");
    if (cell) c.change({ focus: Number(cell.dataset.key) });
  });
}

function bindTokens(state, c) {
  const hover = (event) => {
    const span = event.target.closest(".tok");
    const i = span ? Number(span.dataset.index) : null;
    if (i === state.hover) return;
    state.hover = i;
    paintTokens(state, c.t(), i === null ? state.row : i);
  };
  $("tokens").addEventListener("keydown", (e) => {
    const span = e.target.closest(".tok");
    if (!span) return;
    const i = Number(span.dataset.index);
    const L = state.doc.tokens.length;
    const next = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: L - 1 }[e.key];
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      c.change({ row: i });
    } else if (next !== undefined) {
      e.preventDefault();
      $("tokens").children[Math.max(0, Math.min(L - 1, next))].focus();
    }
  });
  $("tokens").addEventListener("focusin", hover);
  $("tokens").addEventListener("mouseover", hover);
  $("tokens").addEventListener("mouseleave", () => {
    state.hover = null;
    paintTokens(state, c.t(), state.row);
  });
  $("tokens").addEventListener("click", (e) => {
    const span = e.target.closest(".tok");
    if (span) c.change({ row: Number(span.dataset.index) });
  });
}

function bindHeatmap(state, c) {
  const map = $("heatmap");
  map.addEventListener("mousemove", (e) => showTip(state, c.t(), e));
  map.addEventListener("mouseleave", () => ($("tip").hidden = true));
  map.addEventListener("click", (e) => {
    const cell = cellAt(state, e);
    if (cell) c.change({ row: cell.i, focus: cell.j });
  });
  // Arrow keys move the (query, key) cell; Enter / space show that query's stages.
  map.addEventListener("keydown", (e) => {
    const L = state.doc.tokens.length;
    const j = state.focus === null ? state.row : state.focus;
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (moves[e.key]) {
      e.preventDefault();
      const [di, dj] = moves[e.key];
      c.change({ row: Math.max(0, Math.min(L - 1, state.row + di)), focus: Math.max(0, Math.min(L - 1, j + dj)) });
      map.focus();
    } else if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      $("stepper").scrollIntoView({ block: "start" });
    }
  });
  $("save").addEventListener("click", () => savePicture(state, c.t()));
  $("measure").addEventListener("click", (e) => { // the heatmap's measure: weights or contributions
    const b = e.target.closest("button[data-measure]");
    if (b) c.change({ measure: b.dataset.measure });
  });
}

async function start() {
  const data = readPageData();
  const state = createState(data);
  const lang = (data.doc && data.doc.lang) || data.lang; // `selfattn explain --lang en --html`, GET /?lang=en
  if (lang === "zh" || lang === "en") state.lang = lang;
  const c = controller(state);
  buildViews(state.views);
  bindEvents(state, c);
  bindViews(state, c);
  if (data.compare) state.other = await loadDoc(data.compare);
  if (data.mode === "live") setupLive(state, data, { t: c.t, show: c.show, error: showError });
  renderWords(state, c.t());
  relabel($("controls"), state.lang);
  if (data.doc) await c.show(await loadDoc(data.doc), false, [data.start || {}, readHash(window.location.hash, viewsOf(state))]);
  else $("app").dataset.ready = "1";
  if (data.mode === "live" && data.doc && isIdentity(state.doc.experiment.applied)) state.baseline = state.doc;
  if (data.error) showError(data.error);
}

start().catch((err) => {
  showError(err.message);
  throw err;
});
