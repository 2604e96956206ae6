/* The intervention controls, built from the data (`interventions`: the registry of
 * interventions.py, `as_data()`): one input per parameter — a checkbox for a bool, a slider and a
 * number box for an int or float — and a checkbox `toggle-NAME` for an intervention without parameters or
 * without neutral values. An intervention with neutral values (a temperature of 1) is applied when one
 * of its parameters differs from them; any other is applied when its box is ticked. */

import { el } from "./dom.js";

/** A positive float parameter (a temperature, a scale) moves on a slider in log₁₀ steps of this size. */
const LOG_STEP = 0.01;

/** A parameter's input id: the intervention's name when it has one parameter, else NAME-PARAM. */
function paramId(iv, param) {
  const id = iv.params.length === 1 ? iv.name : `${iv.name}-${param.name}`;
  return param.type === "bool" ? `toggle-${id}` : id;
}

/** Applied by its own box (a switch, or parameters without neutral values such as a link to block). */
function ticked(iv) {
  return !iv.params.length || iv.neutral === null;
}

/** Build the controls into `box` (in the data's order); `onChange(delayed)` is called on every change. */
export function buildControls(box, interventions, onChange) {
  box.replaceChildren();
  for (const iv of interventions) {
    if (ticked(iv)) {
      const input = el("input", { type: "checkbox", id: `toggle-${iv.name}`, "data-testid": `toggle-${iv.name}`,
        "data-help": JSON.stringify(iv.help || {}) });
      input.addEventListener("change", () => onChange(false));
      box.append(labelled(input, iv.label));
    }
    for (const param of iv.params) {
      const input = param.type === "bool" ? boolInput(iv, param, onChange) : numberInput(iv, param, onChange);
      box.append(input);
    }
  }
}

function labelled(input, label) {
  const span = el("span", { "data-label": JSON.stringify(label) });
  const wrap = el("label", {});
  wrap.append(input, " ", span);
  return wrap;
}

function boolInput(iv, param, onChange) {
  const input = el("input", { type: "checkbox", id: paramId(iv, param), "data-testid": paramId(iv, param) });
  input.checked = param.default;
  input.addEventListener("change", () => onChange(false));
  return labelled(input, param.label);
}

function numberInput(iv, param, onChange) {
  const id = paramId(iv, param);
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
  for (const input of box.querySelectorAll("[data-help]")) input.title = JSON.parse(input.dataset.help)[lang] || "";
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
    const values = {};
    for (const param of iv.params) {
      const input = box.querySelector(`#${paramId(iv, param)}`);
      const v = param.type === "bool" ? input.checked : Number(input.value);
      if (param.type !== "bool" && !inRange(param, v) && !bad) bad = param;
      values[param.name] = v;
    }
    const on = ticked(iv) ? box.querySelector(`#toggle-${iv.name}`).checked
      : iv.params.some((param) => values[param.name] !== iv.neutral[param.name]);
    if (on) applied[iv.name] = values;
  }
  return { applied, bad };
}
