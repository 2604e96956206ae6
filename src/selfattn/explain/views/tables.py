"""The tutorial's tables for one head of a real model, drawn with rich from the export dict.

Reads only `export.to_dict`'s output, so the terminal shows exactly the numbers of `--json`.
Layers, heads and positions are numbered from 0, said once at the top, the same in zh and en and in
the page. Every minus sign is "−" (U+2212), and a number that rounds to zero is printed without a
sign. Wide matrices are split by columns so every table fits the console (80 columns included).
Nothing from the model or the text (a folder name, a token) is ever read as rich markup.
"""

from __future__ import annotations

import math

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...terminal import printable
from ...walkthrough import FEATURES as MEANINGS  # the walkthrough's meanings, one per relations.MEANING_ROLES
from .heads import PICK_RULE, percent
from .relations import MEANING_ROLES, roles
from .summary import SINK_LIMIT

MAX_TABLE_TOKENS = 24
"""Longer inputs get the summaries only (tables of hundreds of columns help nobody): use --html."""
MINUS = "−"
TOP_DIMENSIONS = 3
"""A long vector is summarised by its norm and its largest dimensions (the JSON holds all of them)."""
LABEL_WIDTH = 8
"""Characters of a row label (a query token) before it is cut."""

TEXT = {
    "zh": {
        "model": "模型：{name}（{kind}，{n_layers} 层 × {n_heads} 个 head，d_model = {d_model}，"
        "head 维度 d_k = {head_dim}）",
        "card": "架构：{architecture}；位置编码：{positions}",
        "numbering": "编号：层、head 和 token 位置都从 0 起。",
        "unknown": "注意：{n} 个 token 中有 {count} 个是分词器不认识的（标为 ⟨?⟩）。{hint}",
        "tokens": "分词（{n} 个 token）：",
        "selected": "显示：层 {layer} · head {head}（{reason}）",
        "does": "这个 head 在做什么：{text}",
        "chosen": "由你指定",
        "within layer": "在这一层里自动选择",
        "auto_short": "自动选择",
        "within head": "为这个 head 自动选择层",
        "intervention": "干预：{items}",
        "only": "只在{where}",
        "no_scaling": "关闭 ÷√d_k",
        "no_causal": "关闭因果 mask",
        "temperature": "softmax 温度 T = {t:g}",
        "where": "层 {layer}",
        "where_head": " · head {head}",
        "experiment": "对照实验（同一句话，有干预 vs 无干预）：{text}",
        "scores": "① 分数 QKᵀ",
        "scaled": "② ÷√d_k（乘以 {scale}）",
        "scaled_off": "② 不除以 √d_k（乘以 {scale}）",
        "mask": "③ 可见性（1 = 可以看，0 = 不能看）",
        "mask_off": "③ 可见性（因果 mask 已关闭：1 = 可以看）",
        "masked": "④ 加 mask（−inf）",
        "weights": "⑤ softmax 权重（%）",
        "meaning": "⑥ ·V 当作“含义”：若每个 token 的 V 只携带它自己的含义（教程的单位向量），"
        "输出的每一行就是各含义的权重（%）",
        "other": "其他",
        "first": "首 token",
        "vectors": "⑦ 输出：Σ w·V（这个 head）、注意力层输出、这一层的输出"
        "（每行：长度 ‖·‖ 和最大的 {k} 个维度；完整数字见 --json）",
        "col_weighted": "Σ w·V",
        "col_attn": "注意力层输出",
        "col_output": "这一层的输出",
        "top": "每个位置最关注的 token：",
        "row": "“{q}” → {items}",
        "bos": "注：{token} 是句首的特殊 token。用不上的注意力常常“停”在这里：这个 head 平均给它 {selected}，"
        "所有 head 平均 {mean}。",
        "predict": "模型预测的下一个 token：",
        "summary": "各 head 概览：平均熵（bit，越小越集中）；* = ≥50% 注意力停在第一个 token 上；> = 当前显示",
        "heads": "每个 head 在这句话上做什么：",
        "head_line": "  层 {layer} · head {head}：{text}",
        "search": "head 搜索：“{q}”（位置 {i}）→“{k}”（位置 {j}）的权重，从大到小：",
        "search_line": "  层 {layer} · head {head}：{w}",
        "too_long": "输入有 {n} 个 token，超过 {limit}：终端只显示概览；用 --html 查看完整交互报告。",
        "layer": "层",
        "head": "head",
        "corner": "查询 \\ 键",
        "corner_meaning": "位置 \\ 含义",
        "decoder": "解码器",
        "encoder": "编码器",
    },
    "en": {
        "model": "Model: {name} ({kind}, {n_layers} layers × {n_heads} heads, d_model = {d_model}, "
        "head dim d_k = {head_dim})",
        "card": "Architecture: {architecture}; positions: {positions}",
        "numbering": "Numbering: layers, heads and token positions count from 0.",
        "unknown": "Note: {count} of {n} tokens are unknown to the tokenizer (marked ⟨?⟩). {hint}",
        "tokens": "Tokens ({n}):",
        "selected": "Showing layer {layer} · head {head} ({reason})",
        "does": "What this head does: {text}",
        "chosen": "chosen by you",
        "within layer": "picked within this layer",
        "auto_short": "picked automatically",
        "within head": "layer picked for this head",
        "intervention": "Intervention: {items}",
        "only": "only in {where}",
        "no_scaling": "÷√d_k switched off",
        "no_causal": "causal mask switched off",
        "temperature": "softmax temperature T = {t:g}",
        "where": "layer {layer}",
        "where_head": " · head {head}",
        "experiment": "Controlled experiment (the same text with and without the intervention): {text}",
        "scores": "(1) scores QKᵀ",
        "scaled": "(2) ÷√d_k (times {scale})",
        "scaled_off": "(2) no ÷√d_k (times {scale})",
        "mask": "(3) visibility (1 = may look, 0 = may not)",
        "mask_off": "(3) visibility (causal mask off: 1 = may look)",
        "masked": "(4) masked (−inf)",
        "weights": "(5) softmax weights (%)",
        "meaning": "(6) ·V as \"meanings\": if each token's V carried only its own meaning (the tutorial's unit "
        "vectors), each output row would be these weights per meaning (%)",
        "other": "other",
        "first": "1st token",
        "vectors": "(7) output: Σ w·V (this head), attention output, layer output (per row: length ‖·‖ and the {k} "
        "largest dimensions; every number is in --json)",
        "col_weighted": "Σ w·V",
        "col_attn": "attention output",
        "col_output": "layer output",
        "top": "What each position attends to most:",
        "row": '"{q}" → {items}',
        "bos": 'Note: {token} is the special first token. Attention that is not needed elsewhere often "parks" '
        "there: this head gives it {selected} on average, all heads {mean}.",
        "predict": "The model's next-token prediction:",
        "summary": "Heads at a glance: mean entropy (bits, lower = more concentrated); * = >= 50% on the first "
        "token; > = shown",
        "heads": "What each head does on this text:",
        "head_line": "  layer {layer} · head {head}: {text}",
        "search": 'Head search: the weight from "{q}" (position {i}) to "{k}" (position {j}), largest first:',
        "search_line": "  layer {layer} · head {head}: {w}",
        "too_long": "The input has {n} tokens, more than {limit}: the terminal shows summaries only; "
        "use --html for the full report.",
        "layer": "layer",
        "head": "head",
        "corner": "query \\ key",
        "corner_meaning": "position \\ meaning",
        "decoder": "decoder",
        "encoder": "encoder",
    },
}


