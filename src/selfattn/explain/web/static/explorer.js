/* selfattn explorer: one page for the HTML report (data inline) and the local web app
 * (`selfattn serve`, data from POST /api/explain). It walks through the tutorial's stages
 *
 *     X → Q/K/V → QKᵀ → ÷√d_k → mask → softmax → ·V → output
 *
 * on the real numbers of a model. Every stage of the selected query row is computed here
 * from q, k, v, lse, scale, softcap and visible with the formulas of
 * selfattn.explain.trace.LayerTrace.stages, so a 6-token and a 1,000-token input share one
 * code path. The weights come from the saved log-sum-exp by one function, `weightOf` (the
 * page's single copy of selfattn.weights.weights_from_lse; a test checks them equal). The L×L weights are drawn once into a canvas ImageData, never as L² elements.
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
  const HIDDEN_RGB = [156, 163, 175]; // mask = 0: a mid grey, never mistaken for a low weight (white)
  const UP_RGB = [220, 38, 38]; // a weight that grew (difference map)
  const VECTOR_TOP = 4; // a long vector is summarised by its norm and this many largest dimensions
  const COMPARE_PX = 200; // side of the baseline / now / difference pictures
  const MINUS = "\u2212"; // the one minus sign of every number shown
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
      interventions: "干预（对照实验：改变计算，和无干预的结果并排比较）",
      only_head: "只改显示的这个 head（这一层的 X 不变）",
      numbering: "编号：层、head 和 token 位置都从 0 起。",
      search: "head 搜索",
      search_hint: "选两个 token：哪个 head 让 Query 最关注 Key？点击结果查看那个 head。",
      find: "搜索",
      search_row: (l, h, w) => `层 ${l} · head ${h}：${w}`,
      base_map: "无干预",
      now_map: "有干预",
      diff_map: "差（有 − 无，红 = 变大，蓝 = 变小）",
      bos: (tok, mine, all) => `注：${tok} 是句首的特殊 token。用不上的注意力常常“停”在这里：这个 head 平均给它 ${mine}，` +
        `所有 head 平均 ${all}。`,
      does: (text) => `这个 head 在做什么：${text}`,
      qk: (n) => `q·k 按维度展开：${n} 个乘积 q[d]·k[d] 加起来就是分数`,
      qk_sum: "和",
      mix: "·V：每个维度的柱子由各个 Key 的 w·V[d] 叠成，加起来就是输出的这一维",
      meaning: "“含义”视图：如果每个 token 的 V 只携带它自己的含义（教程的单位向量），输出就是这些含义按权重混合：",
      meanings: ["数量", "颜色", "角色", "动作", "地点", "首 token", "其他"],
      norm: (n, top) => `长度 ‖·‖ = ${n}；最大的维度：${top}`,
      all_numbers: "全部数字",
      row_delta: "差",
      tok_label: (i, tok) => `位置 ${i}：${tok}`,
      map_label: (i, qi, j, kj, w) => `注意力权重热图。当前格：Query ${i}“${qi}”→ Key ${j}“${kj}”：${w}。用方向键移动，回车选择。`,
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
        "深灰 = mask 为 0（不能看）。点击一格或用方向键选择 Query 和 Key。",
      legend: () => "颜色深浅 ∝ √权重（0 → 100%），所以 61% 和 100% 仍然看得出区别；深灰 = 不能看。",
      save: "保存图片（PNG）",
      heads: "每个 head 的摘要",
      heads_hint: "熵（bit）越小，注意力越集中；“首”是平均落在第一个 token 上的权重。点击选择 head。",
      stages: "逐步计算",
      prev: "上一步",
      next: "下一步",
      prediction: "模型预测的下一个 token",
      footer: "所有数字来自真实模型的一次前向计算，本页按教程的公式逐步重算；本页不发出任何网络请求。",
      decoder: "解码器", encoder: "编码器",
      model: (m, L) => `模型：${m.name}（${TEXT.zh[m.kind] || m.kind}）· ${m.n_layers} 层 × ${m.n_heads} 个 head · d_model = ${m.d_model} · ` +
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
      st_softmax: "softmax", st_weighted: "·V", st_output: "输出", st_scaled_off: "不除以 √d_k",
      ex_x: (i, tok, m) => `位置 ${i} 的 token “${tok}” 进入这一层注意力的输入向量 X[${i}]（LayerNorm 之后），` +
        `${m.d_model} 维。`,
      ex_qkv: (h) => `Q = X·W_Q + b，K = X·W_K + b，V = X·W_V + b（head ${h}）。Query 表示“我想找什么信息”，` +
        "Key 表示“我这里有什么信息可被匹配”，Value 是“别人关注我时我提供的内容”。点击下表的 Key 查看它的 K 和 V。",
      ex_scores: "score[i][j] = Q[i] · K[j]：位置 i 的 Query 和位置 j 的 Key 有多匹配。",
      ex_scaled: (how) => `缩放：scaled = score × ${how}，让分数范围更稳定。`,
      ex_mask_on: "因果 mask：1 表示可以看，0 表示不能看（未来的 token）。不能看的位置改成 -inf，而不是 0。",
      ex_mask_off: "因果 mask 已关闭：每个位置都能看到所有 token，包括未来的。",
      ex_softmax: (lse) => `weights = softmax(masked)：每一行加起来是 100%，-inf 的位置权重正好是 0。` +
        `（分母 log Σ exp(masked) = ${lse}）`,
      ex_weighted: (h) => `按权重加权求和 Value：Σ_j weights[j] · V[j]（head ${h} 的输出）。`,
      ex_output: "所有 head 的结果拼接后乘 W_O，就是注意力层的输出；再加上残差和 MLP，是这一层（block）的输出。",
      scale_on: (D, T) => (T === 1 ? `1/√${D}` : `1/(√${D}·T)，T = ${T}`),
      scale_off: (T) => (T === 1 ? "1（不缩放）" : `1/T，T = ${T}（不除以 √d_k）`),
      row_scores: "QKᵀ", row_scaled: "÷√d_k", row_scaled_off: "×1（不除以 √d_k）", row_visible: "mask 1/0",
      row_masked: "加 mask", row_weights: "权重", row_baseline: "无干预",
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
      interventions: "Interventions (a controlled experiment: change the computation, compare with no intervention)",
      only_head: "only the head shown (this layer's X stays the same)",
      numbering: "Numbering: layers, heads and token positions count from 0.",
      search: "Head search",
      search_hint: "Pick two tokens: which head makes the query attend most to the key? Click a result to show that head.",
      find: "Search",
      search_row: (l, h, w) => `layer ${l} · head ${h}: ${w}`,
      base_map: "no intervention",
      now_map: "with the intervention",
      diff_map: "difference (with − without; red = grew, blue = shrank)",
      bos: (tok, mine, all) => `Note: ${tok} is the special first token. Attention not needed elsewhere often "parks" ` +
        `there: this head gives it ${mine} on average, all heads ${all}.`,
      does: (text) => `What this head does: ${text}`,
      qk: (n) => `q·k dimension by dimension: the ${n} products q[d]·k[d] add up to the score`,
      qk_sum: "sum",
      mix: "·V: each dimension's bar is stacked from every key's w·V[d]; the stack adds up to that output dimension",
      meaning: "The \"meaning\" view: if each token's V carried only its own meaning (the tutorial's unit vectors), " +
        "the output would be these meanings mixed by the weights:",
      meanings: ["quantity", "colour", "creature", "action", "place", "1st token", "other"],
      norm: (n, top) => `length ‖·‖ = ${n}; largest dimensions: ${top}`,
      all_numbers: "all numbers",
      row_delta: "difference",
      tok_label: (i, tok) => `position ${i}: ${tok}`,
      map_label: (i, qi, j, kj, w) => `Attention weights heatmap. Cell: query ${i} "${qi}" → key ${j} "${kj}": ${w}. ` +
        "Arrow keys move, Enter selects.",
      scaling: "÷√d_k scaling",
      causal: "causal mask",
      temperature: "softmax temperature T",
      tokens: "Tokens",
      tokens_hint: "Hover a token to see what it attends to; click it to step through its computation below.",
      layer: "layer",
      head: "head",
      query: "query",
      heatmap: "Attention weights",
      heatmap_hint: "Rows = queries, columns = keys. Darker = larger weight; dark grey = mask 0 (may not look). " +
        "Click a cell, or use the arrow keys, to pick the query and the key.",
      legend: () => "shade ∝ √weight (0 → 100%), so 61% and 100% stay apart; dark grey = may not look.",
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
      model: (m, L) => `model: ${m.name} (${m.kind}) · ${m.n_layers} layers × ${m.n_heads} heads · d_model = ${m.d_model} · ` +
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
      st_softmax: "softmax", st_weighted: "·V", st_output: "output", st_scaled_off: "no ÷√d_k",
      ex_x: (i, tok, m) => `X[${i}]: the input vector of the token at position ${i}, "${tok}", to this layer's attention ` +
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
      row_scores: "QKᵀ", row_scaled: "÷√d_k", row_scaled_off: "×1 (no ÷√d_k)", row_visible: "mask 1/0",
      row_masked: "masked", row_weights: "weights", row_baseline: "no intervention",
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
    want: null, // live mode: the (layer, head) last picked, while its layer is being fetched
    loading: {}, // live mode: layer → the request fetching its arrays
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
    const layers = packed.layers.map((layer) => (layer.omitted ? layer : Object.assign({}, layer, {
      x: unpack(layer.x),
      attn_out: unpack(layer.attn_out),
      output: unpack(layer.output),
      visible: unpack(layer.visible),
      heads: layer.heads.map((head) => Object.assign({}, head, {
        q: unpack(head.q), k: unpack(head.k), v: unpack(head.v), lse: unpack(head.lse),
        visible: head.visible ? unpack(head.visible) : undefined, // only a head an intervention changed apart
      })),
    })));
    return Object.assign({}, packed, { layers });
  }

  // ---------------------------------------------------------------------------------------
  // The tutorial's stages for one query row (LayerTrace.stages, one row at a time)
  // ---------------------------------------------------------------------------------------

  /** weights_ij = exp(masked_ij − lse_i); 0 where hidden (masked −inf) and in a row that sees
   * nothing (lse −inf). The page's one copy of selfattn.weights.weights_from_lse. */
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

  /** A number with DIGITS decimals, one minus sign "−", never "−0.0000". */
  function num(x, digits = DIGITS) {
    if (x === -Infinity) return MINUS + "inf";
    if (x === Infinity) return "inf";
    const text = x.toFixed(digits);
    return Number(text) === 0 ? (0).toFixed(digits) : text.replace("-", MINUS);
  }

  function pct(x) {
    return num(100 * x, PERCENT_DIGITS) + "%";
  }

  /** A weight as a whole percentage, as Python's heads.percent writes it. */
  function wholePct(x) {
    return `${Math.abs(Math.round(100 * x))}%`;
  }

  /** An element with attributes and text (text via textContent: never parsed). */
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  /** Weight → colour on one fixed scale: white = 0, the darkest blue = 100%, the shade ∝ √(w / top),
   * so small weights of a long input stay visible and 61% and 100% stay apart. */
  function shade(w, top = 1) {
    const s = Math.sqrt(Math.max(0, Math.min(1, w / top)));
    return LOW_RGB.map((lo, c) => Math.round(lo + (HIGH_RGB[c] - lo) * s));
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
    state.want = null;
    if (!keepSelection || state.layer >= doc.layers.length || state.head >= doc.model.n_heads) {
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
    renderSearchChoices();
  }

  /** Everything that depends on (layer, head, row, stage). */
  function renderSelection() {
    const doc = state.doc;
    if (!doc) return;
    if (!state.matrix || state.matrix.key !== `${state.layer}/${state.head}`) {
      const weights = weightMatrix(doc, state.layer, state.head);
      const top = 1; // one fixed scale: 0 → 100%, shaded by √weight
      state.matrix = { key: `${state.layer}/${state.head}`, weights, top, picture: picture(doc, weights, top) };
      renderLegend(top);
    }
    $("layer").value = String(state.layer);
    $("head").value = String(state.head);
    $("query").value = String(state.row);
    renderRule();
    renderHeadText();
    renderGrid();
    paintTokens(state.hover === null ? state.row : state.hover);
    drawHeatmap();
    renderCompare();
    renderStepper();
    Object.assign(app.dataset, {
      layer: state.layer, head: state.head, row: state.row, stage: STAGES[state.stage], lang: state.lang,
    });
    app.dataset.ready = "1";
  }

  /** The shown head in words (Python's heads.describe), the experiment's sentence, the first-token note. */
  function renderHeadText() {
    const doc = state.doc;
    const d = doc.descriptions ? doc.descriptions[state.layer][state.head] : null;
    $("head-description").textContent = d ? t("does", d.text[state.lang]) : "";
    const e = doc.experiment;
    const shown = !!e && e.layer === state.layer && e.head === state.head;
    $("experiment").textContent = shown ? e.text[state.lang] : "";
    $("experiment").hidden = !shown;
    const ft = doc.first_token;
    const s = doc.summaries[state.layer][state.head];
    $("bos-note").textContent = ft && s.rows ? t("bos", ft.token, wholePct(s.first_token), wholePct(ft.mean)) : "";
  }

  /** Live mode with an intervention: the baseline, the head now and their difference, side by side on
   * one fixed scale (weights 0 → 100%, differences −100 → +100 points). */
  function renderCompare() {
    const base = comparable();
    $("compare").hidden = !base;
    if (!base || base.layers[state.layer].omitted) return;
    const L = state.doc.tokens.length;
    const before = weightMatrix(base, state.layer, state.head);
    const now = state.matrix.weights;
    const delta = new Float32Array(L * L);
    for (let p = 0; p < L * L; p++) delta[p] = now[p] - before[p];
    state.delta = delta;
    const diverging = (d) => {
      const s = Math.sqrt(Math.min(1, Math.abs(d)));
      const far = d >= 0 ? UP_RGB : HIGH_RGB;
      return LOW_RGB.map((lo, c) => Math.round(lo + (far[c] - lo) * s));
    };
    paintSmall($("basemap"), picture(base, before, 1));
    paintSmall($("nowmap"), state.matrix.picture);
    paintSmall($("diffmap"), picture(state.doc, delta, 1, diverging));
  }

  function paintSmall(canvas, source) {
    const dpr = window.devicePixelRatio || 1;
    canvas.width = canvas.height = Math.round(COMPARE_PX * dpr);
    canvas.style.width = canvas.style.height = `${COMPARE_PX}px`;
    const ctx = canvas.getContext("2d");
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(source, 0, 0, canvas.width, canvas.height);
  }

  /** The baseline document to compare with, or null. */
  function comparable() {
    const base = state.baseline;
    if (!base || base === state.doc || isIdentity(state.doc.intervention) || !sameTokens(base, state.doc)) return null;
    return base;
  }

  function renderWords() {
    document.documentElement.lang = state.lang === "zh" ? "zh-CN" : "en";
    for (const e of document.querySelectorAll("[data-i18n]")) e.textContent = t(e.dataset.i18n);
    $("lang").textContent = t("lang");
    if (state.limits) $("limits").textContent = t("limits", state.limits.max_chars, state.limits.max_tokens);
  }

  function renderModel() {
    const m = state.doc.model;
    const positions = state.lang === "zh" && m.positions_zh ? m.positions_zh : m.positions;
    $("model-info").textContent = t("model", m, state.doc.tokens.length) +
      (m.architecture ? ` · ${m.architecture} · ${positions}` : "");
    const unknown = state.doc.unknown || { count: 0, hint: { en: "", zh: "" } };
    $("unknown").textContent = unknown.count ? t("unknown", unknown.count, state.doc.tokens.length, unknown.hint[state.lang]) : "";
    $("unknown").hidden = !unknown.count;
    const iv = state.doc.intervention;
    const parts = [];
    if (!iv.scaling) parts.push(t("iv_scaling"));
    if (!iv.causal) parts.push(t("iv_causal"));
    if (iv.temperature !== 1) parts.push(t("iv_temperature", iv.temperature));
    if (parts.length && iv.layer !== undefined) parts.push(iv.head !== undefined ? `${t("layer")} ${iv.layer} · head ${iv.head}` : `${t("layer")} ${iv.layer}`);
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
      const span = el("span", { class: "tok", "data-testid": "token", "data-index": i, tabindex: 0, role: "button",
        "aria-label": t("tok_label", i, tok) }, tok);
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
    fill($("head"), doc.summaries[0].map((_, h) => String(h)));
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
    doc.summaries[0].forEach((_, h) => head.append(el("th", {}, `${t("head")} ${h}`)));
    const rows = doc.summaries.map((heads, l) => {
      const tr = el("tr");
      tr.append(el("th", {}, `${t("layer")} ${l}`));
      heads.forEach((s, h) => {
        const td = el("td", { "data-testid": "head-cell", "data-layer": l, "data-head": h, tabindex: 0 });
        td.append(el("b", {}, `${s.entropy.toFixed(2)} ${t("entropy")}`), el("span", {}, `${t("first")} ${pct(s.first_token)}`));
        const d = doc.descriptions ? doc.descriptions[l][h] : null;
        if (d) td.append(el("span", { class: "describe", "data-testid": "head-cell-description" }, d.text[state.lang]));
        td.setAttribute("aria-label", `${t("layer")} ${l} · ${t("head")} ${h}${d ? "：" + d.text[state.lang] : ""}`);
        td.classList.toggle("current", l === state.layer && h === state.head);
        td.style.backgroundColor = rgb(shade(s.max_weight * 0.3));
        tr.append(td);
      });
      return tr;
    });
    table.replaceChildren(head, ...rows);
  }

  // --- the heatmap: L×L pixels drawn once into an ImageData, then scaled onto the canvas ---

  function picture(doc, weights, top, colour = shade) {
    const L = doc.tokens.length;
    const visible = headRule(doc.layers[state.layer], state.head).visible;
    const canvas = document.createElement("canvas");
    canvas.width = canvas.height = L;
    const ctx = canvas.getContext("2d");
    const img = ctx.createImageData(L, L);
    for (let i = 0; i < L; i++) {
      for (let j = 0; j < L; j++) {
        const c = bit(visible, i, j) ? colour(weights[i * L + j], top) : HIDDEN_RGB;
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
    $("legend-mid").textContent = `${pct(top / 4)} (√ = 50%)`;
    $("legend-high").textContent = pct(top);
    $("legend-note").textContent = t("legend");
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
    if (L <= LABELLED_HEATMAP) drawHidden(ctx, margin, cell, L);
    ctx.strokeStyle = "#f97316"; // the selected query row
    ctx.lineWidth = 2;
    ctx.strokeRect(margin - 1, margin + state.row * cell - 1, size + 2, Math.max(cell, 1) + 2);
    if (state.focus !== null) { // the key whose K and V are shown
      ctx.strokeStyle = "#111827";
      ctx.strokeRect(margin + state.focus * cell, margin + state.row * cell, Math.max(cell, 2), Math.max(cell, 2));
    }
    const w = state.matrix.weights[state.row * L + (state.focus === null ? state.row : state.focus)];
    const j = state.focus === null ? state.row : state.focus;
    canvas.setAttribute("aria-label", t("map_label", state.row, state.doc.tokens[state.row], j, state.doc.tokens[j], pct(w)));
  }

  /** A hatch over every hidden cell (mask 0) of a short input: not a colour that could be read as a weight. */
  function drawHidden(ctx, margin, cell, L) {
    const visible = headRule(state.doc.layers[state.layer], state.head).visible;
    ctx.strokeStyle = "rgba(255, 255, 255, 0.7)";
    ctx.lineWidth = 1;
    for (let i = 0; i < L; i++) {
      for (let j = 0; j < L; j++) {
        if (bit(visible, i, j)) continue;
        const x = margin + j * cell, y = margin + i * cell;
        ctx.beginPath();
        ctx.moveTo(x + 2, y + cell - 2);
        ctx.lineTo(x + cell - 2, y + 2);
        ctx.stroke();
      }
    }
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
    const visible = bit(headRule(doc.layers[state.layer], state.head).visible, c.i, c.j);
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
    const scaling = state.doc.intervention.scaling;
    nav.replaceChildren(...STAGES.map((name, s) => {
      const label = name === "scaled" && !scaling ? t("st_scaled_off") : t(`st_${name}`);
      const b = el("button", { type: "button", "data-testid": `stage-btn-${name}`, "data-stage": s }, label);
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
    const title = name === "scaled" && !doc.intervention.scaling ? t("st_scaled_off") : t(`st_${name}`);
    panel.replaceChildren(el("h3", {}, t("step", state.stage + 1, STAGES.length, title)));
    panel.append(el("p", { class: "explain", "data-testid": "stage-explain" }, explanation(name, st)));
    const layer = doc.layers[l];
    const head = layer.heads[h];
    if (name === "x") panel.append(vector("x", t("vec_x") + `[${i}]`, row(layer.x, i)));
    if (name === "scores") panel.append(qkProducts(row(head.q, i), row(head.k, state.focus), st.scores[state.focus]));
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
    if (name === "weighted") {
      panel.append(vector("weighted", `${t("vec_weighted")}[${i}]`, st.weighted), mixBars(head, st), meaningBars(st));
    }
    if (name === "output") {
      panel.append(vector("attn_out", `${t("vec_attn_out")}[${i}]`, row(layer.attn_out, i)),
        vector("output", `${t("vec_output")}[${i}]`, row(layer.output, i)));
    }
    for (const j of [i, state.focus]) { // keep the query's own column and the focused key in view
      const cell = panel.querySelector(`.keys th[data-key="${j}"]`);
      const wrap = cell ? cell.closest(".scroll") : null;
      if (wrap && (cell.offsetLeft < wrap.scrollLeft || cell.offsetLeft + cell.offsetWidth > wrap.scrollLeft + wrap.clientWidth)) {
        wrap.scrollLeft = cell.offsetLeft - wrap.clientWidth / 2;
      }
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

  /** A labelled vector: its length and largest dimensions, every number one click away (each carries
   * its dimension in data-dim). */
  function vector(name, label, values) {
    const box = el("div", { class: "vec", "data-testid": `vec-${name}` });
    box.append(el("div", { class: "label" }, `${label} (${values.length})`));
    const order = Array.from(values.keys()).sort((a, b) => Math.abs(values[b]) - Math.abs(values[a]));
    const top = order.slice(0, VECTOR_TOP).map((d) => `d${d} = ${num(values[d])}`).join(" · ");
    box.append(el("div", { class: "summary", "data-testid": `vec-${name}-summary` }, t("norm", num(Math.hypot(...values)), top)));
    const details = el("details", {});
    details.append(el("summary", {}, t("all_numbers")));
    const nums = el("div", { class: "nums" });
    values.forEach((v, d) => nums.append(el("span", { "data-dim": d }, num(v))));
    details.append(nums);
    box.append(details);
    return box;
  }

  /** q·k as D products q[d]·k[d] (one cell each, data-value exact) and their sum, the score. */
  function qkProducts(q, k, score) {
    const box = el("div", { class: "qk", "data-testid": "qk-products" });
    box.append(el("div", { class: "label" }, t("qk", q.length)));
    const table = el("table", { class: "keys" });
    const head = el("tr"), prod = el("tr");
    head.append(el("th", {}, "d"));
    prod.append(el("th", {}, "q·k"));
    let sum = 0;
    for (let d = 0; d < q.length; d++) {
      const p = q[d] * k[d];
      sum += p;
      head.append(el("th", {}, d));
      const td = el("td", { "data-dim": d, "data-value": p }, num(p, 2));
      td.style.backgroundColor = p >= 0 ? `rgba(29, 78, 216, ${Math.min(0.5, Math.abs(p) / 4)})`
        : `rgba(220, 38, 38, ${Math.min(0.5, Math.abs(p) / 4)})`;
      prod.append(td);
    }
    head.append(el("th", {}, t("qk_sum")));
    prod.append(el("td", { "data-testid": "qk-sum", "data-value": sum }, `${num(sum)} = ${num(score)}`));
    table.append(head, prod);
    const wrap = el("div", { class: "scroll" });
    wrap.append(table);
    box.append(wrap);
    return box;
  }

  /** ·V as stacked bars: for each dimension d, one segment w_j·V_j[d] per key j (positive to the right
   * of the axis, negative to the left); the segments of a bar add up to the output's dimension d. */
  function mixBars(head, st) {
    const box = el("div", { class: "mix", "data-testid": "mix-bars" });
    box.append(el("div", { class: "label" }, t("mix")));
    const L = st.weights.length, dv = st.weighted.length;
    const keys = Array.from(st.weights.keys()).filter((j) => st.weights[j] > 0);
    let scale = 1e-9;
    for (let d = 0; d < dv; d++) {
      let pos = 0, neg = 0;
      for (const j of keys) {
        const c = st.weights[j] * row(head.v, j)[d];
        if (c > 0) pos += c; else neg -= c;
      }
      scale = Math.max(scale, pos, neg);
    }
    const palette = ["#1d4ed8", "#f97316", "#059669", "#a21caf", "#dc2626", "#0891b2", "#ca8a04", "#4b5563"];
    for (let d = 0; d < dv; d++) {
      const bar = el("div", { class: "mixrow", "data-testid": "mix-row", "data-dim": d, "data-value": st.weighted[d] });
      bar.append(el("span", { class: "dim" }, `d${d}`));
      const track = el("span", { class: "track" });
      let left = 50, right = 50;
      for (const j of keys) {
        const c = st.weights[j] * row(head.v, j)[d];
        const width = (50 * Math.abs(c)) / scale;
        const seg = el("span", { class: "seg", "data-key": j, "data-value": c, title: `${state.doc.tokens[j]}: ${num(c)}` });
        seg.style.width = `${width}%`;
        seg.style.left = `${c >= 0 ? right : left - width}%`;
        seg.style.backgroundColor = palette[j % palette.length];
        if (c >= 0) right += width; else left -= width;
        track.append(seg);
      }
      bar.append(track, el("span", { class: "val" }, num(st.weighted[d])));
      box.append(bar);
    }
    const legend = el("div", { class: "mixlegend" });
    for (const j of keys.slice(0, 24)) {
      const item = el("span", {}, `${state.doc.tokens[j]} ${pct(st.weights[j])}`);
      item.style.borderLeft = `10px solid ${palette[j % palette.length]}`;
      legend.append(item);
    }
    box.append(legend);
    if (L > keys.length) box.dataset.hiddenKeys = String(L - keys.length);
    return box;
  }

  /** The walkthrough's one-hot-V "meaning" table on these tokens: the weights summed per meaning (the
   * roles of selfattn.explain.relations), as one stacked bar. */
  function meaningBars(st) {
    const roles = state.doc.roles || [];
    const order = ["qm", "colour", "noun", "verb", "place"];
    const sums = new Array(order.length + 2).fill(0);
    st.weights.forEach((w, j) => {
      const k = order.indexOf(roles[j]);
      sums[k >= 0 ? k : j === 0 ? order.length : order.length + 1] += w;
    });
    const box = el("div", { class: "meaning", "data-testid": "meaning" });
    box.append(el("div", { class: "label" }, t("meaning")));
    const bar = el("div", { class: "stack" });
    const colours = ["#1d4ed8", "#f97316", "#059669", "#a21caf", "#dc2626", "#9ca3af", "#d1d5db"];
    t("meanings").forEach((name, k) => {
      if (sums[k] <= 0) return;
      const seg = el("span", { "data-testid": "meaning-seg", "data-value": sums[k] }, `${name} ${wholePct(sums[k])}`);
      seg.style.width = `${100 * sums[k]}%`;
      seg.style.backgroundColor = colours[k];
      bar.append(seg);
    });
    box.append(bar);
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
    const scaling = state.doc.intervention.scaling;
    for (const { name, from } of KEY_ROWS) {
      if (state.stage < STAGES.indexOf(from)) continue;
      const label = name === "scaled" && !scaling ? t("row_scaled_off") : t(`row_${name}`);
      table.append(keyRow(name, label, keys, st[name], name === "weights"));
    }
    const base = baselineRow();
    if (base && state.stage >= STAGES.indexOf("softmax")) {
      table.append(keyRow("baseline", t("row_baseline"), keys, base, true));
      table.append(keyRow("delta", t("row_delta"), keys, st.weights.map((w, j) => w - base[j]), false));
    }
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
      const text = name === "visible" ? String(v) : percent ? pct(v) : name === "delta" ? `${pct(v)}` : num(v);
      const td = el("td", { "data-key": j, "data-value": v }, text);
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
    const base = comparable();
    if (!base || base.layers[state.layer].omitted) return null;
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
    $("only-head").addEventListener("change", () => request());
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
    const iv = {
      scaling: $("scaling").checked,
      causal: $("causal").checked,
      temperature: Number($("temperature").value),
    };
    if ($("only-head").checked && state.doc) Object.assign(iv, { only_layer: state.layer, only_head: state.head });
    return iv;
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
    const needBaseline = !isIdentity(iv) && !(state.baseline && state.baseline.text === text &&
      !state.baseline.layers[keep ? state.layer : 0].omitted);
    const seq = ++state.seq;
    app.dataset.busy = "1";
    $("status").textContent = t("busy");
    const started = performance.now();
    try {
      const baseBody = Object.assign({ text, format: "packed" }, keep ? { layer: state.layer, head: state.head } : {});
      const [doc, base] = await Promise.all([post(body), needBaseline ? post(baseBody) : null]);
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
    $("layer").addEventListener("change", (e) => pickHead(Number(e.target.value), state.head));
    $("head").addEventListener("change", (e) => pickHead((state.want || state).layer, Number(e.target.value)));
    $("query").addEventListener("change", (e) => select({ row: Number(e.target.value) }));
    $("grid").addEventListener("click", (e) => {
      const td = e.target.closest("td[data-layer]");
      if (td) pickHead(Number(td.dataset.layer), Number(td.dataset.head));
    });
    $("grid").addEventListener("keydown", (e) => {
      const td = e.target.closest("td[data-layer]");
      if (td && (e.key === "Enter" || e.key === " ")) {
        e.preventDefault();
        pickHead(Number(td.dataset.layer), Number(td.dataset.head));
      }
    });
    $("tokens").addEventListener("keydown", (e) => {
      const span = e.target.closest(".tok");
      if (!span) return;
      const i = Number(span.dataset.index);
      const L = state.doc.tokens.length;
      const next = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: L - 1 }[e.key];
      if (e.key === "Enter" || e.key === " ") {
        e.preventDefault();
        select({ row: i });
      } else if (next !== undefined) {
        e.preventDefault();
        $("tokens").children[Math.max(0, Math.min(L - 1, next))].focus();
      }
    });
    $("tokens").addEventListener("focusin", onTokenHover);
    $("heatmap").addEventListener("keydown", onHeatmapKey);
    $("find").addEventListener("click", () => findHeads());
    $("search-results").addEventListener("click", (e) => {
      const b = e.target.closest("button[data-layer]");
      if (b) pickHead(Number(b.dataset.layer), Number(b.dataset.head));
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

  /** Arrow keys move the (query, key) cell; Enter / space show that query's stages. */
  function onHeatmapKey(e) {
    const L = state.doc.tokens.length;
    const j = state.focus === null ? state.row : state.focus;
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (moves[e.key]) {
      e.preventDefault();
      const [di, dj] = moves[e.key];
      select({ row: Math.max(0, Math.min(L - 1, state.row + di)), focus: Math.max(0, Math.min(L - 1, j + dj)) });
      $("heatmap").focus();
    } else if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      $("stepper").scrollIntoView({ block: "start" });
    }
  }

  /** Show head (l, h); in live mode a layer the answer left out is asked for first (once, however
   * often it is picked meanwhile), and only the latest pick is shown when it arrives. */
  async function pickHead(l, h) {
    state.want = { layer: l, head: h };
    if (state.doc.layers[l].omitted) {
      const doc = state.doc;
      if (!state.loading[l]) state.loading[l] = fetchLayer(l).finally(() => delete state.loading[l]);
      try {
        await state.loading[l];
      } catch (err) {
        showError(err.message);
        app.dataset.ready = "1";
        return;
      }
      if (state.doc !== doc) return; // a new answer replaced the page meanwhile (and drew itself)
    }
    if (state.want && state.want.layer === l && state.want.head === h) select({ layer: l, head: h });
    else if (!Object.keys(state.loading).length) app.dataset.ready = "1";
  }

  /** Live mode: the arrays of layer l (for the shown text and intervention, and for the baseline). */
  async function fetchLayer(l) {
    app.dataset.busy = "1";
    app.dataset.ready = "0";
    try {
      const doc = state.doc;
      const body = Object.assign({ text: doc.text, format: "packed", layers: [l] }, requestIntervention(doc.intervention));
      const asks = [post(body)];
      const base = comparable();
      if (base && base.layers[l].omitted) asks.push(post({ text: doc.text, format: "packed", layers: [l] }));
      const [got, gotBase] = await Promise.all(asks);
      doc.layers[l] = got.layers[l];
      if (gotBase) base.layers[l] = gotBase.layers[l];
    } finally {
      app.dataset.busy = "0";
    }
  }

  function requestIntervention(iv) {
    const out = { scaling: iv.scaling, causal: iv.causal, temperature: iv.temperature };
    if (iv.layer !== undefined) out.only_layer = iv.layer;
    if (iv.head !== undefined) out.only_head = iv.head;
    return out;
  }

  // --- head search: every head ranked by the weight from one token to another ---

  function renderSearchChoices() {
    const tokens = state.doc.tokens;
    const labels = tokens.map((tok, i) => `${i} · ${tok}`);
    fill($("find-query"), labels);
    fill($("find-key"), labels);
    $("find-query").value = String(state.row);
    $("find-key").value = String(argmax(stageRow(state.doc, state.layer, state.head, state.row).weights));
    $("search-results").replaceChildren();
  }

  /** The ranking: computed here from q, k, lse when every layer is loaded (the report), else by the
   * server (heads.search), so both give Python's numbers. */
  async function findHeads() {
    const doc = state.doc;
    const i = Number($("find-query").value), j = Number($("find-key").value);
    let ranked;
    if (doc.layers.every((layer) => !layer.omitted)) {
      ranked = [];
      doc.layers.forEach((layer, l) => layer.heads.forEach((_, h) => {
        ranked.push({ layer: l, head: h, weight: stageRow(doc, l, h, i).weights[j] });
      }));
      ranked.sort((a, b) => b.weight - a.weight || a.layer - b.layer || a.head - b.head);
    } else {
      app.dataset.busy = "1";
      try {
        const body = Object.assign({ text: doc.text, format: "packed", layers: [state.layer], find: [i, j] },
          requestIntervention(doc.intervention));
        ranked = (await post(body)).search.heads;
      } catch (err) {
        showError(err.message);
        return;
      } finally {
        app.dataset.busy = "0";
      }
    }
    $("search-results").replaceChildren(...ranked.map((r) => {
      const li = el("li", { "data-testid": "search-row", "data-layer": r.layer, "data-head": r.head, "data-weight": r.weight });
      li.append(el("button", { type: "button", "data-layer": r.layer, "data-head": r.head },
        t("search_row", r.layer, r.head, pct(r.weight))));
      return li;
    }));
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
