/* Numbers and colours as the page writes them (formatting only: every number comes from the data). */

export const DIGITS = 4; // decimals of every number shown
const PERCENT_DIGITS = 2; // decimals of every percentage shown
const MINUS = "\u2212"; // the one minus sign of every number shown
export const LOW_RGB = [255, 255, 255]; // weight 0
export const HIGH_RGB = [29, 78, 216]; // weight 1
export const HIDDEN_RGB = [156, 163, 175]; // mask = 0: a mid grey, never mistaken for a low weight (white)
const UP_RGB = [220, 38, 38]; // a weight that grew (difference map)

/** A number with DIGITS decimals, one minus sign "−", never "−0.0000". */
export function num(x, digits = DIGITS) {
  if (x === -Infinity) return MINUS + "inf";
  if (x === Infinity) return "inf";
  const text = x.toFixed(digits);
  return Number(text) === 0 ? (0).toFixed(digits) : text.replace("-", MINUS);
}

export function pct(x) {
  return num(100 * x, PERCENT_DIGITS) + "%";
}

/** A weight as a whole percentage, as Python's heads.percent writes it. */
export function wholePct(x) {
  return `${Math.abs(Math.round(100 * x))}%`;
}

/** Weight → colour on one fixed scale: white = 0, the darkest blue = 100%, the shade ∝ √(w / top),
 * so small weights of a long input stay visible and 61% and 100% stay apart. */
export function shade(w, top = 1) {
  const s = Math.sqrt(Math.max(0, Math.min(1, w / top)));
  return LOW_RGB.map((lo, c) => Math.round(lo + (HIGH_RGB[c] - lo) * s));
}

/** A difference of weights → colour: red = grew, blue = shrank, white = unchanged (√ of |d|, as `shade`). */
export function diverging(d) {
  const s = Math.sqrt(Math.min(1, Math.abs(d)));
  const far = d >= 0 ? UP_RGB : HIGH_RGB;
  return LOW_RGB.map((lo, c) => Math.round(lo + (far[c] - lo) * s));
}

export function rgb(c) {
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

/** Sorted layer indices as ranges, as Python's export.layer_ranges writes them: "0–2, 5". */
export function layerRanges(layers) {
  const parts = [];
  for (const l of layers) {
    const last = parts[parts.length - 1];
    if (last && l === last[1] + 1) last[1] = l;
    else parts.push([l, l]);
  }
  return parts.map(([a, b]) => (a === b ? String(a) : `${a}–${b}`)).join(", ");
}
