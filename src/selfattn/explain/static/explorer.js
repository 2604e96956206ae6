/* selfattn explorer: one page for the HTML report (data inline) and the local web app
 * (`selfattn serve`, data from POST /api/explain). It walks through the tutorial's stages
 *
 *     X → Q/K/V → QKᵀ → ÷√d_k → mask → softmax → ·V → output
 *
 * on the real numbers of a model. Every stage of the selected query row is computed here
 * from q, k, v, lse, scale, softcap and visible with the formulas of
 * selfattn.explain.trace.LayerTrace.stages, so a 6-token and a 1,000-token input share one
 * code path. The weights come from the saved log-sum-exp by one function, `weightOf` (the
 * page's single copy of selfattn.explain.trace.weights_from_lse; a test checks them equal). The L×L weights are drawn once into a canvas ImageData, never as L² elements.
 *
 * Safety: token text (and every other string from the data) is written with textContent
 * or canvas fillText only, never parsed as markup.
 */
"use strict";

(function () {
  // ---------------------------------------------------------------------------------------
  // Constants
  // ---------------------------------------------------------------------------------------

  const STAGES = ["x", "qkv", "scores", "scaled", "mask", "softmax", "weighted", "output"];
  /** Rows of the key table (one number per key j) and the stage from which each is shown. */
  const KEY_ROWS = [
    { name: "scores", from: "scores" },
    { name: "scaled", from: "scaled" },
    { name: "visible", from: "mask" },
    { name: "masked", from: "mask" },
    { name: "weights", from: "softmax" },
  ];
  const MAX_KEY_COLUMNS = 64; // up to this many tokens the key table shows every key
  const TOP_KEYS = 20; // beyond: the keys with the largest weights, the first token and the query itself
  const LABELLED_HEATMAP = 48; // up to this many tokens the heatmap carries the token texts
  const HEATMAP_PX = 520; // side of the drawn L×L picture, in CSS pixels (at most)
  const MIN_HEATMAP_PX = 240; // … and at least
  const LABELLED_CELL_PX = 36; // side of one cell of a short (labelled) input
  const HEATMAP_PAD_PX = 24; // room right of and below the picture for the last tick label
  const DIGITS = 4; // decimals of every number shown
  const PERCENT_DIGITS = 2; // decimals of every percentage shown
  const TOP_ATTENDED = 3; // tokens named in "… attends to"
  const TEMPERATURE_DELAY_MS = 250; // the slider waits this long before asking the server
  const FONT = '"WenQuanYi Micro Hei", "Noto Sans CJK SC", "Source Han Sans SC", "PingFang SC", ' +
    '"Microsoft YaHei", sans-serif';
  const HIDDEN_RGB = [226, 226, 226]; // mask = 0
  const LOW_RGB = [255, 255, 255]; // weight 0
  const HIGH_RGB = [29, 78, 216]; // weight 1

  // ---------------------------------------------------------------------------------------
  // Words (Chinese by default, English on the toggle)
  // ---------------------------------------------------------------------------------------

  const TEXT = {
    zh: {
      title: "Self-Attention 是什么 · 注意力浏览器",
      lang: "English",
      input: "输入一句话（中文会用 jieba 分词）",
      submit: "解释",
      interventions: "干预（改变每一层的计算，也改变预测）",
      scaling: "÷√d_k 缩放",
      causal: "因果 mask",
      temperature: "softmax 温度 T",
      tokens: "分词结果",
      tokens_hint: "把鼠标移到一个 token 上，看它关注哪些 token；点击它，在下面逐步查看它的计算。",
      layer: "层",
      head: "head",
      query: "Query",
      heatmap: "注意力权重",
      heatmap_hint: "行 = Query（当前位置），列 = Key（被参考的位置）。颜色越深权重越大，" +
        "灰色 = mask 为 0（不能看）。点击一行选择 Query。",
      legend: (top) => `颜色深浅 ∝ √权重；最深 = ${top}（这个 head 各行最大权重的中位数，更大的权重同样最深）。`,
      save: "保存图片（PNG）",
      heads: "每个 head 的摘要",
      heads_hint: "熵（bit）越小，注意力越集中；“首”是平均落在第一个 token 上的权重。点击选择 head。",
      stages: "逐步计算",
      prev: "上一步",
      next: "下一步",
      prediction: "模型预测的下一个 token",
      footer: "所有数字来自真实模型的一次前向计算，本页按教程的公式逐步重算；本页不发出任何网络请求。",
      model: (m, L) => `模型：${m.name} · ${m.n_layers} 层 × ${m.n_heads} 个 head · d_model = ${m.d_model} · ` +
        `d_k = ${m.head_dim} · ${L} 个 token`,
      limits: (c, n) => `最多 ${c} 个字符、${n} 个 token`,
      status: (L, ms) => `${L} 个 token · 用时 ${ms} ms`,
      busy: "计算中…",
      no_intervention: "干预：无",
      intervention: (parts) => "干预：" + parts.join("，"),
      iv_scaling: "不除以 √d_k",
      iv_causal: "关闭因果 mask",
      iv_temperature: (T) => `温度 T = ${T}`,
      rule_auto: (rule) => rule,
      rule_layer: "在这一层里自动选择注意力最集中的 head",
      rule_head: "为这个 head 自动选择熵最低的层",
      rule_user: "你选择的 head",
      attends: (tok, list) => `“${tok}” 关注：${list}`,
      step: (n, total, name) => `第 ${n} / ${total} 步：${name}`,
      st_x: "X", st_qkv: "Q / K / V", st_scores: "QKᵀ", st_scaled: "÷√d_k", st_mask: "mask",
      st_softmax: "softmax", st_weighted: "·V", st_output: "输出",
      ex_x: (i, tok, m) => `第 ${i} 个 token “${tok}” 进入这一层注意力的输入向量 X[${i}]（LayerNorm 之后），` +
        `${m.d_model} 维。`,
      ex_qkv: (h) => `Q = X·W_Q + b，K = X·W_K + b，V = X·W_V + b（head ${h}）。Query 表示“我想找什么信息”，` +
        "Key 表示“我这里有什么信息可被匹配”，Value 是“别人关注我时我提供的内容”。点击下表的 Key 查看它的 K 和 V。",
      ex_scores: "score[i][j] = Q[i] · K[j]：第 i 个位置的 Query 和第 j 个位置的 Key 有多匹配。",
      ex_scaled: (how) => `缩放：scaled = score × ${how}，让分数范围更稳定。`,
      ex_mask_on: "因果 mask：1 表示可以看，0 表示不能看（未来的 token）。不能看的位置改成 -inf，而不是 0。",
      ex_mask_off: "因果 mask 已关闭：每个位置都能看到所有 token，包括未来的。",
      ex_softmax: (lse) => `weights = softmax(masked)：每一行加起来是 100%，-inf 的位置权重正好是 0。` +
        `（分母 log Σ exp(masked) = ${lse}）`,
      ex_weighted: (h) => `按权重加权求和 Value：Σ_j weights[j] · V[j]（head ${h} 的输出）。`,
      ex_output: "所有 head 的结果拼接后乘 W_O，就是注意力层的输出；再加上残差和 MLP，是这一层（block）的输出。",
      scale_on: (D, T) => (T === 1 ? `1/√${D}` : `1/(√${D}·T)，T = ${T}`),
      scale_off: (T) => (T === 1 ? "1（不缩放）" : `1/T，T = ${T}（不除以 √d_k）`),
      row_scores: "QKᵀ", row_scaled: "÷√d_k", row_visible: "mask 1/0", row_masked: "masked",
      row_weights: "weights", row_baseline: "无干预",
      key: "Key", vec_x: "X", vec_q: "q", vec_k: "k", vec_v: "v", vec_weighted: "Σ w·V",
      vec_attn_out: "注意力层输出", vec_output: "这一层的输出",
      shown_keys: (n, L) => `共 ${L} 个 Key，表中显示 ${n} 个：权重最高的 ${TOP_KEYS} 个、第一个 token 和自己。`,
      sum: (s) => `Σ weights = ${s}`,
      pred_now: "现在",
      pred_base: "无干预",
      no_prediction: "这个模型是编码器，没有下一个 token 的预测。",
      tip_hidden: "mask = 0（不能看）",
      entropy: "bit",
      first: "首",
      error_temperature: (lo, hi) => `温度必须是 ${lo} 到 ${hi} 之间的数`,
      unknown: (n, L, msg) => `注意：${L} 个 token 中有 ${n} 个是分词器不认识的（已用虚线框标出）。${msg}`,
    },
    en: {
      title: "What is Self-Attention · attention explorer",
      lang: "中文",
      input: "Type a sentence (Chinese is cut into words with jieba)",
      submit: "Explain",
      interventions: "Interventions (change every layer's computation, and the prediction)",
      scaling: "÷√d_k scaling",
      causal: "causal mask",
      temperature: "softmax temperature T",
      tokens: "Tokens",
      tokens_hint: "Hover a token to see what it attends to; click it to step through its computation below.",
      layer: "layer",
      head: "head",
      query: "query",
      heatmap: "Attention weights",
      heatmap_hint: "Rows = queries, columns = keys. Darker = larger weight; grey = mask 0 (may not look). " +
        "Click a row to pick the query.",
      legend: (top) => `shade ∝ √weight; the darkest = ${top} (the median of this head's row maxima; larger ` +
        "weights are as dark).",
      save: "Save picture (PNG)",
      heads: "Every head at a glance",
      heads_hint: "Lower entropy (bits) = more concentrated attention; \"1st\" = mean weight on the first token. " +
        "Click to pick a head.",
      stages: "Step by step",
      prev: "Previous",
      next: "Next",
      prediction: "The model's next-token prediction",
      footer: "Every number comes from one forward pass of a real model and is recomputed here with the " +
        "tutorial's formulas; this page makes no network request.",
      model: (m, L) => `model: ${m.name} · ${m.n_layers} layers × ${m.n_heads} heads · d_model = ${m.d_model} · ` +
        `d_k = ${m.head_dim} · ${L} tokens`,
      limits: (c, n) => `at most ${c} characters and ${n} tokens`,
      status: (L, ms) => `${L} tokens · ${ms} ms`,
      busy: "computing…",
      no_intervention: "no intervention",
      intervention: (parts) => "intervention: " + parts.join(", "),
      iv_scaling: "no ÷√d_k",
      iv_causal: "causal mask off",
      iv_temperature: (T) => `temperature T = ${T}`,
      rule_auto: (rule) => rule,
      rule_layer: "the most concentrated head of this layer, picked automatically",
      rule_head: "the layer where this head has the lowest entropy, picked automatically",
      rule_user: "the head you picked",
      attends: (tok, list) => `"${tok}" attends to: ${list}`,
      step: (n, total, name) => `step ${n} / ${total}: ${name}`,
      st_x: "X", st_qkv: "Q / K / V", st_scores: "QKᵀ", st_scaled: "÷√d_k", st_mask: "mask",
      st_softmax: "softmax", st_weighted: "·V", st_output: "output",
      ex_x: (i, tok, m) => `X[${i}]: the input vector of token ${i} "${tok}" to this layer's attention ` +
        `(after LayerNorm), ${m.d_model} numbers.`,
      ex_qkv: (h) => `Q = X·W_Q + b, K = X·W_K + b, V = X·W_V + b (head ${h}). The query asks "what am I ` +
        'looking for", the key says "what I can be matched on", the value is what I give when attended to. ' +
        "Click a key in the table to see its K and V.",
      ex_scores: "score[i][j] = Q[i] · K[j]: how well the query of position i matches the key of position j.",
      ex_scaled: (how) => `Scaling: scaled = score × ${how}, which keeps the range stable.`,
      ex_mask_on: "Causal mask: 1 = may look, 0 = may not (a future token). Hidden positions become -inf, not 0.",
      ex_mask_off: "The causal mask is off: every position sees every token, the future included.",
      ex_softmax: (lse) => "weights = softmax(masked): each row sums to 100%, and -inf gets exactly 0. " +
        `(denominator log Σ exp(masked) = ${lse})`,
      ex_weighted: (h) => `Read the values: Σ_j weights[j] · V[j] (the output of head ${h}).`,
      ex_output: "All heads concatenated and multiplied by W_O give the attention output; adding the residual " +
        "and the MLP gives the output of this layer (block).",
      scale_on: (D, T) => (T === 1 ? `1/√${D}` : `1/(√${D}·T), T = ${T}`),
      scale_off: (T) => (T === 1 ? "1 (no scaling)" : `1/T, T = ${T} (no ÷√d_k)`),
      row_scores: "QKᵀ", row_scaled: "÷√d_k", row_visible: "mask 1/0", row_masked: "masked",
      row_weights: "weights", row_baseline: "no intervention",
      key: "key", vec_x: "X", vec_q: "q", vec_k: "k", vec_v: "v", vec_weighted: "Σ w·V",
      vec_attn_out: "attention output", vec_output: "layer output",
      shown_keys: (n, L) => `${L} keys; the table shows ${n}: the ${TOP_KEYS} with the largest weights, ` +
        "the first token and the query itself.",
      sum: (s) => `Σ weights = ${s}`,
      pred_now: "now",
      pred_base: "no intervention",
      no_prediction: "This model is an encoder: it predicts no next token.",
      tip_hidden: "mask = 0 (may not look)",
      entropy: "bit",
      first: "1st",
      error_temperature: (lo, hi) => `the temperature must be a number between ${lo} and ${hi}`,
      unknown: (n, L, msg) => `Note: ${n} of ${L} tokens are unknown to the tokenizer (dashed boxes). ${msg}`,
    },
  };

  // ---------------------------------------------------------------------------------------
  // State
  // ---------------------------------------------------------------------------------------

  const $ = (id) => document.getElementById(id);
  const app = $("app");
  const state = {
    lang: "zh",
    pickRule: {},
    doc: null, // the shown export dict, arrays unpacked
    baseline: null, // live mode: the same text without intervention
    layer: 0,
    head: 0,
    rule: null, // how (layer, head) was chosen: "auto", "within layer", "within head", null / "user" = by you
    row: 0, // the selected query position i
    stage: 0, // index into STAGES
    focus: null, // the key j whose K and V are shown
    hover: null, // the query position under the mouse (token strip)
    matrix: null, // {key, weights: Float32Array L×L, picture: canvas} of the selected head
    seq: 0, // live mode: number of the latest request
    limits: null,
    temperature: null, // live mode: {min, max} the server accepts (from the page's data)
    api: null,
  };

  function t(key, ...args) {
    const v = TEXT[state.lang][key];
    return typeof v === "function" ? v(...args) : v;
  }

  // ---------------------------------------------------------------------------------------
  // Data: packed arrays (base64, little-endian) → typed arrays
  // ---------------------------------------------------------------------------------------

  function bytesOf(b64) {
    const bin = atob(b64);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  function unpack(p) {
    const bytes = bytesOf(p.b64);
    if (p.dtype === "bits") return { shape: p.shape, bits: bytes };
    const data = p.dtype === "f32" ? new Float32Array(bytes.buffer) : new Float64Array(bytes.buffer);
    return { shape: p.shape, data };
  }

  /** Row i of a matrix (a view, no copy). */
  function row(m, i) {
    const n = m.shape[m.shape.length - 1];
    return m.data.subarray(i * n, (i + 1) * n);
  }

  /** visible[i][j] of a bit-packed L×L matrix: 1 = may look. */
  function bit(m, i, j) {
    const idx = i * m.shape[1] + j;
    return (m.bits[idx >> 3] >> (7 - (idx & 7))) & 1;
  }

  function loadDoc(packed) {
    const layers = packed.layers.map((layer) => Object.assign({}, layer, {
      x: unpack(layer.x),
      attn_out: unpack(layer.attn_out),
      output: unpack(layer.output),
      visible: unpack(layer.visible),
      heads: layer.heads.map((head) => Object.assign({}, head, {
        q: unpack(head.q), k: unpack(head.k), v: unpack(head.v), lse: unpack(head.lse),
        visible: head.visible ? unpack(head.visible) : undefined, // only a head an intervention changed apart
      })),
    }));
    return Object.assign({}, packed, { layers });
  }

  // ---------------------------------------------------------------------------------------
  // The tutorial's stages for one query row (LayerTrace.stages, one row at a time)
  // ---------------------------------------------------------------------------------------

  /** weights_ij = exp(masked_ij − lse_i); 0 where hidden (masked −inf) and in a row that sees
   * nothing (lse −inf). The page's one copy of selfattn.explain.trace.weights_from_lse. */
  function weightOf(masked, lse) {
    return Number.isFinite(lse) && masked !== -Infinity ? Math.exp(masked - lse) : 0;
  }

  /** The rule head h of layer l was computed with: its own when an intervention changed it apart. */
  function headRule(layer, h) {
    const head = layer.heads[h];
    const own = head.visible !== undefined;
    return {
      scale: own ? head.scale : layer.scale,
      softcap: own ? head.softcap : layer.softcap,
      visible: own ? head.visible : layer.visible,
    };
  }

  /** scaled score: score · scale, then softcap · tanh(· / softcap) when the model caps its scores. */
  function scaleScore(score, rule) {
    const s = score * rule.scale;
    return rule.softcap ? rule.softcap * Math.tanh(s / rule.softcap) : s;
  }

  function stageRow(doc, l, h, i) {
    const layer = doc.layers[l];
    const head = layer.heads[h];
    const rule = headRule(layer, h);
    const L = doc.tokens.length;
    const q = row(head.q, i);
    const lse = head.lse.data[i];
    const scores = new Float64Array(L);
    const scaled = new Float64Array(L);
    const visible = new Uint8Array(L);
    const masked = new Float64Array(L);
    const weights = new Float64Array(L);
    for (let j = 0; j < L; j++) {
      scores[j] = dot(q, row(head.k, j)); // QKᵀ: score_ij = Q_i · K_j
      scaled[j] = scaleScore(scores[j], rule); // ÷√d_k (and ÷T, and the softcap), as the rule says
      visible[j] = bit(rule.visible, i, j); // the causal mask: 1 = may look
      masked[j] = visible[j] ? scaled[j] : -Infinity; // hidden → −inf, not 0
      // softmax through the saved log-sum-exp: exp(masked − log Σ exp(masked))
      weights[j] = weightOf(masked[j], lse);
    }
    const dv = head.v.shape[1];
    const weighted = new Float64Array(dv); // ·V: Σ_j weights_j V_j
    for (let j = 0; j < L; j++) {
      if (weights[j] === 0) continue;
      const v = row(head.v, j);
      for (let d = 0; d < dv; d++) weighted[d] += weights[j] * v[d];
    }
    return { scores, scaled, visible, masked, weights, weighted, lse };
  }

  function dot(a, b) {
    let s = 0;
    for (let d = 0; d < a.length; d++) s += a[d] * b[d];
    return s;
  }

  /** Every row's weights of one head, L×L float32, for the heatmap and the token strip. */
  function weightMatrix(doc, l, h) {
    const layer = doc.layers[l];
    const head = layer.heads[h];
    const rule = headRule(layer, h);
    const L = doc.tokens.length;
    const D = head.q.shape[1];
    const qd = head.q.data, kd = head.k.data, lse = head.lse.data;
    const out = new Float32Array(L * L);
    for (let i = 0; i < L; i++) {
      if (!Number.isFinite(lse[i])) continue; // a row that may look at nothing: all 0
      for (let j = 0; j < L; j++) {
        if (!bit(rule.visible, i, j)) continue;
        let s = 0;
        for (let d = 0; d < D; d++) s += qd[i * D + d] * kd[j * D + d];
        out[i * L + j] = weightOf(scaleScore(s, rule), lse[i]);
      }
    }
    return out;
  }

  // ---------------------------------------------------------------------------------------
  // Small helpers: numbers, elements, colours
  // ---------------------------------------------------------------------------------------

  function num(x) {
    if (x === -Infinity) return "-inf";
    if (x === Infinity) return "inf";
    return x.toFixed(DIGITS);
  }

  function pct(x) {
    return (100 * x).toFixed(PERCENT_DIGITS) + "%";
  }

  /** An element with attributes and text (text via textContent: never parsed). */
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  /** Weight → colour. The darkest shade is `top` (the largest weight of the head shown, see
   * `colourTop`), and the shade follows √(w / top), so that the small weights of a long input
   * stay visible; the legend under the heatmap says what the darkest shade is. */
  function shade(w, top = 1) {
    const s = Math.sqrt(Math.max(0, Math.min(1, w / top)));
    return LOW_RGB.map((lo, c) => Math.round(lo + (HIGH_RGB[c] - lo) * s));
  }

  /** The weight drawn darkest: the median of the row maxima, over the rows that can see at least
   * two tokens (a row that sees one token gives it 100% and has no choice to make — the rule of
   * the per-head summaries). Larger weights are drawn as dark. With 6 tokens this is about 50%,
   * with 1,000 about 1%: either way the picture shows where each row looks. */
  function colourTop(doc, l, weights) {
    const L = doc.tokens.length;
    const visible = doc.layers[l].visible;
    const maxima = [];
    for (let i = 0; i < L; i++) {
      let seen = 0;
      for (let j = 0; j < L && seen < 2; j++) seen += bit(visible, i, j);
      if (seen < 2) continue;
      let top = 0;
      for (let j = 0; j < L; j++) top = Math.max(top, weights[i * L + j]);
      maxima.push(top);
    }
    maxima.sort((a, b) => a - b);
    const median = maxima.length ? maxima[Math.floor(maxima.length / 2)] : 1;
    return median > 0 ? median : 1;
  }

  function rgb(c) {
    return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
  }

  function isIdentity(iv) {
    return iv.scaling && iv.causal && iv.temperature === 1;
  }

  function sameTokens(a, b) {
    return !!a && !!b && a.tokens.length === b.tokens.length && a.tokens.every((tok, i) => tok === b.tokens[i]);
  }

  // ---------------------------------------------------------------------------------------
  // Selection
  // ---------------------------------------------------------------------------------------

  function setDoc(doc, keepSelection) {
    const started = performance.now();
    const L = doc.tokens.length;
    state.doc = doc;
    state.matrix = null;
    if (!keepSelection || state.layer >= doc.layers.length || state.head >= doc.layers[0].heads.length) {
      state.layer = doc.selected.layer;
      state.head = doc.selected.head;
      state.rule = doc.selected.rule;
    }
    if (!keepSelection || state.row >= L) {
      state.row = L - 1; // the last token: the one whose next token the model predicts
      state.focus = null;
    }
    renderAll();
    app.dataset.renderMs = String(Math.round(performance.now() - started));
  }

  function select(changes) {
    Object.assign(state, changes);
    if ("layer" in changes || "head" in changes) {
      state.rule = "user";
      state.matrix = null;
    }
    if ("row" in changes && !("focus" in changes)) state.focus = null;
    renderSelection();
  }

  // ---------------------------------------------------------------------------------------
  // Rendering
  // ---------------------------------------------------------------------------------------

  function renderAll() {
    app.dataset.ready = "0";
    renderWords();
    renderModel();
    renderTokens();
    renderSelectors();
    renderPrediction();
    renderSelection();
  }

  /** Everything that depends on (layer, head, row, stage). */
  function renderSelection() {
    const doc = state.doc;
    if (!doc) return;
    if (!state.matrix || state.matrix.key !== `${state.layer}/${state.head}`) {
      const weights = weightMatrix(doc, state.layer, state.head);
      const top = colourTop(doc, state.layer, weights);
      state.matrix = { key: `${state.layer}/${state.head}`, weights, top, picture: picture(doc, weights, top) };
      renderLegend(top);
    }
    $("layer").value = String(state.layer);
    $("head").value = String(state.head);
    $("query").value = String(state.row);
    renderRule();
    renderGrid();
    paintTokens(state.hover === null ? state.row : state.hover);
    drawHeatmap();
    renderStepper();
    Object.assign(app.dataset, {
      layer: state.layer, head: state.head, row: state.row, stage: STAGES[state.stage], lang: state.lang,
    });
    app.dataset.ready = "1";
  }

  function renderWords() {
    document.documentElement.lang = state.lang === "zh" ? "zh-CN" : "en";
    for (const e of document.querySelectorAll("[data-i18n]")) e.textContent = t(e.dataset.i18n);
    $("lang").textContent = t("lang");
    if (state.limits) $("limits").textContent = t("limits", state.limits.max_chars, state.limits.max_tokens);
  }

  function renderModel() {
    const m = state.doc.model;
    $("model-info").textContent = t("model", m, state.doc.tokens.length) +
      (m.architecture ? ` · ${m.architecture} · ${m.positions}` : "");
    const unknown = state.doc.unknown || { count: 0, message: "" };
    $("unknown").textContent = unknown.count ? t("unknown", unknown.count, state.doc.tokens.length, unknown.message) : "";
    $("unknown").hidden = !unknown.count;
    const iv = state.doc.intervention;
    const parts = [];
    if (!iv.scaling) parts.push(t("iv_scaling"));
    if (!iv.causal) parts.push(t("iv_causal"));
    if (iv.temperature !== 1) parts.push(t("iv_temperature", iv.temperature));
    const badge = $("intervention");
    badge.textContent = parts.length ? t("intervention", parts) : t("no_intervention");
    badge.classList.toggle("on", parts.length > 0);
  }

  function renderRule() {
    const rule = state.rule;
    let text = t("rule_user");
    if (rule === "auto") text = state.pickRule[state.lang] || "auto";
    else if (rule === "within layer") text = t("rule_layer");
    else if (rule === "within head") text = t("rule_head");
    $("rule").textContent = text;
  }

  // --- tokens: hover to see what a token attends to, click to pick it as the query ---

  function renderTokens() {
    const box = $("tokens");
    box.replaceChildren();
    const unknownAt = new Set(state.doc.unknown ? state.doc.unknown.positions : []);
    state.doc.tokens.forEach((tok, i) => {
      const span = el("span", { class: "tok", "data-testid": "token", "data-index": i }, tok);
      if (/^<[^<>]*>$/.test(tok)) span.classList.add("special");
      if (unknownAt.has(i)) span.classList.add("unk");
      box.append(span);
    });
  }

  function onTokenHover(event) {
    const span = event.target.closest(".tok");
    const i = span ? Number(span.dataset.index) : null;
    if (i === state.hover) return;
    state.hover = i;
    paintTokens(i === null ? state.row : i);
  }

  /** Colour every token by the weight that query i gives it, and name the top ones. */
  function paintTokens(i) {
    const L = state.doc.tokens.length;
    const w = state.matrix.weights.subarray(i * L, (i + 1) * L);
    const spans = $("tokens").children;
    for (let j = 0; j < L; j++) {
      const span = spans[j];
      const c = shade(w[j], state.matrix.top);
      span.style.backgroundColor = rgb(c);
      span.style.color = w[j] > 0.3 * state.matrix.top ? "#fff" : "";
      span.classList.toggle("query", j === i);
      span.classList.toggle("selected", j === state.row);
      span.title = pct(w[j]);
    }
    const top = Array.from(w.keys()).sort((a, b) => w[b] - w[a]).slice(0, TOP_ATTENDED).filter((j) => w[j] > 0);
    const list = top.map((j) => `${state.doc.tokens[j]} ${pct(w[j])}`).join(" · ");
    $("attends").textContent = t("attends", state.doc.tokens[i], list);
  }

  // --- selectors and the per-head summary grid ---

  function renderSelectors() {
    const doc = state.doc;
    fill($("layer"), doc.layers.map((_, l) => String(l)));
    fill($("head"), doc.layers[0].heads.map((_, h) => String(h)));
    fill($("query"), doc.tokens.map((tok, i) => `${i} · ${tok}`));
  }

  function fill(selectEl, labels) {
    selectEl.replaceChildren(...labels.map((label, i) => el("option", { value: i }, label)));
  }

  function renderGrid() {
    const table = $("grid");
    const doc = state.doc;
    const head = el("tr");
    head.append(el("th", {}, ""));
    doc.layers[0].heads.forEach((_, h) => head.append(el("th", {}, `${t("head")} ${h}`)));
    const rows = doc.summaries.map((heads, l) => {
      const tr = el("tr");
      tr.append(el("th", {}, `${t("layer")} ${l}`));
      heads.forEach((s, h) => {
        const td = el("td", { "data-testid": "head-cell", "data-layer": l, "data-head": h, tabindex: 0 });
        td.append(el("b", {}, `${s.entropy.toFixed(2)} ${t("entropy")}`), el("span", {}, `${t("first")} ${pct(s.first_token)}`));
        td.classList.toggle("current", l === state.layer && h === state.head);
        td.style.backgroundColor = rgb(shade(s.max_weight * 0.5));
        tr.append(td);
      });
      return tr;
    });
    table.replaceChildren(head, ...rows);
  }

  // --- the heatmap: L×L pixels drawn once into an ImageData, then scaled onto the canvas ---

  function picture(doc, weights, top) {
    const L = doc.tokens.length;
    const visible = doc.layers[state.layer].visible;
    const canvas = document.createElement("canvas");
    canvas.width = canvas.height = L;
    const ctx = canvas.getContext("2d");
    const img = ctx.createImageData(L, L);
    for (let i = 0; i < L; i++) {
      for (let j = 0; j < L; j++) {
        const c = bit(visible, i, j) ? shade(weights[i * L + j], top) : HIDDEN_RGB;
        const p = 4 * (i * L + j);
        img.data[p] = c[0];
        img.data[p + 1] = c[1];
        img.data[p + 2] = c[2];
        img.data[p + 3] = 255;
      }
    }
    ctx.putImageData(img, 0, 0);
    return canvas;
  }

  /** The colour scale: white = 0, the darkest blue = top, shades ∝ √weight in between. */
  function renderLegend(top) {
    const bar = $("legend-bar");
    bar.style.background = `linear-gradient(to right, ${rgb(LOW_RGB)}, ${rgb(HIGH_RGB)})`;
    $("legend-low").textContent = pct(0);
    $("legend-mid").textContent = pct(top / 4);
    $("legend-high").textContent = pct(top);
    $("legend-note").textContent = t("legend", pct(top));
  }

  function heatmapGeometry() {
    const L = state.doc.tokens.length;
    const labelled = L <= LABELLED_HEATMAP;
    const margin = labelled ? 96 : 36;
    const size = labelled ? Math.min(HEATMAP_PX, Math.max(MIN_HEATMAP_PX, L * LABELLED_CELL_PX)) : HEATMAP_PX;
    return { L, margin, size, cell: size / L };
  }

  function drawHeatmap() {
    const canvas = $("heatmap");
    const { L, margin, size, cell } = heatmapGeometry();
    const css = margin + size + HEATMAP_PAD_PX;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(css * dpr);
    canvas.height = Math.round(css * dpr);
    canvas.style.width = canvas.style.height = `${css}px`;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, css, css);
    ctx.imageSmoothingEnabled = L > size; // shrink a long input smoothly, enlarge a short one crisply
    ctx.drawImage(state.matrix.picture, margin, margin, size, size);
    ctx.fillStyle = "#333";
    ctx.font = `${L <= LABELLED_HEATMAP ? 13 : 11}px ${FONT}`;
    if (L <= LABELLED_HEATMAP) drawLabels(ctx, margin, cell);
    else drawTicks(ctx, margin, cell, L);
    ctx.strokeStyle = "#f97316"; // the selected query row
    ctx.lineWidth = 2;
    ctx.strokeRect(margin - 1, margin + state.row * cell - 1, size + 2, Math.max(cell, 1) + 2);
  }

  function drawLabels(ctx, margin, cell) {
    const tokens = state.doc.tokens;
    ctx.textBaseline = "middle";
    ctx.textAlign = "right";
    tokens.forEach((tok, i) => ctx.fillText(clip(tok), margin - 6, margin + (i + 0.5) * cell, margin - 10));
    ctx.textAlign = "left";
    tokens.forEach((tok, j) => {
      ctx.save();
      ctx.translate(margin + (j + 0.5) * cell, margin - 6);
      ctx.rotate(-Math.PI / 3);
      ctx.fillText(clip(tok), 0, 0, margin);
      ctx.restore();
    });
  }

  function drawTicks(ctx, margin, cell, L) {
    const step = Math.pow(10, Math.floor(Math.log10(L / 4)));
    ctx.textBaseline = "middle";
    for (let p = 0; p < L; p += step * Math.ceil(L / (step * 8))) {
      ctx.textAlign = "right";
      ctx.fillText(String(p), margin - 4, margin + (p + 0.5) * cell);
      ctx.textAlign = "center";
      ctx.fillText(String(p), margin + (p + 0.5) * cell, margin - 10);
    }
  }

  function clip(tok) {
    return tok.length > 8 ? tok.slice(0, 7) + "…" : tok;
  }

  /** The (query, key) cell under a mouse event, or null. */
  function cellAt(event) {
    const { L, margin, size } = heatmapGeometry();
    const rect = $("heatmap").getBoundingClientRect();
    const x = event.clientX - rect.left - margin;
    const y = event.clientY - rect.top - margin;
    if (x < 0 || y < 0 || x >= size || y >= size) return null;
    return { i: Math.floor((y / size) * L), j: Math.floor((x / size) * L), x: x + margin, y: y + margin };
  }

  function onHeatmapMove(event) {
    const tip = $("tip");
    const c = cellAt(event);
    if (!c) {
      tip.hidden = true;
      return;
    }
    const doc = state.doc;
    const L = doc.tokens.length;
    const visible = bit(doc.layers[state.layer].visible, c.i, c.j);
    const value = visible ? pct(state.matrix.weights[c.i * L + c.j]) : t("tip_hidden");
    tip.textContent = `${t("query")} ${c.i} “${doc.tokens[c.i]}” → ${t("key")} ${c.j} “${doc.tokens[c.j]}”: ${value}`;
    tip.style.left = `${c.x + 14}px`;
    tip.style.top = `${c.y + 14}px`;
    tip.hidden = false;
  }

  function savePicture() {
    $("heatmap").toBlob((blob) => {
      const url = URL.createObjectURL(blob);
      const a = el("a", { href: url, download: `attention-layer${state.layer}-head${state.head}.png` });
      a.click();
      setTimeout(() => URL.revokeObjectURL(url), 0);
    });
  }

  // --- the stage stepper: the real numbers of the selected query row ---

  function renderStepper() {
    const nav = $("steps");
    nav.replaceChildren(...STAGES.map((name, s) => {
      const b = el("button", { type: "button", "data-testid": `stage-btn-${name}`, "data-stage": s }, t(`st_${name}`));
      b.classList.toggle("current", s === state.stage);
      b.classList.toggle("done", s < state.stage);
      return b;
    }));
    $("prev").disabled = state.stage === 0;
    $("next").disabled = state.stage === STAGES.length - 1;
    renderPanel();
  }

  function renderPanel() {
    const doc = state.doc;
    const { layer: l, head: h, row: i } = state;
    const st = stageRow(doc, l, h, i);
    if (state.focus === null) state.focus = argmax(st.weights);
    const name = STAGES[state.stage];
    const panel = $("panel");
    panel.replaceChildren(el("h3", {}, t("step", state.stage + 1, STAGES.length, t(`st_${name}`))));
    panel.append(el("p", { class: "explain", "data-testid": "stage-explain" }, explanation(name, st)));
    const layer = doc.layers[l];
    const head = layer.heads[h];
    if (name === "x") panel.append(vector("x", t("vec_x") + `[${i}]`, row(layer.x, i)));
    if (name === "qkv") {
      const j = state.focus;
      panel.append(vector("q", `${t("vec_q")}[${i}]`, row(head.q, i)),
        vector("k", `${t("vec_k")}[${j}] “${doc.tokens[j]}”`, row(head.k, j)),
        vector("v", `${t("vec_v")}[${j}] “${doc.tokens[j]}”`, row(head.v, j)));
    }
    if (state.stage >= STAGES.indexOf("qkv")) panel.append(keyTable(st));
    if (name === "softmax" || name === "weighted") {
      const total = st.weights.reduce((a, b) => a + b, 0);
      panel.append(el("p", { class: "hint", "data-testid": "weights-sum" }, t("sum", pct(total))));
    }
    if (name === "weighted") panel.append(vector("weighted", `${t("vec_weighted")}[${i}]`, st.weighted));
    if (name === "output") {
      panel.append(vector("attn_out", `${t("vec_attn_out")}[${i}]`, row(layer.attn_out, i)),
        vector("output", `${t("vec_output")}[${i}]`, row(layer.output, i)));
    }
  }

  function explanation(name, st) {
    const doc = state.doc;
    const i = state.row;
    const iv = doc.intervention;
    const D = doc.model.head_dim;
    switch (name) {
      case "x": return t("ex_x", i, doc.tokens[i], doc.model);
      case "qkv": return t("ex_qkv", state.head);
      case "scores": return t("ex_scores");
      case "scaled": {
        const how = iv.scaling ? t("scale_on", D, iv.temperature) : t("scale_off", iv.temperature);
        return t("ex_scaled", `${num(doc.layers[state.layer].scale)} (= ${how})`);
      }
      case "mask": return doc.layers[state.layer].causal ? t("ex_mask_on") : t("ex_mask_off");
      case "softmax": return t("ex_softmax", num(st.lse));
      case "weighted": return t("ex_weighted", state.head);
      default: return t("ex_output");
    }
  }

  /** A labelled vector of numbers; each number carries its dimension in data-dim. */
  function vector(name, label, values) {
    const box = el("div", { class: "vec", "data-testid": `vec-${name}` });
    box.append(el("div", { class: "label" }, `${label} (${values.length})`));
    const nums = el("div", { class: "nums" });
    values.forEach((v, d) => nums.append(el("span", { "data-dim": d }, num(v))));
    box.append(nums);
    return box;
  }

  /** The keys shown as columns: all of them, or for a long input the ones that matter most. */
  function shownKeys(st) {
    const L = st.weights.length;
    if (L <= MAX_KEY_COLUMNS) return Array.from({ length: L }, (_, j) => j);
    const order = Array.from(st.weights.keys()).sort((a, b) => st.weights[b] - st.weights[a]);
    const keys = new Set([0, state.row, state.focus, ...order.slice(0, TOP_KEYS)]);
    return Array.from(keys).sort((a, b) => a - b);
  }

  function keyTable(st) {
    const doc = state.doc;
    const keys = shownKeys(st);
    const wrap = el("div", { class: "scroll" });
    const table = el("table", { class: "keys", "data-testid": "key-table" });
    const head = el("tr");
    head.append(el("th", {}, t("key")));
    for (const j of keys) {
      const th = el("th", { "data-key": j, class: "keyhead" });
      th.append(el("span", { class: "idx" }, j), el("span", { class: "word" }, doc.tokens[j]));
      th.classList.toggle("focus", j === state.focus);
      head.append(th);
    }
    table.append(head);
    for (const { name, from } of KEY_ROWS) {
      if (state.stage < STAGES.indexOf(from)) continue;
      table.append(keyRow(name, t(`row_${name}`), keys, st[name], name === "weights"));
    }
    const base = baselineRow();
    if (base && state.stage >= STAGES.indexOf("softmax")) table.append(keyRow("baseline", t("row_baseline"), keys, base, true));
    wrap.append(table);
    const box = el("div", {});
    if (keys.length < st.weights.length) box.append(el("p", { class: "hint" }, t("shown_keys", keys.length, st.weights.length)));
    box.append(wrap);
    return box;
  }

  function keyRow(name, label, keys, values, percent) {
    const tr = el("tr", { "data-testid": `row-${name}` });
    tr.append(el("th", {}, label));
    for (const j of keys) {
      const v = values[j];
      const td = el("td", { "data-key": j }, name === "visible" ? String(v) : percent ? pct(v) : num(v));
      if (percent) td.style.backgroundColor = rgb(shade(v, state.matrix.top));
      if (percent && v > 0.3 * state.matrix.top) td.style.color = "#fff";
      if (name === "visible" && !v) td.classList.add("hidden");
      td.classList.toggle("focus", j === state.focus);
      tr.append(td);
    }
    return tr;
  }

  /** Live mode with an intervention: the weights of the same row without it. */
  function baselineRow() {
    const base = state.baseline;
    if (!base || base === state.doc || isIdentity(state.doc.intervention) || !sameTokens(base, state.doc)) return null;
    return stageRow(base, state.layer, state.head, state.row).weights;
  }

  function argmax(values) {
    let best = 0;
    for (let j = 1; j < values.length; j++) if (values[j] > values[best]) best = j;
    return best;
  }

  // --- the next-token prediction ---

  function renderPrediction() {
    const box = $("prediction");
    const doc = state.doc;
    if (!doc.prediction.length) {
      box.replaceChildren(el("p", { class: "hint" }, t("no_prediction")));
      return;
    }
    const base = state.baseline;
    const compare = base && base !== doc && sameTokens(base, doc) && !isIdentity(doc.intervention);
    const lists = [predictionList("prediction-row", compare ? t("pred_now") : null, doc.prediction)];
    if (compare) lists.push(predictionList("baseline-row", t("pred_base"), base.prediction));
    box.replaceChildren(el("div", { class: "preds" }));
    box.firstChild.append(...lists);
  }

  function predictionList(testid, title, prediction) {
    const list = el("div", { class: "pred" });
    if (title) list.append(el("h3", {}, title));
    for (const p of prediction) {
      const r = el("div", { class: "predrow", "data-testid": testid, "data-id": p.id });
      const bar = el("span", { class: "bar" });
      bar.style.width = `${(100 * p.prob).toFixed(1)}%`;
      r.append(el("span", { class: "word" }, p.token), el("span", { class: "prob" }, pct(p.prob)), el("span", { class: "track" }));
      r.lastChild.append(bar);
      list.append(r);
    }
    return list;
  }

  // ---------------------------------------------------------------------------------------
  // Live mode: a text box and interventions, answered by POST /api/explain
  // ---------------------------------------------------------------------------------------

  function setupLive(data) {
    state.limits = data.limits;
    state.temperature = data.temperature;
    state.api = data.api;
    $("temperature").min = String(data.temperature.min);
    $("temperature").max = String(data.temperature.max);
    $("live").hidden = false;
    $("text").maxLength = data.limits.max_chars;
    $("text").value = data.doc ? data.doc.text : "";
    // The page's policy forbids form submission (form-action 'none'): the button and Enter ask with fetch.
    $("submit").addEventListener("click", () => request());
    $("text").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault(); // Shift+Enter: a new line; Enter while an input method composes: untouched
        request();
      }
    });
    $("form").addEventListener("submit", (event) => event.preventDefault());
    $("scaling").addEventListener("change", () => request());
    $("causal").addEventListener("change", () => request());
    let timer = null;
    $("temperature-range").addEventListener("input", () => {
      $("temperature").value = $("temperature-range").value;
      clearTimeout(timer);
      timer = setTimeout(request, TEMPERATURE_DELAY_MS);
    });
    $("temperature").addEventListener("change", () => {
      $("temperature-range").value = $("temperature").value;
      request();
    });
  }

  function intervention() {
    return {
      scaling: $("scaling").checked,
      causal: $("causal").checked,
      temperature: Number($("temperature").value),
    };
  }

  async function request() {
    const text = $("text").value;
    const iv = intervention();
    const limit = state.temperature;
    if (!(iv.temperature >= limit.min && iv.temperature <= limit.max)) {
      showError(t("error_temperature", limit.min, limit.max));
      return;
    }
    const keep = !!state.doc && state.doc.text === text;
    const body = Object.assign({ text, format: "packed" }, iv, keep ? { layer: state.layer, head: state.head } : {});
    const needBaseline = !isIdentity(iv) && !(state.baseline && state.baseline.text === text);
    const seq = ++state.seq;
    app.dataset.busy = "1";
    $("status").textContent = t("busy");
    const started = performance.now();
    try {
      const [doc, base] = await Promise.all([post(body), needBaseline ? post({ text, format: "packed" }) : null]);
      if (seq !== state.seq) return; // a newer request was sent meanwhile
      if (isIdentity(iv)) state.baseline = doc;
      else if (base) state.baseline = base;
      else if (!keep) state.baseline = null;
      showError(null);
      setDoc(doc, keep);
      $("status").textContent = t("status", doc.tokens.length, Math.round(performance.now() - started));
    } catch (err) {
      if (seq === state.seq) {
        showError(err.message);
        $("status").textContent = "";
      }
    } finally {
      if (seq === state.seq) app.dataset.busy = "0";
    }
  }

  async function post(body) {
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
    return loadDoc(payload);
  }

  function showError(message) {
    const box = $("error");
    box.textContent = message || "";
    box.hidden = !message;
  }

  // ---------------------------------------------------------------------------------------
  // Events and start
  // ---------------------------------------------------------------------------------------

  function bindEvents() {
    $("lang").addEventListener("click", () => {
      state.lang = state.lang === "zh" ? "en" : "zh";
      if (state.doc) renderAll();
      else renderWords();
      if (state.matrix) renderLegend(state.matrix.top);
    });
    $("layer").addEventListener("change", (e) => select({ layer: Number(e.target.value) }));
    $("head").addEventListener("change", (e) => select({ head: Number(e.target.value) }));
    $("query").addEventListener("change", (e) => select({ row: Number(e.target.value) }));
    $("grid").addEventListener("click", (e) => {
      const td = e.target.closest("td[data-layer]");
      if (td) select({ layer: Number(td.dataset.layer), head: Number(td.dataset.head) });
    });
    $("tokens").addEventListener("mouseover", onTokenHover);
    $("tokens").addEventListener("mouseleave", () => {
      state.hover = null;
      paintTokens(state.row);
    });
    $("tokens").addEventListener("click", (e) => {
      const span = e.target.closest(".tok");
      if (span) select({ row: Number(span.dataset.index) });
    });
    $("heatmap").addEventListener("mousemove", onHeatmapMove);
    $("heatmap").addEventListener("mouseleave", () => ($("tip").hidden = true));
    $("heatmap").addEventListener("click", (e) => {
      const c = cellAt(e);
      if (c) select({ row: c.i, focus: c.j });
    });
    $("save").addEventListener("click", savePicture);
    $("steps").addEventListener("click", (e) => {
      const b = e.target.closest("button[data-stage]");
      if (b) select({ stage: Number(b.dataset.stage) });
    });
    $("prev").addEventListener("click", () => select({ stage: Math.max(0, state.stage - 1) }));
    $("next").addEventListener("click", () => select({ stage: Math.min(STAGES.length - 1, state.stage + 1) }));
    $("panel").addEventListener("click", (e) => {
      const cell = e.target.closest("[data-key]");
      if (cell) select({ focus: Number(cell.dataset.key) });
    });
  }

  function start() {
    const data = JSON.parse($("selfattn-data").textContent);
    state.pickRule = data.pick_rule || {};
    bindEvents();
    if (data.mode === "live") setupLive(data);
    renderWords();
    if (data.doc) setDoc(loadDoc(data.doc), false);
    else app.dataset.ready = "1";
    if (data.mode === "live" && data.doc && isIdentity(data.doc.intervention)) state.baseline = state.doc;
    if (data.error) showError(data.error);
  }

  start();
})();
