/* The intervention controls, built from the data (`interventions`: contract 3 of the house, the
 * registry of capture/interventions.py as data): one input per parameter — a checkbox for a bool, a
 * slider and a number box for an int or float — or one checkbox for an intervention without
 * parameters. An intervention is applied when it is ticked (no parameters) or when one of its
 * parameters differs from its default. */

import { el } from "./dom.js";

/** A positive float parameter (a temperature, a scale) moves on a slider in log₁₀ steps of this size. */
const LOG_STEP = 0.01;

function paramId(param) {
  return param.type === "bool" ? `toggle-${param.name}` : param.name;
}

/** Build the controls into `box` (in the data's order); `onChange(delayed)` is called on every change. */
export function buildControls(box, interventions, onChange) {
  box.replaceChildren();
  for (const iv of interventions) {
    if (!iv.params.length) {
      const input = el("input", { type: "checkbox", id: `toggle-${iv.name}`, "data-testid": `toggle-${iv.name}` });
      input.addEventListener("change", () => onChange(false));
      box.append(labelled(input, iv.label));
      continue;
    }
    for (const param of iv.params) box.append(param.type === "bool" ? boolInput(param, onChange) : numberInput(param, onChange));
  }
}

function labelled(input, label) {
  const span = el("span", { "data-label": JSON.stringify(label) });
  const wrap = el("label", {});
  wrap.append(input, " ", span);
  return wrap;
}

function boolInput(param, onChange) {
  const input = el("input", { type: "checkbox", id: paramId(param), "data-testid": paramId(param) });
  input.checked = param.default;
  input.addEventListener("change", () => onChange(false));
  return labelled(input, param.label);
}

function numberInput(param, onChange) {
  const id = paramId(param);
  const logScale = param.type === "float" && param.min > 0;
  const toSlider = (x) => (logScale ? Math.log10(x) : x);
  const fromSlider = (s) => (logScale ? Number((10 ** s).toPrecision(3)) : s);
  const range = el("input", { type: "range", id: `${id}-range`, "data-testid": `${id}-range`, "aria-hidden": "true",
    tabindex: -1, min: toSlider(param.min), max: toSlider(param.max), step: logScale ? LOG_STEP : param.type === "int" ? 1 : "any" });
  const number = el("input", { type: "number", id, "data-testid": id, step: param.type === "int" ? 1 : "any" });
  if (param.min !== null) number.min = String(param.min);
  if (param.max !== null) number.max = String(param.max);
  number.value = String(param.default);
  range.value = String(toSlider(param.default));
  range.addEventListener("input", () => {
    number.value = String(fromSlider(Number(range.value)));
    onChange(true);
  });
  number.addEventListener("change", () => {
    range.value = String(toSlider(Number(number.value)));
    onChange(false);
  });
  const wrap = el("label", { class: "temp" });
  wrap.append(el("span", { "data-label": JSON.stringify(param.label) }), " ", range, " ", number);
  return wrap;
}

/** Every control's label in `lang` (the labels are data: {zh, en}). */
export function relabel(box, lang) {
  for (const span of box.querySelectorAll("[data-label]")) span.textContent = JSON.parse(span.dataset.label)[lang];
}

function inRange(param, v) {
  const low = param.min === null ? -Infinity : param.min, high = param.max === null ? Infinity : param.max;
  return v >= low && v <= high && (param.type !== "int" || Number.isInteger(v));
}

/** The interventions the controls ask for: {applied: {name: {param: value}}, bad: the first parameter
 * outside its range, or null}. */
export function readControls(box, interventions) {
  const applied = {};
  let bad = null;
  for (const iv of interventions) {
    if (!iv.params.length) {
      if (box.querySelector(`#toggle-${iv.name}`).checked) applied[iv.name] = {};
      continue;
    }
    const values = {};
    for (const param of iv.params) {
      const input = box.querySelector(`#${paramId(param)}`);
      const v = param.type === "bool" ? input.checked : Number(input.value);
      if (param.type !== "bool" && !inRange(param, v) && !bad) bad = param;
      values[param.name] = v;
    }
    if (iv.params.some((param) => values[param.name] !== param.default)) applied[iv.name] = values;
  }
  return { applied, bad };
}
