/* Elements: token text (and every other string from the data) is written with textContent only,
 * never parsed as markup. */

export const $ = (id) => document.getElementById(id);

/** An element with attributes and text (text via textContent: never parsed). */
export function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

/** A <select>'s options, value = index. */
export function fillSelect(selectEl, labels) {
  selectEl.replaceChildren(...labels.map((label, i) => el("option", { value: i }, label)));
}
