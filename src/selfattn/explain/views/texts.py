"""The one text table: every sentence a view says, in Chinese and in English, under one key.

    TEXTS["tables.selected"]  -> {"zh": "显示：层 {layer} · head {head}（{reason}）", "en": "Showing layer …"}
    text("tables.selected", "en", layer=1, head=2, reason="chosen by you")

`{name}` placeholders are filled by `str.format` here and by one small `fill()` in the page's JS; the
export dict carries the keys the page needs under doc["texts"] (`for_page`), so the JS holds no copy of a
sentence. Keys are grouped by the view that says them: "tables." (the terminal), "plots." (the pictures),
"positions." (a model's positional scheme, in every view), "pick_rule" (how the shown head is picked).
The interventions' own words live with them, in the registry (`capture.interventions`: label, help, said).
"""

from __future__ import annotations

__all__ = ["TEXTS", "LANGS", "text", "for_page"]

LANGS = ("zh", "en")

TEXTS: dict[str, dict[str, str]] = {
    "tables.model": {
        "zh": "模型：{name}（{kind}，{n_layers} 层 × {n_heads} 个 head，d_model = {d_model}，head 维度 d_k = "
        "{head_dim}）",
        "en": "Model: {name} ({kind}, {n_layers} layers × {n_heads} heads, d_model = {d_model}, head dim d_k = "
        "{head_dim})",
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
        "zh": "自动选择：在这句话的教程链接（名词→量词/颜色、动词→名词、地点→动词/名词、第二句→第一句）上平均权重最大"
        "的 head；排除平均 ≥50% 停在第一个 token 上或 ≥50% 看自己的 head。句子里没有这些链接时，选注意力最集中（"
        "平均熵最低）的 head",
        "en": "picked automatically: the head with the largest mean weight on one of the tutorial's links in this "
        "text (noun → measure word/colour, verb → noun, place → verb/noun, clause 2 → clause 1), leaving out "
        "heads with >= 50% on the first token or >= 50% on the token itself; a text without such links gets the "
        "most concentrated head (lowest mean entropy)",
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
    "export.omitted": {
        "zh": "所有层的数组约有 {mb} MB（JSON），超过 {limit} MB 的上限：这里只写出层 {layer} 的数组"
        "（约 {one_mb} MB）；其他层请一层一层地要（layers=[…]，或在网页里点那一层）",
        "en": "every layer's arrays would take about {mb} MB of JSON, over the limit of {limit} MB: only layer "
        "{layer}'s arrays are written (about {one_mb} MB); ask for the other layers one at a time (layers=[…], "
        "or pick the layer in the app)",
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
}

VIEW_ONLY = ("tables.", "plots.")
"""Key prefixes of the views in Python only (the terminal, the pictures): not sent to the page."""


def text(key: str, lang: str, **values) -> str:
    """TEXTS[key][lang] with its `{name}` placeholders filled from `values`."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    return TEXTS[key][lang].format(**values)


def for_page() -> dict[str, dict[str, str]]:
    """The texts the page shows: doc["texts"] (every key but the Python-only views')."""
    return {k: dict(v) for k, v in TEXTS.items() if not k.startswith(VIEW_ONLY)}
