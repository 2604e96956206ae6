/* The words of the page, the model card, the intervention badge and the shown head in words. */

import { $, el } from "../dom.js";
import { fill } from "../text.js";
import { wholePct } from "../format.js";

/** Every element with data-i18n="page.key" gets texts[key]; the language button and the limits line too. */
export function renderWords(state, t) {
  document.documentElement.lang = state.lang === "zh" ? "zh-CN" : "en";
  for (const e of document.querySelectorAll("[data-i18n]")) e.textContent = t(e.dataset.i18n);
  $("lang").textContent = t("page.lang");
  if (state.limits) $("limits").textContent = t("page.limits", { chars: state.limits.max_chars, tokens: state.limits.max_tokens });
}

export function renderModel(state, t) {
  const doc = state.doc;
  const m = doc.model;
  const L = doc.tokens.length;
  const positions = state.lang === "zh" && m.positions_zh ? m.positions_zh : m.positions;
  const architecture = state.lang === "zh" && m.architecture_zh ? m.architecture_zh : m.architecture;
  const kind = m.kind === "decoder" ? t("common.decoder") : m.kind === "encoder" ? t("common.encoder") : m.kind;
  $("model-info").textContent = t("page.model", Object.assign({}, m, { kind, n_tokens: L })) +
    (m.architecture ? t("page.model_architecture", { architecture, positions }) : "") +
    (m.bos ? " · " + m.bos.text[state.lang] : "");
  const unknown = doc.unknown || { count: 0, hint: { en: "", zh: "" } };
  $("unknown").textContent = unknown.count
    ? t("page.unknown", { n: unknown.count, n_tokens: L, hint: unknown.hint[state.lang] }) : "";
  $("unknown").hidden = !unknown.count;
  const parts = interventionParts(state, doc.experiment.applied, t);
  const badge = $("intervention");
  badge.textContent = parts.length ? t("page.intervention", { parts: parts.join(t("page.list_sep")) }) : t("page.no_intervention");
  badge.classList.toggle("on", parts.length > 0);
}

/** One phrase per applied intervention (how the registry says it, `said`, filled with its values, in the
 * order of the data), then its scope. */
function interventionParts(state, applied, t) {
  const parts = state.interventions.filter((iv) => iv.name in applied)
    .map((iv) => fill(iv.said[state.lang], applied[iv.name]));
  if (parts.length && applied.layer !== null && applied.layer !== undefined) {
    const head = applied.head !== null && applied.head !== undefined;
    parts.push(head ? t("page.layer_head", { layer: applied.layer, head: applied.head }) : t("common.layer_n", { layer: applied.layer }));
  }
  return parts;
}

export function renderRule(state, t) {
  const rule = state.rule;
  let text = t("page.rule_user");
  if (rule === "auto") text = state.pickRule[state.lang] || "";
  else if (rule === "within layer") text = t("page.rule_layer");
  else if (rule === "within head") text = t("page.rule_head");
  else if (rule === "intervened") text = t("page.rule_intervened");
  else if (rule === "ablated") text = t("page.rule_ablated");
  $("rule").textContent = text;
}

/** The shown head in words (Python's heads.describe), the experiment's sentence, the first-token note. */
export function renderHeadText(state, t) {
  const doc = state.doc;
  const d = doc.descriptions ? doc.descriptions[state.layer][state.head] : null;
  $("head-description").textContent = d ? t("common.does", { text: d.text[state.lang] }) : "";
  renderEvidence(d, t);
  const e = doc.experiment;
  const shown = !!e && e.layer === state.layer && e.head === state.head;
  $("experiment").textContent = shown ? e.text[state.lang] : "";
  $("experiment").hidden = !shown;
  const ft = doc.first_token;
  const s = doc.summaries[state.layer][state.head];
  // why the page opened on this row (export.opened_query): a sentence about the head it opened on, shown with
  // that head only; another head's description names other links
  const sel = doc.selected;
  const own = !!sel && sel.layer === state.layer && sel.head === state.head;
  const opened = own && doc.opened && doc.opened.row === state.row ? doc.opened.text[state.lang] : "";
  $("opened").textContent = opened;
  $("opened").hidden = !opened;
  $("bos-note").textContent = ft && s.rows
    ? t("page.bos", { token: ft.token, mine: wholePct(s.first_token), all: wholePct(ft.mean) }) : "";
}

const EVIDENCE_KINDS = { text: "common.evidence_text", control: "common.evidence_control", contrast: "common.evidence_contrast" };

/** {op, p}: "< 0.001" below Python's head_words.P_FLOOR, else "= 0.004", as head_words.p_words writes it. */
function pParts(p) {
  if (p === null || p === undefined) return { op: "=", p: "–" };
  return p < 0.001 ? { op: "<", p: "0.001" } : { op: "=", p: p.toFixed(3) };
}

function maybePct(x) {
  return x === null || x === undefined ? "–" : wholePct(x);
}

/** The fold under the head's sentence: every relation credited to the head (its verdict's relations), what the
 * other words give the same key, and each sentence's row it rests on (Python's held._evidence). Hidden when the
 * head holds none. */
function renderEvidence(d, t) {
  const box = $("evidence");
  const relations = d && d.verdict ? d.verdict.relations.filter((r) => r.evidence && r.evidence.length) : [];
  box.hidden = relations.length === 0;
  const parts = [];
  for (const r of relations) {
    const b = r.baseline || {};
    const mine = r.evidence.find((e) => e.kind === "text") || r.evidence[0];
    const pair = `${mine.query}→${mine.key}`;
    parts.push(el("p", {}, t("page.evidence_head", Object.assign({
      pair, base: maybePct(b.weight), mine: maybePct(b.query), rows: b.rows || 0,
    }, pParts(b.p)))));
    const list = el("ul", {});
    for (const e of r.evidence) {
      list.append(el("li", {}, t("common.evidence_row", {
        kind: t(EVIDENCE_KINDS[e.kind]), text: e.text, query: e.query, to: e.key, weight: wholePct(e.weight),
        base: maybePct(e.baseline), n: e.others, note: e.tested ? "" : t("common.evidence_adjacent"),
      }).trim()));
    }
    parts.push(list);
  }
  $("evidence-rows").replaceChildren(...parts);
}
