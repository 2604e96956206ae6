/* The view state in the URL hash, so that a link reopens the same view: #view=head&layer=1&head=0&query=4.
 * Read: unknown keys and values that are not what they should be are ignored (the caller checks ranges).
 * Written with history.replaceState (no new history entry); where a page may not change its URL (an
 * opaque-origin srcdoc frame may refuse), the page goes on without it and keeps the hash in data-hash. */

const INTEGER = /^\d{1,6}$/;

/** {view?, layer?, head?, query?} from a hash such as location.hash. */
export function readHash(hash, views) {
  const out = {};
  const params = new URLSearchParams((hash || "").replace(/^#/, ""));
  const view = params.get("view");
  if (view !== null && views.includes(view)) out.view = view;
  for (const key of ["layer", "head", "query"]) {
    const v = params.get(key);
    if (v !== null && INTEGER.test(v)) out[key] = Number(v);
  }
  return out;
}

export function hashOf(s) {
  return `#view=${s.view}&layer=${s.layer}&head=${s.head}&query=${s.query}`;
}

/** Put the hash of s into the URL (if the page may) and into el.dataset.hash; returns the hash. */
export function writeHash(s, el) {
  const hash = hashOf(s);
  el.dataset.hash = hash;
  if (window.location.hash === hash) return hash;
  try {
    window.history.replaceState(null, "", hash);
  } catch {
    // a sandboxed srcdoc frame: the state stays in data-hash
  }
  return hash;
}