def number(x, digits: int = 2) -> str:
    """A number with one minus sign "−", never "−0.00"; ±inf as "±inf"."""
    if isinstance(x, str):
        x = float(x)
    if math.isinf(x):
        return "−inf" if x < 0 else "inf"
    text = f"{x:.{digits}f}"
    if float(text) == 0:
        return f"{0:.{digits}f}"
    return text.replace("-", MINUS)


def render(doc: dict, console: Console, lang: str = "zh") -> None:
    t = TEXT[lang]

    def say(*parts, **kw):
        return console.print(
            *(
                printable(p, keep="\n") if isinstance(p, str) else p  # noqa: E731
                for p in parts
            ),
            markup=False,
            **kw,
        )  # never markup, never ESC

    m = doc["model"]
    say(t["model"].format(**(m | {"kind": t.get(m["kind"], m["kind"])})))
    if m.get("architecture"):
        positions = m["positions_zh" if lang == "zh" else "positions"]  # both written by export.model_info
        say(t["card"].format(**(m | {"positions": positions})))
    say(t["numbering"])
    tokens = doc["tokens"]
    unknown = doc.get("unknown") or {"count": 0, "positions": [], "message": ""}
    unknown_at = set(unknown["positions"])
    marked = [f"{tok}⟨?⟩" if i in unknown_at else tok for i, tok in enumerate(tokens)]
    say(t["tokens"].format(n=len(tokens)), " / ".join(marked))
    if unknown["count"]:
        say(t["unknown"].format(n=len(tokens), count=unknown["count"], hint=unknown["hint"][lang]), style="yellow")
    _intervention(doc, say, t, lang)
    sel = doc["selected"]
    if sel["rule"] == "auto":  # the rule is a paragraph: under the head, not wrapped into its name
        say(t["selected"].format(layer=sel["layer"], head=sel["head"], reason=t["auto_short"]))
        say("  " + PICK_RULE[lang], style="dim")
    else:
        reason = t["chosen"] if sel["rule"] is None else t[sel["rule"]]
        say(t["selected"].format(layer=sel["layer"], head=sel["head"], reason=reason))
    described = doc.get("descriptions")
    if described:
        say(t["does"].format(text=described[sel["layer"]][sel["head"]]["text"][lang]), style="bold")
    if doc.get("experiment"):
        say(t["experiment"].format(text=doc["experiment"]["text"][lang]))
    if doc["prediction"]:
        say(t["predict"], "  ".join(f"{p['token']} {p['prob']:.1%}" for p in doc["prediction"]))
    _summary_grid(doc, console, t)
    if described:
        say(t["heads"])
        for l, heads in enumerate(described):
            for h, d in enumerate(heads):
                say(t["head_line"].format(layer=l, head=h, text=d["text"][lang]))
    if doc.get("search"):
        s = doc["search"]
        say(t["search"].format(q=tokens[s["query"]], i=s["query"], k=tokens[s["key"]], j=s["key"]))
        for r in s["heads"]:
            say(t["search_line"].format(layer=r["layer"], head=r["head"], w=f"{100 * r['weight']:.1f}%"))
    if doc.get("first_token") and doc["summaries"][sel["layer"]][sel["head"]]["rows"]:
        ft = doc["first_token"]
        say(t["bos"].format(token=ft["token"], selected=percent(ft["selected"]), mean=percent(ft["mean"])))
    layer = doc["layers"][sel["layer"]]
    head = layer.get("heads", [{}] * (sel["head"] + 1))[sel["head"]]
    if len(tokens) > MAX_TABLE_TOKENS or "stages" not in head:
        say(t["too_long"].format(n=len(tokens), limit=MAX_TABLE_TOKENS))
        return
    _stages(doc, console, t, lang, layer, head)


