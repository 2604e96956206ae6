"""Every sentence and label of the explainer's views, in Chinese and English, written once.

    text("search_row", "en", layer=0, head=1, weight="42.00%")   -> "layer 0 · head 1: 42.00%"

`TEXTS[key] = {"zh": …, "en": …}`; a `{name}` in a text is a placeholder, filled by `str.format` here
and by the page's one `fill()` (`web/static/text.js`: the same `{name}` rule, nothing else). The HTML
page receives the keys its JavaScript and template name (`report.page_texts`), so the JS holds no
sentence of its own.
"""

from __future__ import annotations

__all__ = ["TEXTS", "LANGS", "text"]

LANGS = ("zh", "en")

TEXTS: dict[str, dict[str, str]] = {
    # page
    "page_title": {"zh": "Self-Attention 是什么", "en": "What is Self-Attention"},
    "noscript": {
        "zh": "本页需要 JavaScript 才能画出模型的注意力（不使用任何网络连接）。",
        "en": "This page needs JavaScript to draw the attention of the model (no network access is used).",
    },
    "title": {"zh": "Self-Attention 是什么 · 注意力浏览器", "en": "What is Self-Attention · attention explorer"},
    "lang": {"zh": "English", "en": "中文"},
    "input": {
        "zh": "输入一句话（中文会用 jieba 分词）",
        "en": "Type a sentence (Chinese is cut into words with jieba)",
    },
    "submit": {"zh": "解释", "en": "Explain"},
    "interventions": {
        "zh": "干预（对照实验：改变计算，和无干预的结果并排比较）",
        "en": "Interventions (a controlled experiment: change the computation, compare with no intervention)",
    },
    "only_head": {
        "zh": "只改显示的这个 head（这一层的 X 不变）",
        "en": "only the head shown (this layer's X stays the same)",
    },
    "numbering": {
        "zh": "编号：层、head 和 token 位置都从 0 起。",
        "en": "Numbering: layers, heads and token positions count from 0.",
    },
    "search": {"zh": "head 搜索", "en": "Head search"},
    "search_hint": {
        "zh": "选两个 token：哪个 head 让 Query 最关注 Key？点击结果查看那个 head。",
        "en": "Pick two tokens: which head makes the query attend most to the key? Click a result to show that head.",
    },
    "find": {"zh": "搜索", "en": "Search"},
    "search_row": {"zh": "层 {layer} · head {head}：{weight}", "en": "layer {layer} · head {head}: {weight}"},
    "base_map": {"zh": "无干预", "en": "no intervention"},
    "now_map": {"zh": "有干预", "en": "with the intervention"},
    "diff_map": {
        "zh": "差（有 − 无，红 = 变大，蓝 = 变小）",
        "en": "difference (with − without; red = grew, blue = shrank)",
    },
    "bos": {
        "zh": "注：{token} 是句首的特殊 token。用不上的注意力常常“停”在这里："
        "这个 head 平均给它 {mine}，所有 head 平均 {all}。",
        "en": 'Note: {token} is the special first token. Attention not needed elsewhere often "parks" there: '
        "this head gives it {mine} on average, all heads {all}.",
    },
    "does": {"zh": "这个 head 在做什么：{text}", "en": "What this head does: {text}"},
    "qk": {
        "zh": "q·k 按维度展开：{n} 个乘积 q[d]·k[d] 加起来就是分数",
        "en": "q·k dimension by dimension: the {n} products q[d]·k[d] add up to the score",
    },
    "qk_sum": {"zh": "和", "en": "sum"},
    "mix": {
        "zh": "·V：每个维度的柱子由各个 Key 的 w·V[d] 叠成，加起来就是输出的这一维",
        "en": "·V: each dimension's bar is stacked from every key's w·V[d]; the stack adds up to that output dimension",
    },
    "meaning": {
        "zh": "“含义”视图：如果每个 token 的 V 只携带它自己的含义（教程的单位向量），输出就是这些含义按权重混合：",
        "en": "The \"meaning\" view: if each token's V carried only its own meaning (the tutorial's unit vectors), "
        "the output would be these meanings mixed by the weights:",
    },
    "meaning_qm": {"zh": "数量", "en": "quantity"},
    "meaning_colour": {"zh": "颜色", "en": "colour"},
    "meaning_noun": {"zh": "角色", "en": "creature"},
    "meaning_verb": {"zh": "动作", "en": "action"},
    "meaning_place": {"zh": "地点", "en": "place"},
    "meaning_first": {"zh": "首 token", "en": "1st token"},
    "meaning_other": {"zh": "其他", "en": "other"},
    "norm": {"zh": "长度 ‖·‖ = {norm}；最大的维度：{top}", "en": "length ‖·‖ = {norm}; largest dimensions: {top}"},
    "all_numbers": {"zh": "全部数字", "en": "all numbers"},
    "row_delta": {"zh": "差", "en": "difference"},
    "tok_label": {"zh": "位置 {i}：{token}", "en": "position {i}: {token}"},
    "map_label": {
        "zh": "注意力权重热图。当前格：Query {i}“{query}”→ Key {j}“{key}”：{weight}。用方向键移动，回车选择。",
        "en": 'Attention weights heatmap. Cell: query {i} "{query}" → key {j} "{key}": {weight}. '
        "Arrow keys move, Enter selects.",
    },
    "tokens": {"zh": "分词结果", "en": "Tokens"},
    "tokens_hint": {
        "zh": "把鼠标移到一个 token 上，看它关注哪些 token；点击它，在下面逐步查看它的计算。",
        "en": "Hover a token to see what it attends to; click it to step through its computation below.",
    },
    "layer": {"zh": "层", "en": "layer"},
    "head": {"zh": "head", "en": "head"},
    "query": {"zh": "Query", "en": "query"},
    "key": {"zh": "Key", "en": "key"},
    "layer_n": {"zh": "层 {layer}", "en": "layer {layer}"},
    "head_n": {"zh": "head {head}", "en": "head {head}"},
    "heatmap": {"zh": "注意力权重", "en": "Attention weights"},
    "heatmap_hint": {
        "zh": "行 = Query（当前位置），列 = Key（被参考的位置）。颜色越深权重越大，深灰 = mask 为 0（不能看）。"
        "点击一格或用方向键选择 Query 和 Key。",
        "en": "Rows = queries, columns = keys. Darker = larger weight; dark grey = mask 0 (may not look). "
        "Click a cell, or use the arrow keys, to pick the query and the key.",
    },
    "tip": {
        "zh": "Query {i} “{query}” → Key {j} “{key}”: {value}",
        "en": "query {i} “{query}” → key {j} “{key}”: {value}",
    },
    "tip_hidden": {"zh": "mask = 0（不能看）", "en": "mask = 0 (may not look)"},
    "legend": {
        "zh": "颜色深浅 ∝ √权重（0 → 100%），所以 61% 和 100% 仍然看得出区别；深灰 = 不能看。",
        "en": "shade ∝ √weight (0 → 100%), so 61% and 100% stay apart; dark grey = may not look.",
    },
    "legend_mid": {"zh": "{weight} (√ = 50%)", "en": "{weight} (√ = 50%)"},
    "save": {"zh": "保存图片（PNG）", "en": "Save picture (PNG)"},
    "heads": {"zh": "每个 head 的摘要", "en": "Every head at a glance"},
    "heads_hint": {
        "zh": "熵（bit）越小，注意力越集中；“首”是平均落在第一个 token 上的权重。点击选择 head。",
        "en": 'Lower entropy (bits) = more concentrated attention; "1st" = mean weight on the first token. '
        "Click to pick a head.",
    },
    "cell_entropy": {"zh": "{bits} bit", "en": "{bits} bit"},
    "cell_first": {"zh": "首 {weight}", "en": "1st {weight}"},
    "cell_label": {"zh": "层 {layer} · head {head}", "en": "layer {layer} · head {head}"},
    "cell_label_text": {"zh": "层 {layer} · head {head}：{text}", "en": "layer {layer} · head {head}: {text}"},
    "stages": {"zh": "逐步计算", "en": "Step by step"},
    "prev": {"zh": "上一步", "en": "Previous"},
    "next": {"zh": "下一步", "en": "Next"},
    "prediction": {"zh": "模型预测的下一个 token", "en": "The model's next-token prediction"},
    "footer": {
        "zh": "所有数字来自真实模型的一次前向计算，本页按教程的公式逐步展示；本页不发出任何网络请求。",
        "en": "Every number comes from one forward pass of a real model, shown here step by step with the "
        "tutorial's formulas; this page makes no network request.",
    },
    "decoder": {"zh": "解码器", "en": "decoder"},
    "encoder": {"zh": "编码器", "en": "encoder"},
    "model": {
        "zh": "模型：{name}（{kind}）· {n_layers} 层 × {n_heads} 个 head · d_model = {d_model} · d_k = {head_dim} · "
        "{n_tokens} 个 token",
        "en": "model: {name} ({kind}) · {n_layers} layers × {n_heads} heads · d_model = {d_model} · d_k = {head_dim} · "
        "{n_tokens} tokens",
    },
    "model_architecture": {"zh": " · {architecture} · {positions}", "en": " · {architecture} · {positions}"},
    "limits": {"zh": "最多 {chars} 个字符、{tokens} 个 token", "en": "at most {chars} characters and {tokens} tokens"},
    "status": {"zh": "{n_tokens} 个 token · 用时 {ms} ms", "en": "{n_tokens} tokens · {ms} ms"},
    "busy": {"zh": "计算中…", "en": "computing…"},
    "no_intervention": {"zh": "干预：无", "en": "no intervention"},
    "intervention": {"zh": "干预：{parts}", "en": "intervention: {parts}"},
    "list_sep": {"zh": "，", "en": ", "},
    "scope_layer": {"zh": "层 {layer}", "en": "layer {layer}"},
    "scope_head": {"zh": "层 {layer} · head {head}", "en": "layer {layer} · head {head}"},
    "rule_layer": {
        "zh": "在这一层里自动选择注意力最集中的 head",
        "en": "the most concentrated head of this layer, picked automatically",
    },
    "rule_head": {
        "zh": "为这个 head 自动选择熵最低的层",
        "en": "the layer where this head has the lowest entropy, picked automatically",
    },
    "rule_user": {"zh": "你选择的 head", "en": "the head you picked"},
    "attends": {"zh": "“{token}” 关注：{list}", "en": '"{token}" attends to: {list}'},
    "step": {"zh": "第 {n} / {total} 步：{name}", "en": "step {n} / {total}: {name}"},
    "st_x": {"zh": "X", "en": "X"},
    "st_qkv": {"zh": "Q / K / V", "en": "Q / K / V"},
    "st_scores": {"zh": "QKᵀ", "en": "QKᵀ"},
    "st_mask": {"zh": "mask", "en": "mask"},
    "st_softmax": {"zh": "softmax", "en": "softmax"},
    "st_weighted": {"zh": "·V", "en": "·V"},
    "st_output": {"zh": "输出", "en": "output"},
    "ex_x": {
        "zh": "位置 {i} 的 token “{token}” 进入这一层注意力的输入向量 X[{i}]（LayerNorm 之后），{d_model} 维。",
        "en": 'X[{i}]: the input vector of the token at position {i}, "{token}", to this layer\'s attention '
        "(after LayerNorm), {d_model} numbers.",
    },
    "ex_qkv": {
        "zh": "Q = X·W_Q + b，K = X·W_K + b，V = X·W_V + b（head {head}）。Query 表示“我想找什么信息”，"
        "Key 表示“我这里有什么信息可被匹配”，Value 是“别人关注我时我提供的内容”。点击下表的 Key 查看它的 K 和 V。",
        "en": 'Q = X·W_Q + b, K = X·W_K + b, V = X·W_V + b (head {head}). The query asks "what am I '
        'looking for", the key says "what I can be matched on", the value is what I give when attended to. '
        "Click a key in the table to see its K and V.",
    },
    "ex_scores": {
        "zh": "score[i][j] = Q[i] · K[j]：位置 i 的 Query 和位置 j 的 Key 有多匹配。",
        "en": "score[i][j] = Q[i] · K[j]: how well the query of position i matches the key of position j.",
    },
    "ex_scaled": {
        "zh": "缩放：scaled = score × {scale} (= {how})，让分数范围更稳定。",
        "en": "Scaling: scaled = score × {scale} (= {how}), which keeps the range stable.",
    },
    "ex_mask_on": {
        "zh": "因果 mask：1 表示可以看，0 表示不能看（未来的 token）。不能看的位置改成 -inf，而不是 0。",
        "en": "Causal mask: 1 = may look, 0 = may not (a future token). Hidden positions become -inf, not 0.",
    },
    "ex_mask_off": {
        "zh": "因果 mask 已关闭：每个位置都能看到所有 token，包括未来的。",
        "en": "The causal mask is off: every position sees every token, the future included.",
    },
    "ex_softmax": {
        "zh": "weights = softmax(masked)：每一行加起来是 100%，-inf 的位置权重正好是 0。"
        "（分母 log Σ exp(masked) = {lse}）",
        "en": "weights = softmax(masked): each row sums to 100%, and -inf gets exactly 0. "
        "(denominator log Σ exp(masked) = {lse})",
    },
    "ex_weighted": {
        "zh": "按权重加权求和 Value：Σ_j weights[j] · V[j]（head {head} 的输出）。",
        "en": "Read the values: Σ_j weights[j] · V[j] (the output of head {head}).",
    },
    "ex_output": {
        "zh": "所有 head 的结果拼接后乘 W_O，就是注意力层的输出；再加上残差和 MLP，是这一层（block）的输出。",
        "en": "All heads concatenated and multiplied by W_O give the attention output; adding the residual "
        "and the MLP gives the output of this layer (block).",
    },
    "row_scores": {"zh": "QKᵀ", "en": "QKᵀ"},
    "row_visible": {"zh": "mask 1/0", "en": "mask 1/0"},
    "row_masked": {"zh": "加 mask", "en": "masked"},
    "row_weights": {"zh": "权重", "en": "weights"},
    "row_baseline": {"zh": "无干预", "en": "no intervention"},
    "not_stored": {
        "zh": "页面没有存这个 Key 的分数：长文本每一行只存权重最高的 Key",
        "en": "this key's scores are not stored: a long text keeps the keys with the largest weights of each row",
    },
    "vec_x": {"zh": "X", "en": "X"},
    "vec_q": {"zh": "q", "en": "q"},
    "vec_k": {"zh": "k", "en": "k"},
    "vec_v": {"zh": "v", "en": "v"},
    "vec_weighted": {"zh": "Σ w·V", "en": "Σ w·V"},
    "vec_attn_out": {"zh": "注意力层输出", "en": "attention output"},
    "vec_output": {"zh": "这一层的输出", "en": "layer output"},
    "shown_keys": {
        "zh": "共 {n_keys} 个 Key，表中显示 {n} 个：权重最高的 {top} 个、第一个 token 和自己。",
        "en": "{n_keys} keys; the table shows {n}: the {top} with the largest weights, the first token and the query "
        "itself.",
    },
    "sum": {"zh": "Σ weights = {sum}", "en": "Σ weights = {sum}"},
    "pred_now": {"zh": "现在", "en": "now"},
    "pred_base": {"zh": "无干预", "en": "no intervention"},
    "no_prediction": {
        "zh": "这个模型是编码器，没有下一个 token 的预测。",
        "en": "This model is an encoder: it predicts no next token.",
    },
    "error_range": {
        "zh": "{name} 必须是 {min} 到 {max} 之间的数",
        "en": "{name} must be a number between {min} and {max}",
    },
    "unknown": {
        "zh": "注意：{n_tokens} 个 token 中有 {n} 个是分词器不认识的（已用虚线框标出）。{hint}",
        "en": "Note: {n} of {n_tokens} tokens are unknown to the tokenizer (dashed boxes). {hint}",
    },
    # page: the scaled stage's words, chosen by the intervention (views/controls.py)
    "st_scaled": {"zh": "÷√d_k", "en": "÷√d_k"},
    "st_scaled_off": {"zh": "不除以 √d_k", "en": "no ÷√d_k"},
    "row_scaled": {"zh": "÷√d_k", "en": "÷√d_k"},
    "row_scaled_off": {"zh": "×1（不除以 √d_k）", "en": "×1 (no ÷√d_k)"},
    "scale_on": {"zh": "1/√{d}", "en": "1/√{d}"},
    "scale_on_t": {"zh": "1/(√{d}·T)，T = {t}", "en": "1/(√{d}·T), T = {t}"},
    "scale_off": {"zh": "1（不缩放）", "en": "1 (no scaling)"},
    "scale_off_t": {"zh": "1/T，T = {t}（不除以 √d_k）", "en": "1/T, T = {t} (no ÷√d_k)"},
    # page: the intervention controls (views/controls.py, until the registry of capture/interventions.py)
    "iv_scaling": {"zh": "不除以 √d_k", "en": "no ÷√d_k"},
    "iv_causal": {"zh": "关闭因果 mask", "en": "causal mask off"},
    "iv_temperature": {"zh": "温度 T = {temperature}", "en": "temperature T = {temperature}"},
    "param_scaling": {"zh": "÷√d_k 缩放", "en": "÷√d_k scaling"},
    "param_causal": {"zh": "因果 mask", "en": "causal mask"},
    "param_temperature": {"zh": "softmax 温度 T", "en": "softmax temperature T"},
}


def text(key: str, lang: str, **values) -> str:
    """TEXTS[key][lang] with its `{name}` placeholders filled from `values`.

    A KeyError names an unknown key or a placeholder without a value; a ValueError an unknown language."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS}, got {lang!r}")
    if key not in TEXTS:
        raise KeyError(f"no text {key!r} in selfattn.explain.views.texts.TEXTS")
    return TEXTS[key][lang].format(**values)
