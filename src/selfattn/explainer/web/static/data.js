/* The data: the page's JSON block, and packed arrays (selfattn.explainer.views.codec) → typed arrays.
 *
 * A packed array is {dtype, shape, b64, digits?}: little-endian bytes in byte planes, zlib-compressed,
 * base64; every array of the page (the layers', the attention page's weights, doc.display's thumbnails and
 * shown weights) is read by the one `unpack` below. The page reads what Python computed and never recomputes a
 * stage: the weights of every cell at 0.01 % (`weights`, what every view shows and uses), and for each query row
 * the stored keys with their scores, scaled and masked scores (`key_stages`), Σ w·V (`weighted`) and Σ w (`sums`),
 * each at the precision it is shown with.
 * A layer's vectors (x, attn_out, output) come to the 4 decimals they are shown with, their lengths in `norms`, in
 * the layers held in full (doc.full_layers); elsewhere only each row's top dimensions (`top`: {name: {dims,
 * values}}) and lengths. A head's q, k, v come in float16; k and v may be {of_head: h}: the arrays of head h, which
 * reads the same key/value head (GQA). */

// each code's words; "f16" words are binary16 bit patterns, read as numbers by `half`
const TYPED = {
  f16: Uint16Array, f32: Float32Array, f64: Float64Array, u16: Uint16Array, u32: Uint32Array, z32: Uint32Array,
};
const Z32_NEG_INF = 2 ** 32 - 2, Z32_POS_INF = 2 ** 32 - 1; // "z32": signed integers zigzag-coded (codec.py)

/** The JSON block the server or report.py put into the page. */
export function readPageData() {
  return JSON.parse(document.getElementById("selfattn-data").textContent);
}