def _intervention(doc: dict, say, t: dict, lang: str) -> None:
    i = doc["intervention"]
    changes = (
        ([t["no_scaling"]] if not i["scaling"] else [])
        + ([t["no_causal"]] if not i["causal"] else [])
        + ([t["temperature"].format(t=i["temperature"])] if i["temperature"] != 1 else [])
    )
    if changes and "layer" in i:
        where = t["where"].format(layer=i["layer"]) + (t["where_head"].format(head=i["head"]) if "head" in i else "")
        changes.append(t["only"].format(where=where))
    elif changes and "head" in i:
        changes.append(t["only"].format(where=t["where_head"].format(head=i["head"]).strip(" ·")))
    if changes:
        say(t["intervention"].format(items="，".join(changes) if lang == "zh" else ", ".join(changes)))


def _stages(doc: dict, console: Console, t: dict, lang: str, layer: dict, head: dict) -> None:
    tokens = doc["tokens"]
    stages = head["stages"]
    scale = head.get("scale", layer["scale"])
    visible = head.get("visible", layer["visible"])
    causal = head.get("causal", layer.get("causal", True))
    scaled_title = t["scaled" if doc["intervention"]["scaling"] else "scaled_off"].format(scale=number(scale, 4))
    _matrix(console, t["scores"], t["corner"], tokens, tokens, stages["scores"], number)
    _matrix(console, scaled_title, t["corner"], tokens, tokens, stages["scaled"], number)
    _matrix(console, t["mask" if causal else "mask_off"], t["corner"], tokens, tokens, visible, str)
    _matrix(console, t["masked"], t["corner"], tokens, tokens, stages["masked"], number)
    weights = stages["weights"]
    _matrix(
        console,
        t["weights"],
        t["corner"],
        tokens,
        tokens,
        [[100 * w for w in row] for row in weights],
        lambda x: number(x, 1),
    )
    _meanings(console, t, lang, tokens, weights)
    _vectors(console, t, layer, stages, doc)
    console.print(t["top"], markup=False)
    for q, row in zip(tokens, weights, strict=False):
        best = sorted(range(len(row)), key=lambda j: -row[j])[:3]
        items = ", ".join(f"{tokens[j]} {percent(row[j])}" for j in best if row[j] > 0)
        console.print("  " + t["row"].format(q=q, items=items), markup=False)


