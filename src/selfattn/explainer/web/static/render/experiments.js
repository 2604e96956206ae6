/* The experiments of the page document (explainer/experiments.py), drawn from the numbers Python shipped:
 * doc.ablation (the next-token distribution before → after), doc.patching (the share of the logit difference
 * each head's output and each layer's residual per position recovers, as two tables of coloured cells: blue
 * recovers, red works against, one scale ±display.limit; the heads the sentence names framed) and doc.lens
 * (the top next tokens after every layer, the layer where the answer settles marked) and doc.attribution
 * (patching's shares estimated by attribution patching: the heads map on patching's scale, each cell's title
 * the estimate beside the exact share, and how well the two rank the top heads). Every sentence is
 * Python's (`text` {zh, en}) or a key of the catalogue; this module only lays out and colours. */

import { $, el } from "../dom.js";
import { HIGH_RGB, LOW_RGB, num, pct, rgb, shade } from "../format.js";
import { predictionList } from "./prediction.js";

const AGAINST_RGB = [220, 38, 38]; // a share below 0: the patch works against the clean answer
const LENS_LIGHT = 0.45; // a lens cell's text is white from this probability (its shade is dark)

/** The three experiments' blocks; the section is hidden when the document carries none. */
export function renderExperiments(state, t) {
  const doc = state.doc;
  const parts = [["exp-ablation", doc.ablation, renderAblation], ["exp-patching", doc.patching, renderPatching],
    ["exp-attribution", doc.attribution, renderAttribution], ["exp-lens", doc.lens, renderLens]];
  for (const [id, data, draw] of parts) {
    $(id).hidden = !data;
    if (data) draw($(id), data, state.lang, t);
    else $(id).replaceChildren();
  }
  $("experiments").hidden = parts.every(([, data]) => !data);
}

const shown = (p) => p.shown || p.token;

function renderAblation(box, a, lang, t) {
  const preds = el("div", { class: "preds" });
  preds.append(predictionList("ablation-before", t("experiments.before"), a.before.top, shown),
    predictionList("ablation-after", t("experiments.after"), a.after.top, shown));
  box.replaceChildren(el("h3", {}, t("experiments.ablation")),
    el("p", { class: "exp-text", "data-testid": "ablation-text" }, a.text[lang]), preds);
}

/** A share's colour on the diverging scale ±limit (linear, as the PNG's RdBu). */
function shareColour(v, limit) {
  const s = Math.min(1, Math.abs(v) / limit);
  const far = v >= 0 ? HIGH_RGB : AGAINST_RGB;
  return LOW_RGB.map((lo, c) => Math.round(lo + (far[c] - lo) * s));
}

function shareCell(v, display, attrs, title) {
  const td = el("td", Object.assign({ "data-share": v, title }, attrs),
    Math.abs(v) >= display.label_min ? num(100 * v, 0) : "");
  td.style.backgroundColor = rgb(shareColour(v, display.limit));
  if (Math.abs(v) > display.light_from * display.limit) td.classList.add("light");
  return td;
}

