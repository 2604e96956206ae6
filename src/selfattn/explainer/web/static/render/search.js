/* Head search: every head ranked by the weight from one token to another. The report ranks the weights
 * it holds (Python's, at 0.01 % as shown; the pair asked with --find as Python ranked it), and a report that does not hold every layer ranks the heads of those it holds and says so;
 * the app asks the server (`live.js`: findRemote), which holds every layer. */

import { $, el, fillSelect } from "../dom.js";
import { deferred, shownWeight } from "../data.js";
import { layerRanges, pct } from "../format.js";
import { stageRow, topKey } from "../stages.js";

export function renderSearchChoices(state) {
  const labels = state.doc.tokens.map((tok, i) => `${i} · ${tok}`);
  fillSelect($("find-query"), labels);
  fillSelect($("find-key"), labels);
  $("find-query").value = String(state.row);
  $("find-key").value = String(topKey(stageRow(state.doc, state.layer, state.head, state.row)));
  $("search-results").replaceChildren();
  $("search-note").hidden = true;
}

/** The chosen (query, key) of the search box. */
export function searchPair() {
  return { i: Number($("find-query").value), j: Number($("find-key").value) };
}

/** [{layer, head, weight}] from the data the page holds, or null when a layer is not loaded (the app) or not
 * unpacked yet (data.js `unpackLayers`); `heldOnly`: the heads of the layers the page holds, a layer left out
 * left out of the ranking. */
export function rankHeld(doc, i, j, heldOnly = false) {
  if (doc.search && doc.search.query === i && doc.search.key === j) return doc.search.heads;
  if (doc.layers.some((layer, l) => (layer.omitted && !heldOnly) || (!layer.omitted && deferred(doc, l)))) return null;
  const ranked = [];
  doc.layers.forEach((layer, l) => layer.omitted || layer.heads.forEach((head, h) => {
    ranked.push({ layer: l, head: h, weight: shownWeight(head, i, j) });
  }));
  return ranked.sort((a, b) => b.weight - a.weight || a.layer - b.layer || a.head - b.head);
}

/** The ranking, and where it leaves layers out (`held`: the layers ranked) a line saying which it ranked. */
export function renderSearchResults(t, ranked, held = null) {
  $("search-note").hidden = held === null;
  $("search-note").textContent = held === null ? "" : t("page.search_held", { held: layerRanges(held) });
  $("search-results").replaceChildren(...ranked.map((r) => {
    const li = el("li", { "data-testid": "search-row", "data-layer": r.layer, "data-head": r.head, "data-weight": r.weight });
    li.append(el("button", { type: "button", "data-layer": r.layer, "data-head": r.head },
      t("page.search_row", { layer: r.layer, head: r.head, weight: pct(r.weight) })));
    return li;
  }));
}
