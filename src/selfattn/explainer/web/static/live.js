/* Live mode (`selfattn serve`): a text box and the intervention controls, answered by POST {api}
 * (web/server.py), and the arrays of a layer fetched when it is picked. */

import { $ } from "./dom.js";
import { loadDoc, loadLayer } from "./data.js";
import { buildControls, readControls } from "./controls.js";
import { comparable, isIdentity } from "./state.js";
import { bindExperimentFields, experimentFields } from "./experimentfields.js";

const DELAY_MS = 250; // a slider waits this long before asking the server

/** The request field of the interventions `applied` ({name: {param: value}, layer, head}): the registry's
 * own shape (interventions.py: `Intervention.as_applied`), which web/body.py reads. The top-level
 * `layer` / `head` of a request name the head to show; the intervention's scope travels inside. */
export function interventionFields(applied) {
  return { interventions: applied };
}

/** POST body → the page document of the answer, unpacked; an error says the server's `detail`. */
async function post(state, body) {
  const response = await fetch(state.api, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const payload = await response.json().catch(() => null);
  if (!response.ok) {
    const detail = payload && typeof payload.detail === "string" ? payload.detail : `HTTP ${response.status}`;
    throw new Error(detail);
  }
  return payload;
}

/** Wire the text box and build the controls; `hooks` = {t, show(doc, keep), error(message)}. */
export function setupLive(state, data, hooks) {
  $("live").hidden = false;
  $("text").maxLength = data.limits.max_chars;
  $("text").value = data.doc ? data.doc.text : "";
  // The page's policy forbids form submission (form-action 'none'): the button and Enter ask with fetch.
  $("submit").addEventListener("click", () => request(state, hooks));
  $("text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault(); // Shift+Enter: a new line; Enter while an input method composes: untouched
      request(state, hooks);
    }
  });
  $("form").addEventListener("submit", (event) => event.preventDefault());
  let timer = null;
  buildControls($("controls"), state.interventions, (delayed) => {
    clearTimeout(timer);
    if (delayed) timer = setTimeout(() => request(state, hooks), DELAY_MS);
    else request(state, hooks);
  });
  $("only-head").addEventListener("change", () => request(state, hooks));
  bindExperimentFields(() => request(state, hooks));
}

/** What the controls ask for, with the scope: only the shown head when that box is ticked. */
function asked(state) {
  const { applied, bad } = readControls($("controls"), state.interventions);
  const one = $("only-head").checked && state.doc;
  const at = shownHead(state);
  return { applied: Object.assign(applied, { layer: one ? at.layer : null, head: one ? at.head : null }), bad };
}

/** The head the page shows, or the one it is fetching the layer of (`state.pending`): what a request asks for. */
function shownHead(state) {
  return state.pending ? { layer: state.pending.layer, head: state.pending.head } : { layer: state.layer, head: state.head };
}

/** Explain the text box's text with the controls' interventions (and, when needed, without them). */
export async function request(state, hooks) {
  const t = hooks.t();
  const text = $("text").value;
  const { applied, bad } = asked(state);
  if (bad) {
    hooks.error(t("page.error_range", { name: bad.label[state.lang], min: bad.min, max: bad.max }));
    return;
  }
  const wanted = experimentFields();
  if (wanted.bad) {
    hooks.error(t(wanted.bad.key, wanted.bad.values));
    return;
  }
  // a new set of ablated heads opens the first of them (the server picks it: selected.rule "ablated")
  const ablated = state.doc && state.doc.ablation ? JSON.stringify(state.doc.ablation.heads) : null;
  const newAblation = !!wanted.fields.ablate && JSON.stringify(wanted.fields.ablate) !== ablated;
  const keep = !!state.doc && state.doc.text === text && !newAblation;
  const shown = keep ? shownHead(state) : {};
  const body = Object.assign({ text, format: "packed" }, interventionFields(applied), wanted.fields, shown);
  const identity = isIdentity(applied);
  const needBaseline = !identity && needsBaseline(state, applied) && !(state.baseline && state.baseline.text === text &&
    !state.baseline.layers[keep ? state.layer : 0].omitted);
  const seq = ++state.seq;
  $("app").dataset.busy = "1";
  $("status").textContent = t("page.busy");
  const started = performance.now();
  try {
    const asks = [post(state, body), needBaseline ? post(state, Object.assign({ text, format: "packed" }, shown)) : null];
    const [doc, base] = await Promise.all(asks.map(async (ask) => (ask ? loadDoc(await ask) : null)));
    if (seq !== state.seq) return; // a newer request was sent meanwhile
    if (identity) state.baseline = doc;
    else if (base) state.baseline = base;
    else if (!keep) state.baseline = null;
    hooks.error(null);
    await hooks.show(doc, keep, keep && state.pending ? [shownHead(state)] : []); // a head whose layer was loading
    $("status").textContent = t("page.status", { n_tokens: doc.tokens.length, ms: Math.round(performance.now() - started) });
  } catch (err) {
    if (seq === state.seq) {
      hooks.error(err.message);
      $("status").textContent = "";
    }
  } finally {
    if (seq === state.seq) $("app").dataset.busy = "0";
  }
}

function needsBaseline(state, applied) {
  return state.interventions.some((iv) => iv.name in applied && iv.needs_baseline);
}

/** The arrays of layer l (for the shown text and its interventions, and for the baseline). */
export async function fetchLayer(state, l) {
  $("app").dataset.busy = "1";
  $("app").dataset.ready = "0";
  try {
    const doc = state.doc;
    const body = Object.assign({ text: doc.text, format: "packed", layers: [l] }, interventionFields(doc.experiment.applied));
    const asks = [post(state, body)];
    const base = comparable(state);
    if (base && base.layers[l].omitted) asks.push(post(state, { text: doc.text, format: "packed", layers: [l] }));
    const [got, gotBase] = await Promise.all(asks.map(async (ask) => loadLayer((await ask).layers[l])));
    doc.layers[l] = got;
    if (gotBase) base.layers[l] = gotBase;
  } finally {
    $("app").dataset.busy = "0";
  }
}

/** The server's ranking of every head by the weight from query i to key j (heads.search). */
export async function findRemote(state, i, j) {
  const doc = state.doc;
  const body = Object.assign({ text: doc.text, format: "packed", layers: [state.layer], find: [i, j] },
    interventionFields(doc.experiment.applied));
  return (await post(state, body)).search.heads;
}
