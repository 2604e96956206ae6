/* The whole page from the state: everything on a new document, the parts that depend on the selection
 * (layer, head, row, stage) on a pick. The shown head's picture is drawn once and kept in the state. */

import { $ } from "../dom.js";
import { writeHash } from "../hash.js";
import { STAGE_NAMES } from "../stages.js";
import { ensureFocus } from "../state.js";
import { renderCompare } from "./compare.js";
import { renderExperiments } from "./experiments.js";
import { renderGrid, renderSelectors } from "./grid.js";
import { renderHeadText, renderModel, renderRule, renderWords } from "./header.js";
import { drawHeatmap, headPicture, renderLegend } from "./heatmap.js";
import { renderMeasure } from "./contribution.js";
import { renderPrediction } from "./prediction.js";
import { renderSearchChoices } from "./search.js";
import { renderNotHeld } from "./notheld.js";
import { renderStepper } from "./stepper.js";
import { paintTokens, renderTokens } from "./tokens.js";
import { renderViews } from "./views.js";

export function renderAll(state, t) {
  $("app").dataset.ready = "0";
  renderWords(state, t);
  renderLegend(t);
  renderModel(state, t);
  renderTokens(state, t);
  renderSelectors(state);
  renderPrediction(state, t);
  renderExperiments(state, t);
  renderSelection(state, t);
  renderSearchChoices(state);
}

/** Everything that depends on (layer, head, row, stage, focus). */
export function renderSelection(state, t) {
  const doc = state.doc;
  if (!doc) return;
  const held = !doc.layers[state.layer].omitted; // else the page says so and draws none of its arrays
  const key = `${state.layer}/${state.head}/${state.measure}`;
  if (held && (!state.picture || state.picture.key !== key)) {
    state.picture = { key, canvas: headPicture(doc, state.layer, state.head, state.measure) };
  }
  if (held) ensureFocus(state);
  $("layer").value = String(state.layer);
  $("head").value = String(state.head);
  $("query").value = String(state.row);
  renderRule(state, t);
  renderHeadText(state, t);
  renderGrid(state, t);
  renderNotHeld(state, t);
  paintTokens(state, t, state.hover === null ? state.row : state.hover);
  renderMeasure(state, t);
  if (held) {
    drawHeatmap(state, t);
    renderCompare(state);
    renderStepper(state, t);
  }
  renderViews(state, t);
  Object.assign($("app").dataset, {
    layer: state.layer, head: state.head, row: state.row, stage: STAGE_NAMES[state.stage], lang: state.lang,
    view: state.view, held: held ? "1" : "0",
  });
  writeHash({ view: state.view, layer: state.layer, head: state.head, query: state.row }, $("app"));
  $("app").dataset.ready = "1";
}