function renderPatching(box, p, lang, t) {
  const d = p.display;
  const framed = new Set(p.top_heads.map((x) => `${x.layer}/${x.head}`));
  const heads = el("table", { class: "pmap", "data-testid": "patch-heads" });
  const top = el("tr");
  top.append(el("th"), ...p.heads[0].map((_, h) => el("th", {}, String(h))));
  heads.append(top);
  p.heads.forEach((row, l) => {
    const tr = el("tr");
    tr.append(el("th", {}, t("common.layer_n", { layer: l })));
    row.forEach((v, h) => {
      const td = shareCell(v, d, { "data-testid": "patch-head", "data-layer": l, "data-head": h },
        t("experiments.head_cell", { layer: l, head: h, share: pct(v) }));
      if (framed.has(`${l}/${h}`)) td.classList.add("named");
      tr.append(td);
    });
    heads.append(tr);
  });
  const names = p.clean.names || p.clean.tokens; // "John@9": what the cells' titles call a position
  const labels = p.clean.labels || p.clean.tokens; // "John": the header, beside the position
  const changed = new Set(p.differ);
  const residual = el("table", { class: "pmap residual", "data-testid": "patch-residual" });
  const cols = el("tr");
  cols.append(el("th"), ...names.map((name, q) => {
    const th = el("th", { class: "pos", "data-position": q, title: name }, `${q} ${labels[q]}`);
    if (changed.has(q)) th.classList.add("changed");
    return th;
  }));
  residual.append(cols);
  p.residual.forEach((row, l) => {
    const tr = el("tr");
    tr.append(el("th", {}, t("common.layer_n", { layer: l })));
    row.forEach((v, q) => tr.append(shareCell(v, d, { "data-testid": "patch-cell", "data-layer": l, "data-position": q },
      t("experiments.residual_cell", { layer: l, position: q, token: names[q], share: pct(v) }))));
    residual.append(tr);
  });
  const scale = el("div", { class: "legend pscale", "data-testid": "patch-scale" });
  const bar = el("span", { class: "legend-bar" });
  bar.style.background = `linear-gradient(to right, ${rgb(AGAINST_RGB)}, ${rgb(LOW_RGB)}, ${rgb(HIGH_RGB)})`;
  scale.append(el("span"), bar, el("span"),
    el("span", { class: "legend-mid" }, t("experiments.scale", { low: pct(-d.limit), high: pct(d.limit) })));
  const quote = (x) => `“${shown(x)}”`;
  box.replaceChildren(
    el("h3", {}, t("experiments.patching")),
    el("p", { class: "exp-text", "data-testid": "patching-text" }, p.text[lang]),
    el("p", { class: "hint" }, t("experiments.patch_texts", { clean: p.clean.text, corrupted: p.corrupted.text,
      target: quote(p.target), foil: quote(p.foil) })),
    el("p", { class: "hint" }, t("experiments.patch_hint")),
    el("div", { class: "pmaps" }),
  );
  const left = el("figure", {}), right = el("figure", {});
  left.append(el("figcaption", {}, t("experiments.heads_map")), el("div", { class: "scroll" }));
  left.lastChild.append(heads);
  right.append(el("figcaption", {}, t("experiments.residual_map")), el("div", { class: "scroll" }));
  right.lastChild.append(residual);
  box.lastChild.append(left, right);
  box.append(scale);
}

function renderAttribution(box, a, lang, t) {
  const d = a.display;
  const exact = a.exact;
  const heads = el("table", { class: "pmap", "data-testid": "attribution-heads" });
  const top = el("tr");
  top.append(el("th"), ...a.heads[0].map((_, h) => el("th", {}, String(h))));
  heads.append(top);
  a.heads.forEach((row, l) => {
    const tr = el("tr");
    tr.append(el("th", {}, t("common.layer_n", { layer: l })));
    row.forEach((v, h) => {
      const title = t("experiments.attribution_cell", { layer: l, head: h, estimate: pct(v),
        exact: exact ? pct(exact.heads[l][h]) : "–" });
      tr.append(shareCell(v, d, { "data-testid": "attribution-head", "data-layer": l, "data-head": h }, title));
    });
    heads.append(tr);
  });
  const wrap = el("div", { class: "scroll" });
  wrap.append(heads);
  const parts = [el("h3", {}, t("attribution.title"))];
  if (exact) {
    const g = exact.agreement;
    parts.push(el("p", { class: "exp-text", "data-testid": "attribution-text" }, t("attribution.agreement",
      { top: g.top, spearman: g.spearman === null ? "—" : num(g.spearman, 2), shared: g.shared })));
  }
  box.replaceChildren(...parts, wrap);
}

function renderLens(box, lens, lang, t) {
  const k = lens.layers[0].top.length;
  const table = el("table", { class: "lens", "data-testid": "lens-table" });
  const top = el("tr");
  top.append(el("th", {}, t("common.layer")), ...Array.from({ length: k }, (_, r) => el("th", {}, t("experiments.top", { k: r + 1 }))),
    el("th", {}, t("common.entropy_bits")), el("th"));
  table.append(top);
  for (const row of lens.layers) {
    const tr = el("tr", { "data-testid": "lens-row", "data-layer": row.layer });
    tr.append(el("th", {}, String(row.layer)));
    for (const p of row.top) {
      const td = el("td", { "data-testid": "lens-cell", "data-id": p.id });
      td.append(el("span", { class: "word" }, shown(p)), el("span", { class: "prob" }, pct(p.prob)));
      td.style.backgroundColor = rgb(shade(p.prob));
      if (p.prob >= LENS_LIGHT) td.classList.add("light");
      tr.append(td);
    }
    tr.append(el("td", { class: "num", "data-testid": "lens-entropy" }, num(row.entropy_bits, 2)));
    const settled = row.layer === lens.settled;
    tr.append(el("td", { class: "mark" }, settled ? t("experiments.settled") : ""));
    if (settled) tr.classList.add("settled");
    table.append(tr);
  }
  const wrap = el("div", { class: "scroll" });
  wrap.append(table);
  box.replaceChildren(el("h3", {}, t("experiments.lens_title", { position: lens.position, token: lens.name || lens.token })),
    el("p", { class: "exp-text", "data-testid": "lens-text" }, lens.text[lang]), wrap);
}
