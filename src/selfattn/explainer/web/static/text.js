/* The page's words: every sentence comes from the page data (`texts`: report.page_texts, from the catalogue
 * selfattn/explainer/locale); this module only fills their `{name}` placeholders. */

/** `template` with each `{name}` replaced by String(values[name]): the one rule of explainer/catalogue.py. */
export function fill(template, values = {}) {
  return template.replace(/\{(\w+)\}/g, (_, name) => {
    if (!(name in values)) throw new Error(`fill: {${name}}`);
    return String(values[name]);
  });
}

/** t(key, values) for one language: texts[key][lang], filled; t.lang is that language (for words the data
 * carries as {zh, en} beside the texts: the head types' legend, the views' labels). */
export function translator(texts, lang) {
  const t = (key, values) => {
    const entry = texts[key];
    if (!entry) throw new Error(`texts: ${key}`);
    return fill(entry[lang], values);
  };
  t.lang = lang;
  return t;
}
