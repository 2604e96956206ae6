"""The sentences of the page's head view, model view and compare view, and of the attention page (zh/en).

They follow the rules of `views.texts` (one `{name}` placeholder syntax, filled by `str.format` here and by
the page's one `fill()`); they live here, beside the views that say them, and join the one table where the
page reads its words (`report.page_texts`, over `TEXTS | VIEW_TEXTS`). Keys are plain words (the page names
them as string literals, which `report.page_texts` finds by `\\w+`).
"""

from __future__ import annotations

__all__ = ["VIEW_TEXTS", "TYPE_KEYS"]

TYPE_KEYS = {
    "previous": "type_previous",
    "next": "type_next",
    "self": "type_self",
    "first": "type_first",
    "duplicate": "type_duplicate",
    "induction": "type_induction",
    "local": "type_local",
    "broad": "type_broad",
}
"""Each head type of `views.head_types` (and "broad") → its label's key."""

VIEW_TEXTS: dict[str, dict[str, str]] = {
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
    "mv_cell": {"zh": "层 {layer} · head {head}", "en": "layer {layer} · head {head}"},
    "mv_untyped": {"zh": "无明显类型", "en": "no clear type"},
    "type_previous": {"zh": "前一个 token", "en": "previous token"},
    "type_next": {"zh": "后一个 token", "en": "next token"},
    "type_self": {"zh": "自己", "en": "itself"},
    "type_first": {"zh": "第一个 token", "en": "first token"},
    "type_duplicate": {"zh": "重复的 token", "en": "duplicate token"},
    "type_induction": {"zh": "归纳（induction）", "en": "induction"},
    "type_local": {"zh": "附近", "en": "local"},
    "type_broad": {"zh": "很分散", "en": "broad"},
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
}
