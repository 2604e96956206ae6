"""The one text table: every sentence a view says, in Chinese and in English, under one key.

    TEXTS["tables.selected"]  -> {"zh": "显示：层 {layer} · head {head}（{reason}）", "en": "Showing layer …"}
    text("tables.selected", "en", layer=1, head=2, reason="chosen by you")

`{name}` placeholders are filled by `str.format` here and by one small `fill()` in the page's JS; the
page's data carries the keys its modules name (`report.page_texts`), so the JS holds no copy of a
sentence. Keys are grouped by the view that says them: "tables." (the terminal), "plots." (the pictures),
"positions." (a model's positional scheme, in every view), "pick_rule" (how the shown head is picked).
The interventions' own words live with them, in the registry (`capture.interventions`: label, help, said), and
so do the head types' (`head_types.REGISTRY`: short, label, does, heads); the views' registry
(`views.registry`) takes its built-in views' words from here.
"""

from __future__ import annotations

__all__ = ["TEXTS", "LANGS", "text"]

LANGS = ("zh", "en")

TEXTS: dict[str, dict[str, str]] = {
    "tables.model": {
        "zh": "模型：{name}（{kind}，{n_layers} 层 × {n_heads} 个 head，d_model = {d_model}，head 维度 d_k = "
        "{head_dim}）",
        "en": "Model: {name} ({kind}, {n_layers} layers × {n_heads} heads, d_model = {d_model}, head dim d_k = "
        "{head_dim})",
    },
    "architecture.transformers": {
        "zh": "{arch}（transformers 的模型类，注意力由 selfattn 计算）",
        "en": "{arch} (transformers, attention by selfattn)",
    },
    "tables.card": {
        "zh": "架构：{architecture}；位置编码：{positions}",
        "en": "Architecture: {architecture}; positions: {positions}",
    },
    "tables.numbering": {
        "zh": "编号：层、head 和 token 位置都从 0 起。",
        "en": "Numbering: layers, heads and token positions count from 0.",
    },
    "tables.unknown": {
        "zh": "注意：{n} 个 token 中有 {count} 个是分词器不认识的（标为 ⟨?⟩）。{hint}",
        "en": "Note: {count} of {n} tokens are unknown to the tokenizer (marked ⟨?⟩). {hint}",
    },
    "tables.tokens": {"zh": "分词（{n} 个 token）：", "en": "Tokens ({n}):"},
    "tables.selected": {
        "zh": "显示：层 {layer} · head {head}（{reason}）",
        "en": "Showing layer {layer} · head {head} ({reason})",
    },
    "tables.does": {"zh": "这个 head 在做什么：{text}", "en": "What this head does: {text}"},
    "tables.chosen": {"zh": "由你指定", "en": "chosen by you"},
    "tables.intervened": {"zh": "干预作用的 head", "en": "the head the intervention changes"},
    "tables.ablated": {"zh": "被消融的第一个 head", "en": "the first head ablated"},
    "tables.within_layer": {"zh": "在这一层里自动选择", "en": "picked within this layer"},
    "tables.auto_short": {"zh": "自动选择", "en": "picked automatically"},
    "tables.within_head": {"zh": "为这个 head 自动选择层", "en": "layer picked for this head"},
    "tables.intervention": {"zh": "干预：{items}", "en": "Intervention: {items}"},
    "tables.only": {"zh": "只在{where}", "en": "only in {where}"},
    "tables.where": {"zh": "层 {layer}", "en": "layer {layer}"},
    "tables.where_head": {"zh": " · head {head}", "en": " · head {head}"},
    "tables.experiment": {
        "zh": "对照实验（同一句话，有干预 vs 无干预）：{text}",
        "en": "Controlled experiment (the same text with and without the intervention): {text}",
    },
    "tables.scores": {"zh": "① 分数 QKᵀ", "en": "(1) scores QKᵀ"},
    "tables.scaled": {"zh": "② ÷√d_k（乘以 {scale}）", "en": "(2) ÷√d_k (times {scale})"},
    "tables.scaled_off": {"zh": "② 不除以 √d_k（乘以 {scale}）", "en": "(2) no ÷√d_k (times {scale})"},
    "tables.scaled_t": {"zh": "② ÷√d_k ÷T（T = {t}，乘以 {scale}）", "en": "(2) ÷√d_k ÷T (T = {t}, times {scale})"},
    "tables.scaled_off_t": {
        "zh": "② 不除以 √d_k，÷T（T = {t}，乘以 {scale}）",
        "en": "(2) no ÷√d_k, ÷T (T = {t}, times {scale})",
    },
    "tables.mask": {"zh": "③ 可见性（1 = 可以看，0 = 不能看）", "en": "(3) visibility (1 = may look, 0 = may not)"},
    "tables.mask_off": {
        "zh": "③ 可见性（因果 mask 已关闭：1 = 可以看）",
        "en": "(3) visibility (causal mask off: 1 = may look)",
    },
    "tables.masked": {"zh": "④ 加 mask（−inf）", "en": "(4) masked (−inf)"},
    "tables.weights": {"zh": "⑤ softmax 权重（%）", "en": "(5) softmax weights (%)"},
    "tables.meaning": {
        "zh": "⑥ ·V 当作“含义”：若每个 token 的 V 只携带它自己的含义（教程的单位向量），输出的每一行就是各含义的权重（"
        "%）",
        "en": "(6) ·V as \"meanings\": if each token's V carried only its own meaning (the tutorial's unit vectors), "
        "each output row would be these weights per meaning (%)",
    },
    "tables.other": {"zh": "其他", "en": "other"},
    "tables.first": {"zh": "首 token", "en": "1st token"},
    "tables.vectors": {
        "zh": "⑦ 输出：Σ w·V（这个 head）、注意力层输出、这一层的输出（每行：长度 ‖·‖ 和最大的 {k} 个维度；完整数字见 "
        "--json）",
        "en": "(7) output: Σ w·V (this head), attention output, layer output (per row: length ‖·‖ and the {k} largest "
        "dimensions; every number is in --json)",
    },
    "tables.col_weighted": {"zh": "Σ w·V", "en": "Σ w·V"},
    "tables.col_attn": {"zh": "注意力层输出", "en": "attention output"},
    "tables.col_output": {"zh": "这一层的输出", "en": "layer output"},
    "tables.top": {"zh": "每个位置最关注的 token：", "en": "What each position attends to most:"},
    "tables.row": {"zh": "“{q}” → {items}", "en": '"{q}" → {items}'},
    "tables.bos": {
        "zh": "注：{token} 是句首的特殊 token。用不上的注意力常常“停”在这里：这个 head 平均给它 {selected}，所有 head "
        "平均 {mean}。",
        "en": 'Note: {token} is the special first token. Attention that is not needed elsewhere often "parks" '
        "there: this head gives it {selected} on average, all heads {mean}.",
    },
    "tables.predict": {"zh": "模型预测的下一个 token：", "en": "The model's next-token prediction:"},
    "tables.summary": {
        "zh": "各 head 概览：平均熵（bit，越小越集中）；* = ≥50% 注意力停在第一个 token 上；> = 当前显示",
        "en": "Heads at a glance: mean entropy (bits, lower = more concentrated); * = >= 50% on the first token; > = "
        "shown",
    },
    "tables.heads": {"zh": "每个 head 在这句话上做什么：", "en": "What each head does on this text:"},
    "tables.head_line": {"zh": "  层 {layer} · head {head}：{text}", "en": "  layer {layer} · head {head}: {text}"},
    "tables.search": {
        "zh": "head 搜索：“{q}”（位置 {i}）→“{k}”（位置 {j}）的权重，从大到小：",
        "en": 'Head search: the weight from "{q}" (position {i}) to "{k}" (position {j}), largest first:',
    },
    "tables.search_line": {"zh": "  层 {layer} · head {head}：{w}", "en": "  layer {layer} · head {head}: {w}"},
    "tables.too_long": {
        "zh": "输入有 {n} 个 token，超过 {limit}：终端只显示概览；用 --html 查看完整交互报告。",
        "en": "The input has {n} tokens, more than {limit}: the terminal shows summaries only; use --html for the "
        "full report.",
    },
    "tables.layer": {"zh": "层", "en": "layer"},
    "tables.head": {"zh": "head", "en": "head"},
    "tables.corner": {"zh": "查询 \\ 键", "en": "query \\ key"},
    "tables.corner_meaning": {"zh": "位置 \\ 含义", "en": "position \\ meaning"},
    "tables.decoder": {"zh": "解码器", "en": "decoder"},
    "tables.encoder": {"zh": "编码器", "en": "encoder"},
    "tables.only_head": {"zh": "只在 head {head}", "en": "only in head {head}"},
    "plots.key": {"zh": "键（被看的 token）", "en": "key (the token looked at)"},
    "plots.query": {"zh": "查询（当前 token）", "en": "query (the current token)"},
    "plots.title": {"zh": "{name} · 层 {layer} · head {head}", "en": "{name} · layer {layer} · head {head}"},
    "plots.weight": {"zh": "softmax 权重（√ 刻度）", "en": "softmax weight (√ scale)"},
    "plots.zoom": {"zh": "（最后 {n} 个 token）", "en": " (the last {n} tokens)"},
    "plots.grid": {"zh": "{name}：每层每个 head 的注意力权重", "en": "{name}: attention weights, layer × head"},
    "plots.cell": {
        "zh": "层 {layer} · head {head}\n熵 {entropy} bit · 首 {first}",
        "en": "layer {layer} · head {head}\n{entropy} bits · 1st {first}",
    },
    "plots.shown": {"zh": "（显示中）", "en": " (shown)"},
    "positions.learned": {"zh": "学到的绝对位置向量，加在 X 上", "en": "learned absolute positions, added to X"},
    "positions.rope": {"zh": "RoPE：显示的是旋转之后的 Q/K", "en": "RoPE: Q/K shown after rotation"},
    "positions.rope_qk_norm": {
        "zh": "RoPE：显示的是旋转之后的 Q/K（在 QK-norm 之后）",
        "en": "RoPE: Q/K shown after rotation (after QK-norm)",
    },
    "pick_rule": {
        "zh": "自动选择：排除平均 ≥50% 停在第一个 token 上或 ≥50% 看自己的 head；先选在这句话的某个教程链接"
        "（名词→量词/颜色、动词→名词、地点→动词/名词、第二句→第一句）上明显高于均匀注意力、且平均权重最大的 "
        "head；没有的话，选类型明确（归纳、前一个、后一个、重复、局部 token）且比例最大的 head；"
        "再没有，选注意力最集中（平均熵最低）的 head",
        "en": "picked automatically: leaving out heads with >= 50% on the first token or >= 50% on the token itself, "
        "the head with the largest mean weight on one of the tutorial's links in this text (noun → measure "
        "word/colour, verb → noun, place → verb/noun, clause 2 → clause 1) that is clearly above uniform "
        "attention; else the head of a clear type (induction, previous, next, duplicate, local token) with the "
        "largest share; else the most concentrated head (lowest mean entropy)",
    },
    # page
    "page_title": {"zh": "Self-Attention 是什么", "en": "What is Self-Attention"},
    "noscript": {
        "zh": "本页需要 JavaScript 才能画出模型的注意力（不使用任何网络连接）。",
        "en": "This page needs JavaScript to draw the attention of the model (no network access is used).",
    },
    "title": {"zh": "Self-Attention 是什么 · 注意力浏览器", "en": "What is Self-Attention · attention explorer"},
    "lang": {"zh": "English", "en": "中文"},
    "input": {
        "zh": "输入一句话（由这个模型自己的分词器切成 token）",
        "en": "Type a sentence (the model's own tokenizer cuts it into tokens)",
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
        "zh": "选两个 token：哪个 head 让查询（Q）最关注键（K）？点击结果查看那个 head。",
        "en": "Pick two tokens: which head makes the query attend most to the key? Click a result to show that head.",
    },
    "find": {"zh": "搜索", "en": "Search"},
    "search_row": {"zh": "层 {layer} · head {head}：{weight}", "en": "layer {layer} · head {head}: {weight}"},
    "search_held": {
        "zh": "只排了这一页完整包含的层 {held} 的 head；要排所有层，用 selfattn explain --find "
        "或 selfattn serve 的网页。",
        "en": "Ranked among the heads of the layers this page holds in full ({held}); to rank every layer, use "
        "selfattn explain --find or the selfattn serve app.",
    },
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
        "zh": "·V：每个维度的柱子由各个键的 w·V[d] 叠成，加起来就是输出的这一维",
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
        "zh": "注意力权重热图。当前格：查询 {i}“{query}”→ 键 {j}“{key}”：{weight}。用方向键移动，回车选择。",
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
    "query": {"zh": "查询（Q）", "en": "query"},
    "key": {"zh": "键（K）", "en": "key"},
    "layer_n": {"zh": "层 {layer}", "en": "layer {layer}"},
    "head_n": {"zh": "head {head}", "en": "head {head}"},
    "heatmap": {"zh": "注意力权重", "en": "Attention weights"},
    "heatmap_hint": {
        "zh": "行 = 查询（Q，当前位置），列 = 键（K，被参考的位置）。颜色越深权重越大，深灰 = mask 为 0（不能看）。"
        "点击一格或用方向键选择查询和键。",
        "en": "Rows = queries, columns = keys. Darker = larger weight; dark grey = mask 0 (may not look). "
        "Click a cell, or use the arrow keys, to pick the query and the key.",
    },
    "tip": {
        "zh": "查询 {i}“{query}”→ 键 {j}“{key}”：{value}",
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
        "zh": "位置 {i} 的 token “{token}” 进入这一层注意力的输入向量 X[{i}]（{norm}），{d_model} 维。",
        "en": 'X[{i}]: the input vector of the token at position {i}, "{token}", to this layer\'s attention '
        "({norm}), {d_model} numbers.",
    },
    "ex_qkv": {
        "zh": "{formula}（head {head}）。查询（Q）表示“我想找什么信息”，"
        "键（K）表示“我这里有什么信息可被匹配”，值（V）是“别人关注我时我提供的内容”。点击下表的键查看它的 K 和 V。",
        "en": '{formula} (head {head}). The query asks "what am I '
        'looking for", the key says "what I can be matched on", the value is what I give when attended to. '
        "Click a key in the table to see its K and V.",
    },
    "mix_some": {
        "zh": "V 有 {dv} 维：这里只画 |Σ w·V| 最大的 {n} 维（每一维的数都在上面的向量里）。",
        "en": "V has {dv} dims: the bars of the {n} with the largest |Σ w·V| are drawn (every dim's number is in "
        "the vector above).",
    },
    "formula_x_unknown": {"zh": "模型的输入向量", "en": "the model's input vector"},
    "formula_qkv_unknown": {"zh": "Q = X·W_Q，K = X·W_K，V = X·W_V", "en": "Q = X·W_Q, K = X·W_K, V = X·W_V"},
    "formula.norm_layer": {"zh": "LayerNorm", "en": "LayerNorm"},
    "formula.norm_rms": {"zh": "RMSNorm", "en": "RMSNorm"},
    "formula.norm_unknown": {"zh": "这一层的 norm", "en": "the layer's norm"},
    "formula.x": {"zh": "残差流经过 {norm} 之后", "en": "the residual stream after {norm}"},
    "formula.x_post": {
        "zh": "上一层的输出（或词向量）经过 {norm} 之后",
        "en": "the previous layer's output (or the embeddings) after {norm}",
    },
    "formula.rope_all": {
        "zh": "RoPE 按位置旋转 Q 和 K 的全部 {dims} 维",
        "en": "RoPE rotates all {dims} dims of Q and K by position",
    },
    "formula.rope_part": {
        "zh": "RoPE 只旋转 Q 和 K 的前 {dims} 维（共 {head_dim} 维）",
        "en": "RoPE rotates only the first {dims} of Q and K's {head_dim} dims",
    },
    "formula.qk_norm": {
        "zh": "q_norm / k_norm 是每个 head 的 {norm}，在 RoPE 之前",
        "en": "q_norm / k_norm are a per-head {norm}, before RoPE",
    },
    "formula.gqa": {
        "zh": "{n} 个查询 head 共用 {kv} 组 K/V（GQA）",
        "en": "{n} query heads share {kv} K/V heads (GQA)",
    },
    "ex_scores": {
        "zh": "score[i][j] = Q[i] · K[j]：位置 i 的查询（Q）和位置 j 的键（K）有多匹配。",
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
        "zh": "按权重加权求和值（V）：Σ_j weights[j] · V[j]（head {head} 的输出）。",
        "en": "Read the values: Σ_j weights[j] · V[j] (the output of head {head}).",
    },
    "ex_output": {
        "zh": "所有 head 的结果拼接后乘 W_O，就是注意力层的输出；再加上残差和 MLP，是这一层的输出。",
        "en": "All heads concatenated and multiplied by W_O give the attention output; adding the residual "
        "and the MLP gives the output of this layer (block).",
    },
    "row_scores": {"zh": "QKᵀ", "en": "QKᵀ"},
    "row_visible": {"zh": "mask 1/0", "en": "mask 1/0"},
    "row_masked": {"zh": "加 mask", "en": "masked"},
    "row_weights": {"zh": "权重", "en": "weights"},
    "row_baseline": {"zh": "无干预", "en": "no intervention"},
    "not_stored": {
        "zh": "页面没有存这个键的分数：长文本每一行只存权重最高的键",
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
        "zh": "共 {n_keys} 个键，表中显示 {n} 个：权重最高的 {top} 个、第一个 token 和自己。",
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
    # page: the scaled stage's words, chosen by the intervention (views/controls.py: scale_words)
    "st_scaled": {"zh": "÷√d_k", "en": "÷√d_k"},
    "st_scaled_off": {"zh": "不除以 √d_k", "en": "no ÷√d_k"},
    "row_scaled": {"zh": "÷√d_k", "en": "÷√d_k"},
    "row_scaled_off": {"zh": "×1（不除以 √d_k）", "en": "×1 (no ÷√d_k)"},
    "scale_on": {"zh": "1/√{d}", "en": "1/√{d}"},
    "scale_on_t": {"zh": "1/(√{d}·T)，T = {t}", "en": "1/(√{d}·T), T = {t}"},
    "scale_off": {"zh": "1（不缩放）", "en": "1 (no scaling)"},
    "scale_off_t": {"zh": "1/T，T = {t}（不除以 √d_k）", "en": "1/T, T = {t} (no ÷√d_k)"},
    # page: the head view, model view and compare view, and the attention page
    "view_explore": {"zh": "逐步讲解", "en": "Step by step"},
    "view_head": {"zh": "head 视图", "en": "Head view"},
    "view_model": {"zh": "模型视图", "en": "Model view"},
    "view_compare": {"zh": "对比两句", "en": "Compare texts"},
    "views_nav": {"zh": "视图", "en": "Views"},
    "hv_title": {"zh": "head 视图：层 {layer}", "en": "Head view: layer {layer}"},
    "hv_hint": {
        "zh": "左边是查询 token，右边是键 token；每条线是一个（查询，键）权重，线宽 ∝ 权重，颜色 = head。"
        "把鼠标放在一个 token 上，只看它关注哪里（左）或谁关注它（右）；点 head 的按钮开关它。",
        "en": "Queries on the left, keys on the right; each line is one (query, key) weight, its width ∝ the "
        "weight, its colour the head. Hover a token to see only where it looks (left) or who looks at it "
        "(right); click a head's button to switch it on or off.",
    },
    "hv_note": {
        "zh": "画出 {drawn} 条线：每个权重 ≥ {threshold} 的（查询，键）对一条。",
        "en": "{drawn} lines drawn: one per (query, key) pair whose weight is ≥ {threshold}.",
    },
    "hv_note_long": {
        "zh": "输入较长：{total} 个权重 ≥ 1% 的对里，只画最大的 {drawn} 条（权重 ≥ {threshold}），页面才不会卡。",
        "en": "Long input: of the {total} pairs with weight ≥ 1%, only the {drawn} strongest are drawn "
        "(weight ≥ {threshold}), so the page stays responsive.",
    },
    "hv_toggle": {"zh": "显示或隐藏 head {head}", "en": "show or hide head {head}"},
    "hv_layer": {"zh": "层", "en": "Layer"},
    "mv_title": {"zh": "模型视图：每层 × 每个 head", "en": "Model view: every layer × head"},
    "mv_hint": {
        "zh": "每个小图是一个 head 的 L×L 权重（行 = 查询，列 = 键，颜色同热力图），边框颜色是它的类型；点一个打开它。",
        "en": "Each thumbnail is one head's L×L weights (rows = queries, columns = keys, the heatmap's colours); "
        "its border colour is its type. Click one to open it.",
    },
    "mv_pooled": {
        "zh": "{n} 个 token：小图的每个像素是 {block}×{block} 个权重里最大的一个。",
        "en": "{n} tokens: each thumbnail pixel is the largest weight of a {block}×{block} block.",
    },
    "mv_omitted": {"zh": "（未包含这一层的数据）", "en": "(this layer's arrays are not held)"},
    "mv_held": {
        "zh": "这一页完整包含层 {held}；其他层（灰色的层号）只画缩略图：点开一个，页面会说怎样取得它的各步"
        "（selfattn serve 的网页会直接取来）。",
        "en": "This page holds layers {held} in full; the others (greyed numbers) are drawn from their thumbnails: "
        "open one and the page says how to get its steps (the selfattn serve app fetches them).",
    },
    "mv_not_held": {
        "zh": "这一层只有缩略图（它的各步数组不在这一页里）",
        "en": "thumbnail only (this layer's arrays are not in this page)",
    },
    "mv_pooled_mean": {
        "zh": "{n} 个 token：小图的每个格子是约 {block}×{block} 个权重的平均。",
        "en": "{n} tokens: each thumbnail cell is the mean of about {block}×{block} weights.",
    },
    "not_held": {
        "zh": "层 {layer} 的数组不在这一页里（这一页完整包含层 {held}），所以这里不画它的热力图和各步。"
        "要看层 {layer} 的每一步：selfattn explain … --layers {layer} --html，或在 selfattn serve 的网页里打开它。",
        "en": "Layer {layer}'s arrays are not in this page (it holds layers {held} in full), so no heatmap or "
        "stages are drawn for it. To see every stage of layer {layer}: selfattn explain … --layers {layer} "
        "--html, or open it in the app (selfattn serve).",
    },
    "not_held_live": {
        "zh": "正在向服务器要层 {layer} 的数组……",
        "en": "Asking the server for layer {layer}'s arrays…",
    },
    "not_held_thumb": {
        "zh": "层 {layer} · head {head} 的缩略图：每格是一块权重的平均（行 = 查询，列 = 键）。",
        "en": "The thumbnail of layer {layer} · head {head}: each cell the mean of a block of weights "
        "(rows = queries, columns = keys).",
    },
    "mv_cell": {"zh": "层 {layer} · head {head}", "en": "layer {layer} · head {head}"},
    "mv_untyped": {"zh": "无明显类型", "en": "no clear type"},
    "cmp_title": {"zh": "对比两句：层 {layer} · head {head}", "en": "Compare two texts: layer {layer} · head {head}"},
    "cmp_hint": {
        "zh": "同一个 head 在两句话上的权重并排；长度相同时第三张图是差（红 = 第二句更大，蓝 = 更小）。",
        "en": "The same head's weights on the two texts side by side; when they have the same length the third "
        "picture is the difference (red = larger in the second text, blue = smaller).",
    },
    "cmp_a": {"zh": "第一句：{text}", "en": "First text: {text}"},
    "cmp_b": {"zh": "第二句：{text}", "en": "Second text: {text}"},
    "cmp_diff": {"zh": "差（第二句 − 第一句）", "en": "Difference (second − first)"},
    "cmp_lengths": {
        "zh": "两句分别有 {a} 和 {b} 个 token：没有逐格的差。",
        "en": "The texts have {a} and {b} tokens: there is no cell-by-cell difference.",
    },
    "cmp_row": {"zh": "查询 {i} 的一行权重", "en": "The weights of query {i}"},
    "cmp_which_a": {"zh": "第一句", "en": "first"},
    "cmp_which_b": {"zh": "第二句", "en": "second"},
    "cmp_which_d": {"zh": "差", "en": "difference"},
    "cmp_no_row": {"zh": "第二句没有位置 {i}", "en": "the second text has no position {i}"},
    "aw_title": {"zh": "注意力权重", "en": "Attention weights"},
    "aw_source": {
        "zh": "{layers} 层 × {heads} 个 head，{n} 个 token（直接给出的权重）",
        "en": "{layers} layers × {heads} heads, {n} tokens (weights given directly)",
    },
    # real: readable tokens, the model's own words (encoder/decoder, GQA, positions, tokenizer), sizes, errors
    "positions.alibi": {
        "zh": "ALiBi：没有位置向量，按距离给分数加线性偏置",
        "en": "ALiBi: no position vectors; a linear bias by distance is added to the scores",
    },
    "positions.relative": {
        "zh": "相对位置：分数里加一项相对位置的分数",
        "en": "relative positions: a relative-position term is added to the scores",
    },
    "positions.sinusoidal": {"zh": "固定的正弦位置向量，加在 X 上", "en": "fixed sinusoidal positions, added to X"},
    "positions.unknown": {"zh": "配置里没有写明位置编码", "en": "the config states no positional scheme"},
    "tokenizer.word": {
        "zh": "jieba 分词，再查词表（不认识的字记为 <unk>）",
        "en": "jieba words looked up in the vocabulary (an unknown character becomes <unk>)",
    },
    "tokenizer.byte_bpe": {
        "zh": "字节级 BPE：每个片段是几个 UTF-8 字节，一个汉字（3 个字节）常分在 2–3 个片段里，标为 字(k/n)",
        "en": "byte-level BPE: each piece is a run of UTF-8 bytes; a Chinese character (3 bytes) is often spread "
        "over 2–3 pieces, marked 字(k/n)",
    },
    "tokenizer.byte_fallback": {
        "zh": "SentencePiece BPE（字节回退）：词表里没有的字符拆成 <0xNN> 字节片段，标为 字(k/n)",
        "en": "SentencePiece BPE with byte fallback: a character missing from the vocabulary becomes <0xNN> byte "
        "pieces, marked 字(k/n)",
    },
    "tokenizer.wordpiece": {
        "zh": "WordPiece：一个词可拆成几个片段，接在后面的片段在词表里写作 ##…（这里显示它的文字），"
        "按词的视图把它们合成一个词",
        "en": "WordPiece: a word may be cut into pieces; a piece that continues a word is written ##… in the "
        "vocabulary (shown here as its text), and the word view joins them",
    },
    "tokenizer.unigram": {
        "zh": "Unigram（SentencePiece）：切成词表里最可能的片段",
        "en": "Unigram (SentencePiece): the most likely pieces of its vocabulary",
    },
    "tokenizer.bpe": {"zh": "BPE：按合并规则切成片段", "en": "BPE: pieces by its merge rules"},
    "tokenizer.wordlevel": {
        "zh": "整词词表：不认识的词记为 [UNK]",
        "en": "word-level vocabulary: an unknown word becomes [UNK]",
    },
    "tokenizer.other": {"zh": "分词器", "en": "tokenizer"},
    "gqa.heads": {
        "zh": "分组查询注意力（GQA）：{n} 个查询 head 共用 {kv} 个键/值 head，每 {g} 个一组：{groups}",
        "en": "grouped-query attention (GQA): {n} query heads share {kv} key/value heads, {g} per group: {groups}",
    },
    "gqa.mqa": {
        "zh": "多查询注意力（MQA）：{n} 个查询 head 共用 1 个键/值 head",
        "en": "multi-query attention (MQA): all {n} query heads share one key/value head",
    },
    "gqa.group": {"zh": "head {first}–{last} 读 KV {kv}", "en": "heads {first}–{last} read KV {kv}"},
    "gqa.reads": {
        "zh": "这个 head 读键/值 head {kv}（和 {g} 个查询 head 共用）",
        "en": "this head reads key/value head {kv} (shared by {g} query heads)",
    },
    "encoder.no_causal": {
        "zh": "编码器没有因果 mask：每个 token 本来就看得到所有 token，没有可以关掉的因果规则",
        "en": "an encoder has no causal mask: every token already sees every token, so there is none to switch off",
    },
    "encoder.note": {
        "zh": "编码器：每个 token 看所有 token（没有因果 mask），也不预测下一个 token。",
        "en": "Encoder: every token sees every token (no causal mask), and there is no next-token prediction.",
    },
    "opened.masked": {
        "zh": "从第 {i} 个 token「{token}」看起：它后面的 {n} 个 token 被 mask 遮住（分数变成 −inf，权重为 0），"
        "这正是 mask 这一步要看的；最后一个 token 看得见所有 token，它那一行看不出 mask。",
        "en": "Opened on token {i} “{token}”: the {n} tokens after it are masked (their scores become −inf, their "
        "weights 0), which is what the mask step is about; the last token sees every token, so its row shows no mask.",
    },
    "opened.link": {
        "zh": "从第 {i} 个 token「{token}」看起：这个 head 的描述说的就是它看「{key_token}」（位置 {k}）的那一条；"
        "它后面的 {n} 个 token 被 mask 遮住（分数变成 −inf，权重为 0），这正是 mask 这一步要看的。",
        "en": "Opened on token {i} “{token}”: the link this head's sentence describes, its look at “{key_token}” "
        "(position {k}); the {n} tokens after it are masked (their scores become −inf, their weights 0), which is "
        "what the mask step is about.",
    },
    "opened.link_sees_all": {
        "zh": "从第 {i} 个 token「{token}」看起：这个 head 的描述说的是第 {q} 个 token「{query}」看「{key_token}」，"
        "可是「{query}」看得见所有 token，它那一行看不出 mask；这一行后面的 {n} 个 token 被 mask 遮住"
        "（分数变成 −inf）。",
        "en": "Opened on token {i} “{token}”: this head's sentence describes token {q} “{query}” looking at "
        "“{key_token}”, but “{query}” sees every token, so its row shows no mask; here the {n} tokens after it are "
        "masked (their scores become −inf).",
    },
    "opened.all": {
        "zh": "从第 {i} 个 token「{token}」看起：这里没有 mask，每个 token 都看得见所有 token。",
        "en": "Opened on token {i} “{token}”: nothing is masked here, every token sees every token.",
    },
    "export.omitted": {
        "zh": "所有层的数组最多占 {mb} MB，超过一页 {limit} MB 的上限：这里完整写出层 {held}；"
        "其他层用 --layers（例如 --layers 3,18）或 Python 的 layers=[3, 18] 来要，或在 selfattn serve 的网页里点那一层",
        "en": "every layer's arrays may take up to {mb} MB, over the {limit} MB a page may hold: layers {held} are "
        "written in full; ask for others with --layers (e.g. --layers 3,18), layers=[3, 18] in Python, or pick the "
        "layer in the app (selfattn serve)",
    },
    "tables.tokenizer": {"zh": "分词：{how}", "en": "Tokenizer: {how}"},
    "tables.loaded": {"zh": "读取：{how}", "en": "Loaded: {how}"},
    "tables.repeated": {
        "zh": "重复出现的 token 带上位置：{example} 是位置 {at} 的“{token}”。",
        "en": 'A repeated token carries its position: {example} is the "{token}" at position {at}.',
    },
    "tables.levels": {
        "zh": "{n} 个片段合成 {chars} 个字、{words} 个词；按字、按词合并的权重见 ⑤′。",
        "en": "The {n} pieces spell {chars} characters and {words} words; the weights per character and per "
        "word are in (5′).",
    },
    "tables.level_weights": {
        "zh": "⑤′ 按{level}合并的 softmax 权重（%）：{rule}",
        "en": "(5′) softmax weights per {level} (%): {rule}",
    },
    "tables.level_characters": {"zh": "字", "en": "character"},
    "tables.level_words": {"zh": "词", "en": "word"},
    "server.busy": {
        "zh": "服务器正在处理别的长文本，请稍后再试",
        "en": "the server is busy with other long texts; try again in a moment",
    },
    "server.too_large": {
        "zh": '回答大约有 {mb} MiB，超过 {limit} MiB 的上限：请少要几层（layers: [..]）或用 format "packed"',
        "en": "the answer would be about {mb} MiB, over the {limit} MiB limit: ask for fewer layers (layers: [..]) "
        'or format "packed"',
    },
    "server.invalid": {"zh": "请求无效：{reason}", "en": "{reason}"},
    "server.refused": {"zh": "无法解释这段文字：{reason}", "en": "{reason}"},
    # heads: the patching picture, the research tables (views/patching_plot, research_tables); a head type's own
    # words live with it, in the registry (views/head_types.REGISTRY)
    "heads.legend.spread": {"zh": "没有明确类型", "en": "no clear type"},
    "heads.uniform": {"zh": "均匀注意力 {c}", "en": "uniform attention {c}"},
    "patching.title": {
        "zh": "{model} · 激活修补：恢复的 logit 差 {t} − {f}（干净 {c}，被改动 {x}）",
        "en": "{model} · activation patching: logit difference {t} − {f} recovered (clean {c}, corrupted {x})",
    },
    "patching.heads": {"zh": "每个 head 的输出", "en": "each head's output"},
    "patching.residual": {"zh": "每层每个位置的残差流", "en": "each layer's residual stream, per position"},
    "patching.head": {"zh": "head", "en": "head"},
    "patching.layer": {"zh": "层", "en": "layer"},
    "patching.position": {"zh": "位置（干净文本的 token）", "en": "position (the clean text's tokens)"},
    "patching.share": {"zh": "恢复的比例", "en": "share recovered"},
    "patching.top": {"zh": "框出：{names}", "en": "framed: {names}"},
    "research.taxonomy": {
        "zh": "{model}：每个 head 最明确的类型和比例（%；“均匀”后是平均归一化熵，0–1，不是百分比；"
        "探针 = {n} 个随机 token 重复两遍，seed {seed}，{bos}{text}）",
        "en": "{model}: each head's clearest type and share (%; after “broad” the mean normalised entropy, 0–1, "
        "not a %; probe = {n} random tokens repeated twice, seed {seed}, {bos}{text})",
    },
    "research.bos_added": {"zh": "开头加上 BOS {token}", "en": "BOS {token} prepended"},
    "research.bos_frame": {"zh": "开头是分词器自带的 {token}", "en": "starting with the tokenizer's own {token}"},
    "research.bos_none": {"zh": "模型没有 BOS token", "en": "the model has no BOS token"},
    "research.unmeasurable": {"zh": "测不出", "en": "n/m"},
    "research.relations": {"zh": "这句话上的教程关系：", "en": "Tutorial relations on the text:"},
    "research.relation": {
        "zh": "{head} {relation} {share}（均匀 {c}）{control}",
        "en": "{head} {relation} {share} (uniform {c}){control}",
    },
    "research.relation_control": {"zh": "，对照句 {share}", "en": ", control sentence {share}"},
    "research.relation_tested": {
        "zh": "；{sentences} 句 {rows} 行 {share}（均匀 {c}，{p}）",
        "en": "; {rows} rows of {sentences} sentences {share} (uniform {c}, {p})",
    },
    "research.no_relation": {
        "zh": "没有哪个 head 的教程关系经得起对照（前一个词、自己、第一个 token）",
        "en": "no head holds a tutorial relation against the controls (previous word, itself, first token)",
    },
    "research.no_roles": {
        "zh": "这句话没有语法角色（分词器只读中文）：不测教程关系",
        "en": "no roles on this text (the tagger reads Chinese): no tutorial relation measured",
    },
    "research.with_text": {"zh": "，再加上这句话", "en": ", and the text"},
    "research.layer": {"zh": "层", "en": "layer"},
    "research.ablation": {"zh": "消融：", "en": "Ablation: "},
    "research.patching": {"zh": "激活修补（activation patching）：", "en": "Activation patching: "},
    "research.heads": {
        "zh": "每个 head 恢复的 logit 差（%）：",
        "en": "Share of the logit difference each head recovers (%):",
    },
    "research.residual": {
        "zh": "每层每个位置的残差流恢复的 logit 差（%）：",
        "en": "Share recovered by each layer's residual stream at each position (%):",
    },
    "research.lens": {"zh": "逻辑透镜（logit lens）：", "en": "Logit lens: "},
    "research.lens_table": {
        "zh": "每层之后读出的下一个 token（位置 {p}，{tok}）：",
        "en": "The next token read out after each layer (position {p}, {tok}):",
    },
    "research.top": {"zh": "前 {k} 名", "en": "top {k}"},
    "research.entropy": {"zh": "熵（bit）", "en": "entropy (bits)"},
    # findings (views/findings.py): what an experiment found, in a sentence
    "findings.count": {"zh": "{n} 个 head：{parts}", "en": "{n} heads: {parts}"},
    "findings.untyped": {"zh": "没有明确类型 {n}", "en": "no clear type {n}"},
    "findings.line": {"zh": "{heads}：{named}{more}", "en": "{heads}: {named}{more}"},
    "findings.more": {"zh": " 等 {n} 个", "en": " and {n} more"},  # zh: how many in all; en: how many more
    "findings.on_probe": {"zh": "探针", "en": "probe"},
    "findings.on_text": {"zh": "这句话", "en": "text"},
    "findings.on_words": {"zh": "这句话和对照句的词", "en": "words of the text and its control"},
    "findings.entropy": {"zh": "{e}（{on}）", "en": "{e} ({on})"},
    "findings.score": {"zh": "{p}（均匀 {c}，{on}）", "en": "{p} (uniform {c}, {on})"},
    "findings.list": {"zh": "、", "en": ", "},
    "findings.join": {"zh": "；", "en": "; "},
    "findings.end": {"zh": "。", "en": "."},
    "findings.mode_zero": {"zh": "0", "en": "zero"},
    "findings.mode_mean": {"zh": "平均输出", "en": "its mean output"},
    "findings.ablated": {
        "zh": "消融 {heads}（输出换成{mode}）：下一个 token {token} {before} → {after}",
        "en": "ablating {heads} (output set to {mode}): the next token {token} {before} → {after}",
    },
    "findings.new_top": {"zh": "第一名变成 {token} {p}", "en": "the top prediction becomes {token} {p}"},
    "findings.kl": {
        "zh": "下一个 token 的分布变化 KL = {kl} bit",
        "en": "the next-token distribution moves by KL = {kl} bits",
    },
    "findings.loss": {
        "zh": "整句的平均交叉熵 {before} → {after} nat",
        "en": "the text's mean next-token loss {before} → {after} nats",
    },
    "findings.patched": {
        "zh": "把干净文本里每个 head 的输出换进被改动的文本：恢复 logit 差（{t} − {f}）最多的是 {named}",
        "en": "each head's output patched from the clean text into the corrupted one: the heads that recover the most "
        "of the logit difference ({t} − {f}) are {named}",
    },
    "findings.none_recovers": {
        "zh": "没有哪个 head 单独恢复 logit 差（{t} − {f}）的 {least} 以上；最多的是 {best}",
        "en": "no head alone recovers {least} of the logit difference ({t} − {f}); the most is {best}",
    },
    "findings.differences": {
        "zh": "（干净文本上这个差是 {clean}，被改动的文本上 {corrupted}）",
        "en": " (the difference is {clean} on the clean text, {corrupted} on the corrupted one)",
    },
    "findings.unsteady": {
        "zh": "两者只差 {gap}，这些比例很不稳定",
        "en": "they differ by only {gap}, so these shares are unsteady",
    },
    "findings.handover": {
        "zh": "残差流：到层 {kept} 为止，换进被改动的位置 {q}（{token}）恢复最多；"
        "从层 {moved} 起，换进最后一个位置恢复最多",
        "en": "the residual stream: up to layer {kept}, patching the changed position {q} ({token}) recovers the most; "
        "from layer {moved} on, patching the last position does",
    },
    "findings.lens": {
        "zh": "在位置 {p}（{tok}）逐层读出下一个 token：最后一层（层 {n}）预测 {token} {prob}",
        "en": "the next token read out after every layer at position {p} ({tok}): the last layer (layer {n}) predicts "
        "{token} {prob}",
    },
    "findings.leads": {"zh": "从层 {at} 起第一名一直是它", "en": "it leads from layer {at} on"},
    "findings.never_first": {"zh": "之前的层都没有把它排第一", "en": "no earlier layer ranks it first"},
    "findings.layer0": {"zh": "层 0 读出的第一名是 {token} {prob}", "en": "layer 0 reads {token} {prob} first"},
    # a head's words (views.head_words): the shares, the links, the types, the fallbacks
    "heads.words.share": {"zh": "{p}，{uniform}", "en": "{p}, {uniform}"},
    "heads.words.share_mean": {"zh": "平均 {p}，{uniform}", "en": "{p} on average, {uniform}"},
    "heads.words.colon": {"zh": "：", "en": ": "},
    "heads.words.links_mean": {"zh": "（{n} 处平均 {share}）", "en": " (mean over {n} links: {share})"},
    "heads.words.keys_together": {"zh": "（{keys} 合计 {share}）", "en": " ({keys} together {share})"},
    "heads.words.links_many": {"zh": "（{n} 处平均）", "en": " (mean over {n} links)"},
    "heads.words.broad": {
        "zh": "注意力接近均匀：平均归一化熵 {e}（1 = 均匀）",
        "en": "close to uniform: mean normalised entropy {e} (1 = uniform)",
    },
    "heads.words.first": {
        "zh": "把注意力停在第一个 token {first} 上",
        "en": "parks its attention on the first token {first}",
    },
    "heads.words.overall": {"zh": "整体上，", "en": "overall, "},
    "heads.words.spread": {
        "zh": "注意力较分散：平均熵 {bits} bit，没有明显高于均匀注意力的模式",
        "en": "spread out: mean entropy {bits} bits, no pattern clearly above uniform attention",
    },
    "heads.words.previous_word": {
        "zh": "看前一个词：{share}（在这句里恰好也是 {pair}）",
        "en": "looks at the previous word: {share} (in this sentence that happens to be {pair})",
    },
    "heads.words.control": {
        "zh": "，中间隔着 {between} 时仍有 {share}",
        "en": ", still {share} with {between} in between",
    },
    "heads.words.control_unknown": {
        "zh": "，中间隔着 {between}（模型不认识 {unknown}，读作 <unk>）时仍有 {share}",
        "en": ", still {share} with {between} in between (the model does not know {unknown}: it reads <unk>)",
    },
    "heads.words.join_words": {"zh": "、", "en": ", "},
    "heads.words.tested": {
        "zh": "；在 {sentences} 句话里键不紧挨着的 {rows} 行上，{share}，{p}",
        "en": "; on {rows} rows of {sentences} sentences where the key is not the previous word, {share}, {p}",
    },
    "heads.words.p_below": {"zh": "p < {p}", "en": "p < {p}"},
    "heads.words.p": {"zh": "p = {p}", "en": "p = {p}"},
    "heads.words.unmeasurable": {
        "zh": "这句话上测不出类型（不到 {n} 行可测）：平均熵 {bits} bit",
        "en": "not measurable on this text (fewer than {n} rows to measure): mean entropy {bits} bits",
    },
    "heads.words.strongest": {
        "zh": "最强的教程链接 {link}：不算明显高于均匀",
        "en": "its strongest tutorial link {link}: not clearly above",
    },
    "heads.words.strongest_unmeasured": {
        "zh": "最强的教程链接 {link}：键不紧挨着的只有 {rows} 行（不到 {n} 行），测不出",
        "en": "its strongest tutorial link {link}: only {rows} rows where the key is not the previous word (fewer "
        "than {n}), not measurable",
    },
    "heads.words.join": {"zh": "；", "en": "; "},
    "heads.words.on_probe": {
        "zh": "（在随机 token 重复两遍的探针上）",
        "en": " (on the probe of random tokens repeated)",
    },
    # page19: the page and the app show the experiments (web/static/render/experiments.js, web/body.py)
    "server.experiment": {"zh": "无法做这个实验：{reason}", "en": "{reason}"},
    "server.needs": {"zh": "{field} 需要和 {needed} 一起给", "en": "{field} goes with {needed}: give both"},
    "rule_intervened": {
        "zh": "干预只作用于这个 head，所以显示它",
        "en": "the intervention is limited to this head, so this head is shown",
    },
    "rule_ablated": {"zh": "显示被消融的第一个 head", "en": "the first head ablated is shown"},
    "exp_legend": {"zh": "实验", "en": "experiments"},
    "exp_hint": {
        "zh": "和“解释”一起运行；层和 head 从 0 数起",
        "en": "run with Explain; layers and heads are counted from 0",
    },
    "exp_ablate": {"zh": "消融的 head（层.head，如 1.0,0.1）", "en": "heads to ablate (layer.head, e.g. 1.0,0.1)"},
    "exp_ablate_mean": {"zh": "换成平均输出（否则 0）", "en": "mean output (else zero)"},
    "exp_patch": {
        "zh": "激活修补：被改动的文本（token 数与原文相同）",
        "en": "activation patching: the corrupted text (as many tokens as the text)",
    },
    "exp_target": {"zh": "目标 token（空 = 原文的第一名）", "en": "target token (empty: the text's top prediction)"},
    "exp_foil": {"zh": "对照 token（空 = 改动文本的第一名）", "en": "foil token (empty: the corrupted text's top)"},
    "exp_lens": {"zh": "逻辑透镜", "en": "logit lens"},
    "exp_position": {"zh": "位置（空 = 最后一个）", "en": "position (empty: the last)"},
    "exp_bad_heads": {
        "zh": "消融的 head 写成 层.head，用逗号分隔（如 1.0,0.1）；“{item}”不是",
        "en": "write the heads to ablate as layer.head, separated by commas (e.g. 1.0,0.1); {item} is not",
    },
    "exp_bad_position": {
        "zh": "逻辑透镜的位置要是 0 或更大的整数，而不是“{value}”",
        "en": "the logit lens position must be a whole number from 0, not {value}",
    },
    "exp_title": {"zh": "实验", "en": "Experiments"},
    "exp_ablation": {"zh": "消融", "en": "Ablation"},
    "exp_before": {"zh": "消融前", "en": "before"},
    "exp_after": {"zh": "消融后", "en": "after"},
    "exp_patching": {"zh": "激活修补", "en": "Activation patching"},
    "exp_patch_texts": {
        "zh": "干净文本：{clean} · 被改动的文本：{corrupted} · logit 差 {target} − {foil}",
        "en": "clean text: {clean} · corrupted text: {corrupted} · logit difference {target} − {foil}",
    },
    "exp_patch_hint": {
        "zh": "每格 = 把干净文本的这一部分换进被改动的文本后，恢复的 logit 差的比例：蓝色恢复，红色反对；"
        "框出的是句子里点名的 head",
        "en": "each cell: the share of the logit difference recovered when that part of the clean run is patched into "
        "the corrupted one: blue recovers, red works against; the heads the sentence names are framed",
    },
    "exp_heads_map": {"zh": "每个 head 的输出（层 × head）", "en": "each head's output (layers × heads)"},
    "exp_residual_map": {
        "zh": "每层每个位置的残差流（层 × 位置；红色的位置被改动了）",
        "en": "each layer's residual stream (layers × positions; the changed positions in red)",
    },
    "exp_head_cell": {
        "zh": "层 {layer} · head {head}：恢复 {share}",
        "en": "layer {layer} · head {head}: {share} recovered",
    },
    "exp_residual_cell": {
        "zh": "层 {layer} · 位置 {position}（{token}）：恢复 {share}",
        "en": "layer {layer} · position {position} ({token}): {share} recovered",
    },
    "exp_scale": {"zh": "反对 {low} … 0 … 恢复 {high}", "en": "against {low} … 0 … recovers {high}"},
    "exp_lens_title": {
        "zh": "逻辑透镜：位置 {position}（{token}）之后每层读出的下一个 token",
        "en": "Logit lens: the next token read out after each layer at position {position} ({token})",
    },
    "exp_layer": {"zh": "层", "en": "layer"},
    "exp_top": {"zh": "第 {k} 名", "en": "top {k}"},
    "exp_entropy": {"zh": "熵（bit）", "en": "entropy (bits)"},
    "exp_settled": {"zh": "← 从这一层起第一名不再变", "en": "← the top token settles here"},
    # ring20 (issue 20): a layer's attention sink as its own column (tables, plots, the page)
    "tables.sink_col": {"zh": "汇点", "en": "sink"},
    "tables.sink_note": {
        "zh": "汇点：这一行交给这个 head 的注意力汇点（sink，不是任何 token）的份额 = 1 − 这一行的权重之和；"
        "这一层每个 head 带一个 sink 分数，它只进 softmax 的分母",
        "en": "sink: the share of the row that goes to this head's attention sink (no token) = 1 − the sum of the "
        "row's weights; each head of this layer has a sink logit, which only joins the softmax's denominator",
    },
    "plots.sink_col": {"zh": "汇点", "en": "sink"},
    "sink_col": {"zh": "汇点", "en": "sink"},
    "sink_tip": {
        "zh": "查询 {i} “{query}” → 汇点（不是任何 token）：{value}",
        "en": "query {i} “{query}” → the sink (no token): {value}",
    },
    "sink_sum": {
        "zh": "汇点拿走 {sink}（汇点的分数 {logit} 只进分母）",
        "en": "the sink takes {sink} (its logit {logit} only joins the denominator)",
    },
    "ex_softmax_sink": {
        "zh": "weights = exp(masked − lse)：分母 lse = log(Σ exp(masked) + exp(sink)) = {lse} 里还有这个 head 的"
        "汇点的分数 {sink}，所以一行的权重加起来是 1 − 汇点那一格，不到 100%；−inf 的位置权重正好是 0。",
        "en": "weights = exp(masked − lse): the denominator lse = log(Σ exp(masked) + exp(sink)) = {lse} also holds "
        "this head's sink logit {sink}, so a row's weights add up to 1 − its sink cell, less than 100%; −inf "
        "positions get exactly 0.",
    },
    "sink_label": {
        "zh": "汇点列：查询 {i} 交给注意力汇点 {weight}",
        "en": "sink column: query {i} gives the sink {weight}",
    },
}


def text(key: str, lang: str, **values) -> str:
    """TEXTS[key][lang] with its `{name}` placeholders filled from `values`.

    A KeyError names an unknown key or a placeholder without a value; a ValueError an unknown language."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS}, got {lang!r}")
    if key not in TEXTS:
        raise KeyError(f"no text {key!r} in selfattn.explainer.views.texts.TEXTS")
    return TEXTS[key][lang].format(**values)
