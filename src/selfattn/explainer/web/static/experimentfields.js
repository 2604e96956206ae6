/* Live mode: the experiment fields of a request (web/body.py) read from the form's experiment controls —
 * "ablate" [[layer, head], …] and "ablate_mode", "patch" {corrupted, target, foil}, "lens" {position}.
 * An empty control asks for nothing; what cannot be a field (a head not written layer.head, a position that
 * is not a whole number) is returned as `bad`, {key, values}: a key of the catalogue to show instead. */

import { $ } from "./dom.js";

const HEAD = /^(\d+)\.(\d+)$/;

/** {fields, bad}: the experiment fields the controls ask for, or why they cannot be sent. */
export function experimentFields() {
  const fields = {};
  const heads = $("ablate").value.split(",").map((item) => item.trim()).filter((item) => item);
  for (const item of heads) {
    if (!HEAD.test(item)) return { fields, bad: { key: "experiments.bad_heads", values: { item } } };
  }
  if (heads.length) {
    fields.ablate = heads.map((item) => item.match(HEAD).slice(1).map(Number));
    fields.ablate_mode = $("ablate-mean").checked ? "mean" : "zero";
  }
  const corrupted = $("patch").value;
  if (corrupted.trim()) {
    // a token is sent as typed, its spaces included (" Mary"); an empty box leaves the default
    fields.patch = { corrupted, target: $("target").value || null, foil: $("foil").value || null };
  }
  if ($("lens").checked) {
    const p = $("lens-position").value.trim();
    if (p && !/^\d+$/.test(p)) return { fields, bad: { key: "experiments.bad_position", values: { value: p } } };
    fields.lens = { position: p ? Number(p) : null };
  }
  return { fields, bad: null };
}

/** Ask again whenever an experiment control changes (`ask`: the page's request). */
export function bindExperimentFields(ask) {
  for (const id of ["ablate-mean", "lens"]) $(id).addEventListener("change", ask);
  for (const id of ["ablate", "patch", "target", "foil", "lens-position"]) {
    $(id).addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.isComposing) {
        event.preventDefault();
        ask();
      }
    });
  }
}
