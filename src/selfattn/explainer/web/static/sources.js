/* Where the head view and the model view read weights from, one shape for both pages:
 *
 *   {tokens, nLayers, nHeads, held(l), weight(l, h, i, j), visible(l, h, i, j), type(l, h), legend, thumb(l, h),
 *    layerName(l), layerIndex(name)}
 *
 * `layerName(l)`: the number the l-th layer drawn is shown (and linked) under: l, or on the attention page the
 * model's own layer number when only some layers were given (head_view's include_layers=[5, 6]);
 * `layerIndex(name)`: the other way (-1 where no layer drawn has that number).
 *
 * `thumb(l, h)`: the head's thumbnail ({shape [T, T], data}: its weights pooled into T × T cells, every head
 * of every layer, held or not; Python's doc.display), or null where the data has none (the attention page).
 *
 * `legend`: the head types' names and colours (doc.head_types: views/taxonomy.legend).
 *
 * `docSource`: a page document of the explorer (weights at 0.01 %, as Python packed them; a layer left out
 * is not held). `arraySource`: the attention page's (layers, heads, L, L) weights given directly. */

import { bit, shownWeight, visibleOf } from "./data.js";

export function docSource(doc) {
  return {
    tokens: doc.tokens,
    nLayers: doc.layers.length,
    nHeads: doc.model.n_heads,
    held: (l) => !doc.layers[l].omitted,
    weight: (l, h, i, j) => shownWeight(doc.layers[l].heads[h], i, j),
    visible: (l, h, i, j) => bit(visibleOf(doc.layers[l], h), i, j) === 1,
    type: (l, h) => (doc.layers[l].types ? doc.layers[l].types[h] : null),
    legend: doc.head_types,
    thumb: (l, h) => (doc.display ? doc.display.thumbnails[l][h] : null),
    causal: (l) => !!doc.layers[l].causal,
    layerName: (l) => l,
    layerIndex: (name) => (Number.isInteger(name) && name >= 0 && name < doc.layers.length ? name : -1),
  };
}

/** weights: an unpacked (layers, heads, L, L) u16 array with its unit; types: [[type | null]]; legend: as
 * doc.head_types; numbers: the model's layer number of each layer drawn (default 0, 1, …). */
export function arraySource(tokens, weights, types, legend, numbers) {
  const [nLayers, nHeads, L] = weights.shape;
  const names = numbers || Array.from({ length: nLayers }, (_, l) => l);
  const at = (l, h, i, j) => ((l * nHeads + h) * L + i) * L + j;
  return {
    tokens,
    nLayers,
    nHeads,
    held: () => true,
    weight: (l, h, i, j) => weights.data[at(l, h, i, j)] / weights.unit,
    visible: () => true,
    type: (l, h) => (types ? types[l][h] : null),
    legend,
    thumb: () => null,
    causal: () => false,
    layerName: (l) => names[l],
    layerIndex: (name) => names.indexOf(name),
  };
}