function bytesOf(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** zlib (RFC 1950) bytes → bytes, by the browser's own DecompressionStream (no network, no library). */
async function inflate(bytes) {
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

/** One packed array: {shape, bits} for "bits"; {shape, data} otherwise, with `data` a Float64Array
 * when the integers stand for decimals (except "u16" weights: {data: Uint16Array, unit: 10^digits}) and a
 * Float32Array for "f16" (IEEE 754 binary16, every value exact in float32). */
export async function unpack(p) {
  const bytes = await inflate(bytesOf(p.b64));
  if (p.dtype === "bits") return { shape: p.shape, bits: bytes };
  const Typed = TYPED[p.dtype];
  if (!Typed) throw new Error(`unpack: dtype ${JSON.stringify(p.dtype)}`);
  const size = Typed.BYTES_PER_ELEMENT, n = bytes.length / size;
  const joined = new Uint8Array(bytes.length);
  for (let b = 0; b < size; b++) {
    for (let e = 0, at = b * n; e < n; e++) joined[e * size + b] = bytes[at + e];
  }
  const data = new Typed(joined.buffer);
  if (p.dtype === "f16") return { shape: p.shape, data: Float32Array.from(data, half) };
  if (p.digits === undefined) return { shape: p.shape, data };
  const unit = 10 ** p.digits;
  if (p.dtype === "u16") return { shape: p.shape, data, unit };
  const out = new Float64Array(n);
  if (p.dtype !== "z32") {
    for (let e = 0; e < n; e++) out[e] = data[e] / unit;
  } else {
    for (let e = 0; e < n; e++) out[e] = unzigzag(data[e], unit);
  }
  return { shape: p.shape, data: out };
}

/** One "z32" word as the number it stands for: 2n → n, 2n + 1 → −(n + 1), over 10^digits; ±inf kept. */
function unzigzag(word, unit) {
  if (word === Z32_NEG_INF) return -Infinity;
  if (word === Z32_POS_INF) return Infinity;
  return (word % 2 === 0 ? word / 2 : -(word + 1) / 2) / unit;
}

const LAYER_ARRAYS = ["x", "attn_out", "output", "visible"];
const HEAD_ARRAYS = ["q", "k", "v", "lse", "weights", "keys", "key_stages", "weighted", "sums", "sink"];

async function unpackFields(obj, names) {
  const out = Object.assign({}, obj);
  await Promise.all(names.filter((name) => obj[name]).map(async (name) => { out[name] = await unpack(obj[name]); }));
  return out;
}

/** A page document ready to show: its thumbnails unpacked and, where it has them (every head's, drawn by the
 * model view), each held layer's visibility unpacked and its other arrays left packed until a view shows the
 * layer (`unpackLayers`): unpacking all 11 layers of the 24 MB page of 131 tokens on SmolLM2 took half of the 3 s
 * it took to open. Without thumbnails every layer is unpacked now. A layer left out keeps only its scalars. */
export async function loadDoc(packed) {
  const [layers, display] = await Promise.all([
    Promise.all(packed.layers.map(packed.display ? deferLayer : loadLayer)),
    packed.display ? loadDisplay(packed.display) : undefined,
  ]);
  // the tokens as every view shows them: a repeated token carries its position ("the@8"), as in Python's views
  const tokens = Array.isArray(packed.token_names) ? packed.token_names : packed.tokens;
  // the shown head's contribution shares (views/contribution_words.py), unpacked once: the heatmap's second measure
  const c = packed.contributions;
  const contributions = c && c.packed ? Object.assign({}, c, { packed: await unpack(c.packed) }) : c;
  return Object.assign({}, packed, { layers, tokens, display, contributions });
}

/** doc.display unpacked: every head's thumbnail ({shape [T, T], data: Float64Array}: its weights pooled into
 * T × T cells, Python's capture/digest.py, at 0.01 %), as the model view and a layer not held draw them, and the
 * shown head's weights ({shape [L, L], data: Uint16Array, unit}). */
async function loadDisplay(display) {
  const thumbnails = await Promise.all(display.thumbnails.map((row) => Promise.all(row.map(async (p) => {
    const t = await unpack(p); // "u16" at 0.01 %: read as the numbers they stand for
    return t.unit === undefined ? t : { shape: t.shape, data: Float64Array.from(t.data, (n) => n / t.unit) };
  }))));
  const selected = Object.assign({}, display.selected, { weights: await unpack(display.selected.weights) });
  return Object.assign({}, display, { thumbnails, selected });
}

/** An IEEE 754 binary16 bit pattern as a number. */
function half(bits) {
  const sign = bits & 0x8000 ? -1 : 1, exp = (bits >> 10) & 0x1f, frac = bits & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/** A held layer whose arrays wait (`packed`: the layer as it came) but for its visibility and that of a head an
 * intervention changed apart: the model view draws every held layer's thumbnails with them. */
async function deferLayer(layer) {
  if (layer.omitted) return layer;
  const heads = await Promise.all(layer.heads.map(async (head) =>
    (head.visible ? Object.assign({}, head, { visible: await unpack(head.visible) }) : head)));
  return Object.assign({}, layer, { packed: layer, visible: await unpack(layer.visible), heads });
}

const UNPACKING = new WeakMap(); // a deferred layer → the promise of it unpacked

/** Layers `ls` of doc unpacked in place where `loadDoc` deferred them, each once however often it is asked for. */
export async function unpackLayers(doc, ls) {
  await Promise.all(ls.map(async (l) => {
    const layer = doc.layers[l];
    if (!layer || !layer.packed) return;
    if (!UNPACKING.has(layer)) UNPACKING.set(layer, loadLayer(layer.packed));
    const full = await UNPACKING.get(layer);
    if (doc.layers[l] === layer) doc.layers[l] = full;
  }));
}

/** Whether layer l of doc waits to be unpacked (`unpackLayers`). */
export function deferred(doc, l) {
  return !!doc.layers[l].packed;
}

export async function loadLayer(layer) {
  if (layer.omitted) return layer;
  const out = await unpackFields(layer, LAYER_ARRAYS);
  out.norms = await unpackFields(layer.norms, Object.keys(layer.norms));
  if (layer.top) {
    const names = Object.keys(layer.top);
    const tops = await Promise.all(names.map((name) => unpackFields(layer.top[name], ["dims", "values"])));
    out.top = Object.fromEntries(names.map((name, n) => [name, tops[n]]));
  }
  out.heads = await Promise.all(layer.heads.map(async (head) => {
    const h = await unpackFields(head, HEAD_ARRAYS.filter((name) => !(head[name] && "of_head" in head[name])));
    h.visible = head.visible ? await unpack(head.visible) : undefined; // only a head an intervention changed apart
    h.slots = slotsOf(h.keys, h.weights.shape[1]);
    return h;
  }));
  for (const h of out.heads) { // K, V sent once per key/value head: {of_head} names the head that holds them
    for (const name of ["k", "v"]) if (h[name] && "of_head" in h[name]) h[name] = out.heads[h[name].of_head][name];
  }
  return out;
}

/** The length of row i of one of a layer's vectors (x, attn_out, output), of the exact vector: the vector itself
 * travels to the 4 decimals it is shown with. */
export function normOf(layer, name, i) {
  return layer.norms[name].data[i];
}

/** Row i of a vector the layer holds as its top dimensions only (`top`, outside doc.full_layers): {dims, values},
 * largest |value| first, as Python chose them. */
export function topOf(layer, name, i) {
  const top = layer.top[name];
  return { dims: row(top.dims, i), values: row(top.values, i) };
}

/** Per query row, a Map key → its column in `key_stages` (unused slots left out). */
function slotsOf(keys, L) {
  const K = keys.shape[1];
  return Array.from({ length: keys.shape[0] }, (_, i) => {
    const m = new Map();
    for (let c = 0; c < K; c++) if (keys.data[i * K + c] < L) m.set(keys.data[i * K + c], c);
    return m;
  });
}

/** Row i of a matrix (a view, no copy). */
export function row(m, i) {
  const n = m.shape[m.shape.length - 1];
  return m.data.subarray(i * n, (i + 1) * n);
}

/** visible[i][j] of a bit-packed L×L matrix: 1 = may look. */
export function bit(m, i, j) {
  const idx = i * m.shape[1] + j;
  return (m.bits[idx >> 3] >> (7 - (idx & 7))) & 1;
}

/** The visibility head h of a layer was computed with: its own when an intervention changed it apart. */
export function visibleOf(layer, h) {
  const head = layer.heads[h];
  return head.visible !== undefined ? head.visible : layer.visible;
}

/** The weight of (i, j) as the page shows it (0.01 %). */
export function shownWeight(head, i, j) {
  const w = head.weights;
  return w.data[i * w.shape[1] + j] / w.unit;
}