def _meanings(console: Console, t: dict, lang: str, tokens: list[str], weights) -> None:
    """The walkthrough's one-hot-V table on the real tokens: weights summed per meaning (role)."""
    r = roles(tokens)
    columns = list(MEANINGS[lang]) + [t["first"], t["other"]]
    rows = []
    for row in weights:
        sums = [0.0] * len(columns)
        for j, w in enumerate(row):
            col = MEANING_ROLES.index(r[j]) if r[j] in MEANING_ROLES else len(columns) - (2 if j == 0 else 1)
            sums[col] += 100 * w
        rows.append(sums)
    _matrix(
        console, t["meaning"], t["corner_meaning"], tokens, columns, rows, lambda x: number(x, 1), cut_columns=False
    )


def _vectors(console: Console, t: dict, layer: dict, stages: dict, doc: dict) -> None:
    if "weighted" not in stages or "attn_out" not in layer:
        return
    console.print(t["vectors"].format(k=TOP_DIMENSIONS), markup=False)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in (t["corner"].split(" ")[0], t["col_weighted"], t["col_attn"], t["col_output"]):
        table.add_column(Text(header))
    for i, q in enumerate(doc["tokens"]):
        table.add_row(
            Text(_cut(q)), *(Text(_summary(vec[i])) for vec in (stages["weighted"], layer["attn_out"], layer["output"]))
        )
    console.print(table)


def _summary(values) -> str:
    norm = math.sqrt(sum(float(v) ** 2 for v in values))
    top = sorted(range(len(values)), key=lambda d: -abs(float(values[d])))[:TOP_DIMENSIONS]
    return f"‖{number(norm)}‖ " + " ".join(f"d{d}={number(values[d])}" for d in top)


def _cut(label: str) -> str:
    label = printable(label)
    return label if len(label) <= LABEL_WIDTH else label[: LABEL_WIDTH - 1] + "…"


def _matrix(
    console: Console,
    title: str,
    corner: str,
    rows: list[str],
    columns: list[str],
    values,
    fmt,
    cut_columns: bool = True,
) -> None:
    """One table, split into as many column blocks as the console width needs (token labels cut to LABEL_WIDTH)."""
    cells = [[fmt(x) for x in row] for row in values]
    columns = [_cut(c) for c in columns] if cut_columns else list(columns)
    label = max([cell_len(_cut(r)) for r in rows] + [cell_len(corner)])
    widths = [max([cell_len(c)] + [len(row[j]) for row in cells]) for j, c in enumerate(columns)]
    blocks, start, used = [], 0, label + 3
    for j, w in enumerate(widths):
        if j > start and used + w + 3 > console.width:
            blocks.append((start, j))
            start, used = j, label + 3
        used += w + 3
    blocks.append((start, len(columns)))
    for a, b in blocks:
        name = title if len(blocks) == 1 else f"{title} [{a}–{b - 1}]"
        console.print(name, markup=False)
        table = Table(show_edge=False, header_style="bold", box=box.SIMPLE_HEAD)
        for header in [corner, *columns[a:b]]:
            table.add_column(Text(header), no_wrap=True)
        for r, row in zip(rows, cells, strict=False):
            table.add_row(Text(_cut(r)), *(_cell(x) for x in row[a:b]))
        console.print(table)


def _cell(text: str) -> Text:
    if text == "−inf":
        return Text(text, style="red")
    return Text(text, style="dim" if float(text.replace(MINUS, "-")) == 0 else "")


def _summary_grid(doc: dict, console: Console, t: dict) -> None:
    console.print(t["summary"], markup=False)
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    for name in [t["layer"], *(f"H{h}" for h in range(doc["model"]["n_heads"]))]:
        table.add_column(name, no_wrap=True, justify="right", min_width=4)
    sel = doc["selected"]
    for l, heads in enumerate(doc["summaries"]):
        cells = []
        for h, s in enumerate(heads):
            cell = f"{s['entropy']:.1f}" + ("*" if s["first_token"] >= SINK_LIMIT else "")
            shown = (l, h) == (sel["layer"], sel["head"])
            cells.append(Text((">" if shown else "") + cell, style="reverse" if shown else ""))
        table.add_row(str(l), *cells)
    console.print(table)


__all__ = ["render", "number", "TEXT", "MAX_TABLE_TOKENS"]
