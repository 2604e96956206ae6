"""The tutorial's tables for one head of a real model, drawn with rich from the export dict.

Reads only `export.to_dict`'s output, so the terminal shows exactly the numbers of `--json`.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .summary import PICK_RULE, SINK_LIMIT

MAX_TABLE_TOKENS = 24
"""Longer inputs get the summaries only (tables of hundreds of columns help nobody): use --html."""

TEXT = {
    "zh": {
        "model": "模型：{name}（{kind}，{n_layers} 层 × {n_heads} 个 head，d_model = {d_model}，head 维度 d_k = {head_dim}）",
        "card": "架构：{architecture}；位置编码：{positions}",
        "unknown": "注意：{n} 个 token 中有 {count} 个是分词器不认识的（标为 ⟨?⟩）。{message}",
        "tokens": "分词（{n} 个 token）：",
        "selected": "显示：第 {layer} 层，第 {head} 个 head。",
        "chosen": "由你指定",
        "intervention": "干预：{items}",
        "only": "只在 {where}", "no_scaling": "关闭 ÷√d_k", "no_causal": "关闭因果 mask", "temperature": "softmax 温度 T = {t:g}",
        "scores": "① 分数 QKᵀ", "scaled": "② ÷√d_k（乘以 {scale:.4g}）", "mask": "③ 可见性（1 = 可以看，0 = 不能看）",
        "masked": "④ 加 mask（−inf）", "weights": "⑤ softmax 权重（%）",
        "top": "每个位置最关注的 token：", "row": "“{q}” → {items}",
        "predict": "模型预测的下一个 token：", "summary": "各 head 概览：平均熵（bit，越小越集中）；* = ≥50% 注意力停在第一个 token 上",
        "too_long": "输入有 {n} 个 token，超过 {limit}：终端只显示概览；用 --html 查看完整交互报告。",
        "layer": "层", "head": "head",
    },
    "en": {
        "model": "Model: {name} ({kind}, {n_layers} layers × {n_heads} heads, d_model = {d_model}, head dim d_k = {head_dim})",
        "card": "Architecture: {architecture}; positions: {positions}",
        "unknown": "Note: {count} of {n} tokens are unknown to the tokenizer (marked ⟨?⟩). {message}",
        "tokens": "Tokens ({n}):",
        "selected": "Showing layer {layer}, head {head}.",
        "chosen": "chosen by you",
        "intervention": "Intervention: {items}",
        "only": "only in {where}", "no_scaling": "÷√d_k switched off", "no_causal": "causal mask switched off",
        "temperature": "softmax temperature T = {t:g}",
        "scores": "(1) scores QKᵀ", "scaled": "(2) ÷√d_k (times {scale:.4g})", "mask": "(3) visibility (1 = may look, 0 = may not)",
        "masked": "(4) masked (−inf)", "weights": "(5) softmax weights (%)",
        "top": "What each position attends to most:", "row": "\"{q}\" → {items}",
        "predict": "The model's next-token prediction:", "summary": "Heads at a glance: mean entropy (bits, lower = more concentrated); * = >= 50% on the first token",
        "too_long": "The input has {n} tokens, more than {limit}: the terminal shows summaries only; use --html for the full report.",
        "layer": "layer", "head": "head",
    },
}


def render(doc: dict, console: Console, lang: str = "zh") -> None:
    t = TEXT[lang]
    m = doc["model"]
    console.print(t["model"].format(**m))
    if m.get("architecture"):
        console.print(t["card"].format(**m), markup=False)
    tokens = doc["tokens"]
    unknown = doc.get("unknown") or {"count": 0, "positions": [], "message": ""}
    marked = [f"{tok}⟨?⟩" if i in set(unknown["positions"]) else tok for i, tok in enumerate(tokens)]
    console.print(t["tokens"].format(n=len(tokens)), " / ".join(marked), markup=False)
    if unknown["count"]:
        console.print(t["unknown"].format(n=len(tokens), **unknown), markup=False, style="yellow")
    i = doc["intervention"]
    changes = ([t["no_scaling"]] if not i["scaling"] else []) + ([t["no_causal"]] if not i["causal"] else []) + \
        ([t["temperature"].format(t=i["temperature"])] if i["temperature"] != 1 else [])
    if changes and ("layer" in i or "head" in i):
        changes.append(t["only"].format(where=" ".join(f"{k} {i[k]}" for k in ("layer", "head") if k in i)))
    if changes:
        console.print(t["intervention"].format(items="，".join(changes) if lang == "zh" else ", ".join(changes)))
    sel = doc["selected"]
    reason = PICK_RULE[lang] if sel["rule"] == "auto" else t["chosen"] if sel["rule"] is None else sel["rule"]
    console.print(t["selected"].format(**sel), f"({reason})")
    if doc["prediction"]:
        console.print(t["predict"], "  ".join(f"{p['token']} {p['prob']:.1%}" for p in doc["prediction"]), markup=False)
    _summary_grid(doc, console, t)
    if len(tokens) > MAX_TABLE_TOKENS or "stages" not in doc["layers"][sel["layer"]]["heads"][sel["head"]]:
        console.print(t["too_long"].format(n=len(tokens), limit=MAX_TABLE_TOKENS))
        return
    layer = doc["layers"][sel["layer"]]
    stages = layer["heads"][sel["head"]]["stages"]
    console.print(_matrix(t["scores"], tokens, stages["scores"], "{:.2f}"))
    console.print(_matrix(t["scaled"].format(scale=layer["scale"]), tokens, stages["scaled"], "{:.2f}"))
    console.print(_matrix(t["mask"], tokens, layer["visible"], "{:d}"))
    console.print(_matrix(t["masked"], tokens, stages["masked"], "{:.2f}"))
    console.print(_matrix(t["weights"], tokens, [[w * 100 for w in row] for row in stages["weights"]], "{:.1f}"))
    console.print(t["top"])
    for q, row in zip(tokens, stages["weights"]):
        best = sorted(range(len(row)), key=lambda j: -row[j])[:3]
        items = ", ".join(f"{tokens[j]} {row[j]:.0%}" for j in best if row[j] > 0)
        console.print("  " + t["row"].format(q=q, items=items), markup=False)


def _matrix(title: str, tokens: list[str], values, fmt: str) -> Table:
    table = Table("Query \\ Key", *map(escape, tokens), title=title, title_justify="left", show_edge=False,
                  header_style="bold")
    for q, row in zip(tokens, values):
        table.add_row(escape(q), *(_cell(x, fmt) for x in row))
    return table


def _cell(x, fmt: str) -> str:
    if x == "-inf":
        return "[red]−inf[/red]"
    text = fmt.format(x)
    return f"[dim]{text}[/dim]" if x == 0 else text


def _summary_grid(doc: dict, console: Console, t: dict) -> None:
    console.print(t["summary"])
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    for name in [t["layer"], *(f"H{h}" for h in range(doc["model"]["n_heads"]))]:
        table.add_column(name, no_wrap=True, justify="right", min_width=4)
    sel = doc["selected"]
    for l, heads in enumerate(doc["summaries"]):
        cells = []
        for h, s in enumerate(heads):
            cell = f"{s['entropy']:.1f}" + ("*" if s["first_token"] >= SINK_LIMIT else "")
            cells.append(f"[reverse]{cell}[/reverse]" if (l, h) == (sel["layer"], sel["head"]) else cell)
        table.add_row(str(l), *cells)
    console.print(table)
