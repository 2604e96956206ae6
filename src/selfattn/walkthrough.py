"""`selfattn walkthrough`: the tutorial "Self-Attention 是什么", executed step by step.

`build(lang, d_k, seed)` computes every number with `selfattn.reference` and returns one
plain dict (the content); `selfattn.render.print_walkthrough.render(doc, console)` draws it with rich,
and `--json` prints the same dict. One source, two views. Imports no torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import checks
from . import reference as R
from .files import json_float

TOKENS = ["一只", "蓝色", "怪兽", "走进", "森林"]

TUTORIAL_SCORES = np.array(
    [
        [2.4, -0.6, 0.2, -1.1, -0.8],
        [0.8, 2.7, 1.9, -0.4, 0.1],
        [1.4, 3.1, 3.5, 0.2, 0.4],
        [0.5, 0.7, 3.4, 2.9, 1.8],
        [0.2, 0.6, 2.3, 3.6, 3.0],
    ]
)
"""The score table QKᵀ exactly as the tutorial gives it (rows: Query, columns: Key)."""

FEATURES = {"zh": ["数量", "颜色", "角色", "动作", "地点"], "en": ["quantity", "colour", "creature", "action", "place"]}
"""What each token means on its own (the tutorial: 一只：数量, 蓝色：颜色, …): the value vectors."""

DEFAULT_D_K = 4
MAX_D_K = 1 << 20
"""Largest d_k accepted: far beyond any head, and √d_k stays an ordinary float."""
RANDOM_SHAPE = (10, 128)  # the tutorial's 10 tokens × 128 dims

TEXT = {
    "zh": {
        "title": "Self-Attention 是什么 —— 逐步执行",
        "tokens": "输入：一只 / 蓝色 / 怪兽 / 走进 / 森林。每个 token 单独看只有自己的含义：",
        "scores": "① 注意力分数 QKᵀ（教程中的表）：第 i 行 = 第 i 个位置的 Query 与每个 Key 的匹配程度。",
        "scaled": "② 缩放：分数 ÷ √d_k。教程的表没有给出 d_k；这里取 d_k = {d_k}（一个小 head），√d_k = {root:.4g}。",
        "mask": "③ 因果可见性（1 = 可以看，0 = 不能看）：每个位置只能看自己和前面的 token。",
        "masked": "④ 加 mask：不能看的位置设为 −inf（不是 0），这样 softmax 之后权重才真正为 0。",
        "weights": "⑤ softmax（按行）：每行之和为 1，未来位置的权重恰好为 0。",
        "output": "⑥ 加权求和 weights · V：这里让每个 token 的 V 只携带它自己的含义（单位向量），"
        "于是输出的每一行显示该位置融合了哪些信息。",
        "top": "“{q}”最关注：{items}",
        "softmax": "⑦ 为什么是 −inf 而不是 0（教程的两个 softmax 例子，现场计算）：",
        "random": "⑧ 随机权重上的一次完整计算（seed = {seed}）：形状的变化",
        "checks": "检查：每行权重之和 = 1 的最大偏差 {sum_dev:.2e}；未来位置权重的最大值 {future_max}；"
        "输出形状 {out_shape} 与输入形状 {in_shape} 相同。",
        "query_key": "Query \\ Key",
        "position_feature": "位置 \\ 含义",
        "last_row": "最后一个位置（第 10 行）的权重：",
        "row_sum": "行和",
        "shape_of": "形状",
        "feature": "含义",
        "token": "token",
        "step": "步骤",
        "input": "输入",
        "result": "结果",
    },
    "en": {
        "title": "What is Self-Attention — executed step by step",
        "tokens": "Input: 一只 / 蓝色 / 怪兽 / 走进 / 森林 (a / blue / monster / walks into / forest). "
        "On its own, each token means only itself:",
        "scores": "(1) Attention scores QKᵀ (the tutorial's table): row i = how well query i matches every key.",
        "scaled": "(2) Scaling: scores ÷ √d_k. The tutorial's table gives no d_k; we use d_k = {d_k} "
        "(a small head), so √d_k = {root:.4g}.",
        "mask": "(3) Causal visibility (1 = may look, 0 = may not): each position sees itself and earlier tokens.",
        "masked": "(4) Masking: positions that may not be seen become −inf (not 0), so softmax gives them exactly 0.",
        "weights": "(5) softmax by row: each row sums to 1, future positions get exactly 0.",
        "output": "(6) Weighted sum weights · V: here each token's V carries only its own meaning (a unit vector), "
        "so each output row shows which meanings that position has gathered.",
        "top": '"{q}" attends most to: {items}',
        "softmax": "(7) Why −inf and not 0 (the tutorial's two softmax examples, computed):",
        "random": "(8) One full pass on random weights (seed = {seed}): how the shapes change",
        "checks": "Checks: largest deviation of a row sum from 1: {sum_dev:.2e}; largest weight on a future "
        "position: {future_max}; output shape {out_shape} equals input shape {in_shape}.",
        "query_key": "Query \\ Key",
        "position_feature": "position \\ meaning",
        "last_row": "Weights of the last position (row 10):",
        "row_sum": "row sum",
        "shape_of": "shape",
        "feature": "meaning",
        "token": "token",
        "step": "step",
        "input": "input",
        "result": "result",
    },
}

LANGS = tuple(TEXT)


def build(lang: str = "zh", d_k: int = DEFAULT_D_K, seed: int = 0) -> dict:
    """Compute the whole walkthrough. Every number comes from `selfattn.reference`."""
    if lang not in TEXT:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    checks.integer("d_k", d_k, low=1, high=MAX_D_K)
    checks.integer("seed", seed, low=0)
    t = TEXT[lang]
    features = FEATURES[lang]
    n = len(TOKENS)

    scaled = R.scale_scores(TUTORIAL_SCORES, d_k)
    visible = R.causal_mask(n)
    masked = R.apply_mask(scaled, visible)
    weights = R.softmax(masked)
    values = np.eye(n)  # V: token i carries feature i
    output = R.weighted_sum(weights, values)

    def table(values, columns=TOKENS, rows=TOKENS, corner=t["query_key"]):
        return {"corner": corner, "rows": list(rows), "columns": list(columns), "values": _jsonable(values)}

    top: list[dict[str, Any]] = []
    for i, q in enumerate(TOKENS):
        order = np.argsort(-weights[i], kind="stable")[: min(3, i + 1)]
        top.append({"query": q, "keys": [{"token": TOKENS[j], "weight": float(weights[i, j])} for j in order]})

    with_zero = R.softmax([2.0, 0.0, 0.0])
    with_inf = R.softmax([2.0, -np.inf, -np.inf])

    rng = np.random.default_rng(seed)
    L, D = RANDOM_SHAPE
    x = rng.standard_normal((L, D))
    w_q, w_k, w_v = (rng.standard_normal((D, D)) / np.sqrt(D) for _ in range(3))
    trace = R.self_attention(x, w_q, w_k, w_v, causal=True)
    future = trace.weights[~trace.mask]
    shapes = [
        ("X", trace.x.shape),
        ("W_Q, W_K, W_V", w_q.shape),
        ("Q = XW_Q", trace.q.shape),
        ("K = XW_K", trace.k.shape),
        ("V = XW_V", trace.v.shape),
        ("QKᵀ", trace.scores.shape),
        ("÷√d_k", trace.scaled.shape),
        ("mask", trace.mask.shape),
        ("softmax", trace.weights.shape),
        ("weights · V", trace.output.shape),
    ]

    return {
        "lang": lang,
        "title": t["title"],
        "tokens": TOKENS,
        "d_k": d_k,
        "sections": [
            {
                "id": "tokens",
                "text": t["tokens"],
                "table": {
                    "corner": t["token"],
                    "rows": TOKENS,
                    "columns": [t["feature"]],
                    "values": [[f] for f in features],
                },
            },
            {"id": "scores", "text": t["scores"], "table": table(TUTORIAL_SCORES)},
            {"id": "scaled", "text": t["scaled"].format(d_k=d_k, root=np.sqrt(d_k)), "table": table(scaled)},
            {"id": "mask", "text": t["mask"], "table": table(visible.astype(int))},
            {"id": "masked", "text": t["masked"], "table": table(masked)},
            {
                "id": "weights",
                "text": t["weights"],
                "table": table(np.column_stack([weights, weights.sum(1)]), columns=[*TOKENS, t["row_sum"]]),
            },
            {
                "id": "output",
                "text": t["output"],
                "table": table(output, columns=features, corner=t["position_feature"]),
                "top": top,
                "top_lines": [
                    t["top"].format(q=e["query"], items=", ".join(f"{k['token']} {k['weight']:.0%}" for k in e["keys"]))
                    for e in top
                ],
            },
            {
                "id": "softmax",
                "text": t["softmax"],
                "examples": [
                    {"scores": _jsonable([2.0, 0.0, 0.0]), "softmax": _jsonable(with_zero)},
                    {"scores": _jsonable([2.0, -np.inf, -np.inf]), "softmax": _jsonable(with_inf)},
                ],
            },
            {
                "id": "random",
                "text": t["random"].format(seed=seed),
                "shapes": [{"step": name, "shape": list(shape)} for name, shape in shapes],
                "checks": {
                    "row_sum_max_deviation": float(np.max(np.abs(trace.weights.sum(1) - 1))),
                    "future_weight_max": float(future.max(initial=0.0)),
                    "input_shape": list(trace.x.shape),
                    "output_shape": list(trace.output.shape),
                },
                "last_row_weights": _jsonable(trace.weights[-1]),
            },
        ],
    }


def _jsonable(a):
    """Nested lists of floats; ±inf become the strings "-inf"/"inf" (`selfattn.files.json_float`)."""
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 0:
        return json_float(a)
    return [_jsonable(x) for x in a]
