"""The tutorial's tables for one head of a real model, drawn with rich from an `Explanation`.

Reads the Explanation and the functions the page's export and `--json` read it with (`export.card_dict`,
`levels`, `opened_query`, `LayerTrace.stages`), so the terminal shows the numbers they show.
Layers, heads and positions are numbered from 0, said once at the top, the same in zh and en and in
the page. Every minus sign is "−" (U+2212), and a number that rounds to zero is printed without a
sign. Wide matrices are split by columns so every table fits the console (80 columns included).
Nothing from the model or the text (a folder name, a token) is ever read as rich markup.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ...terminal import printable
from ...walkthrough import FEATURES as MEANINGS  # the walkthrough's meanings, one per analysis.roles.ROLES
from ..analysis.relations import WORDS as RELATION_WORDS
from ..analysis.roles import ROLES as MEANING_ROLES
from ..analysis.summary import SINK_LIMIT
from ..analysis.verdicts import every_relation
from ..interventions import REGISTRY
from . import texts
from .contribution_words import field as contribution_field
from .experiment_words import scaled_label
from .export import card_dict, gqa_words, levels, opened_query
from .head_sentences import percent
from .head_words import p_words
from .type_legend import legend
from .vector_summary import TOP_DIMENSIONS

if TYPE_CHECKING:
    from ..result import Explanation

MAX_TABLE_TOKENS = 24
"""Longer inputs get a window of this many rows and keys at most around the row opened on (the page has them all)."""
WINDOW_NUMBER_WIDTH = 6
"""The width of a number the step tables print ("−10.59", "100.0"): what a column needs besides its label."""
WINDOW_MIN = 3
"""The fewest rows and keys a windowed table shows, however narrow the console."""
MINUS = "−"
LABEL_WIDTH = 8
"""Characters of a row label (a query token) before it is cut."""
KIND_KEYS = {"decoder": "common.decoder", "encoder": "common.encoder"}
"""The catalogue's word for each kind of model."""
RULE_KEYS = {
    "within layer": "tables.within_layer",
    "within head": "tables.within_head",
    "intervened": "tables.intervened",
    "ablated": "tables.ablated",
}
"""How the shown head was picked (`Shown.rule`, but "auto" and None), as the catalogue's key."""
LEVEL_KEYS = {"characters": "tables.level_characters", "words": "tables.level_words"}
"""The name of each level of `export.levels`."""


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


def render(
    e: Explanation,
    console: Console,
    lang: str = "zh",
    *,
    evidence: bool = False,
    every_head: bool = False,
) -> None:
    """The explanation `e` as terminal tables, in the order a reader needs them: the model, the tokens and the head
    shown with its sentence; that head's step tables (at any length: a text wider than the console shows the window
    of rows and keys around the row opened on, and says so); then one compact table of every head's type.
    every_head: also every head's sentence (`selfattn explain --every-head`; always in --json); evidence: also every
    credited relation's sentences and weights (`evidence_lines`, `--evidence`)."""

    def t(key: str, **values) -> str:
        return texts.text(key, lang, **values)

    def say(*parts, **kw):
        return console.print(
            *(
                printable(p, keep="\n") if isinstance(p, str) else p  # noqa: E731
                for p in parts
            ),
            markup=False,
            **kw,
        )  # never markup, never ESC

    m = card_dict(e.card)
    say(t("tables.model", **(m | {"kind": t(KIND_KEYS[m["kind"]])})))
    if m.get("architecture"):
        positions = m["positions_zh" if lang == "zh" else "positions"]  # both written by export.card_dict
        arch = m.get("architecture_zh", m["architecture"]) if lang == "zh" else m["architecture"]
        say(t("tables.card", **(m | {"positions": positions, "architecture": arch})))
    _model_words(m, say, t, lang)
    say(t("common.numbering"))
    tokens = list(e.tokens.names)
    unknown = e.tokens.unknown or {"count": 0, "positions": [], "message": ""}
    unknown_at = set(unknown["positions"])
    marked = [f"{tok}⟨?⟩" if i in unknown_at else tok for i, tok in enumerate(tokens)]
    say(t("tables.tokens", n=len(tokens)), " / ".join(marked))
    if unknown["count"]:
        say(t("tables.unknown", n=len(tokens), count=unknown["count"], hint=unknown["hint"][lang]), style="yellow")
    sel = e.shown
    grouped = levels(e.trace, sel.layer, sel.head) if e.trace.pieces is not None else None
    _token_notes(e, grouped, say, t)
    applied = e.trace.intervention.as_applied()
    _intervention(applied, say, t, lang)
    if sel.rule == "auto":  # the rule is a paragraph: under the head, not wrapped into its name
        say(t("tables.selected", layer=sel.layer, head=sel.head, reason=t("tables.auto_short")))
        say("  " + texts.text("heads.pick_rule", lang), style="dim")
    else:
        reason = t("tables.chosen") if sel.rule is None else t(RULE_KEYS[sel.rule])
        say(t("tables.selected", layer=sel.layer, head=sel.head, reason=reason))
    described = e.answers.descriptions
    say(t("common.does", text=described[sel.layer][sel.head]["text"][lang]), style="bold")
    if e.compared is not None and "text" in e.compared:  # compared with the text without the intervention
        say(t("tables.experiment", text=e.compared["text"][lang]))
    if kv_words(m, sel.head, lang):
        say("  " + kv_words(m, sel.head, lang), style="dim")
    if e.predictions:
        say(t("tables.predict"), "  ".join(f"{p.shown} {p.prob:.1%}" for p in e.predictions))
    if e.first_token and e.answers.summaries[sel.layer][sel.head]["rows"]:
        ft = e.first_token
        say(t("tables.bos", token=ft["token"], selected=percent(ft["selected"]), mean=percent(ft["mean"])))
    if window_size(tokens, console, t) < len(tokens):  # wider than the console: a window of it
        _window(e, tokens, console, t, say, lang)
    else:
        _stages(e, grouped, tokens, console, t, lang)
    if e.search is not None:
        s = e.search
        say(t("tables.search", q=tokens[s["query"]], i=s["query"], k=tokens[s["key"]], j=s["key"]))
        for r in s["heads"]:
            say(t("tables.search_line", layer=r["layer"], head=r["head"], w=f"{100 * r['weight']:.1f}%"))
    _type_grid(e, console, t, lang)
    if every_head:
        say(t("tables.heads"))
        for l, heads in enumerate(described):
            for h, d in enumerate(heads):
                say(t("tables.head_line", layer=l, head=h, text=d["text"][lang]))
    else:
        say(t("tables.every_head_hint"), style="dim")
    if evidence:
        for line in evidence_lines(described, lang):
            say(line)


def window_size(tokens: list[str], console: Console, t) -> int:
    """How many rows and keys of the shown head's step tables the console shows in one block of columns: every token
    when the whole table fits (and there are at most MAX_TABLE_TOKENS), else the most that fit with two columns kept
    for ⟨outside⟩ and a sink (at least WINDOW_MIN). tokens: as every view names them (`Tokens.names`)."""
    label = max([cell_len(_cut(x)) for x in tokens] + [cell_len(t("tables.corner"))]) + 3
    widths = [max(cell_len(_cut(x)), WINDOW_NUMBER_WIDTH) + 3 for x in tokens]
    if len(tokens) <= MAX_TABLE_TOKENS and label + sum(widths) <= console.width:
        return len(tokens)
    return max(WINDOW_MIN, min(MAX_TABLE_TOKENS, (console.width - label) // max(widths) - 2))


def _opened(e: Explanation, tokens: list[str]) -> dict:
    """The query row the views open on and why (`export.opened_query` of the shown head)."""
    return opened_query(e.trace.layers[e.shown.layer], e.shown.head, tokens, e.shown.link)


def _window(e: Explanation, tokens: list[str], console: Console, t, say, lang: str) -> None:
    """The shown head's step tables for a text wider than the console shows: the rows and keys of a window around
    the row opened on (`opened_query`), `window_size` of them, computed from `e` (float64, the stages of
    `LayerTrace.stages`), with a last column holding the weight each row gives the keys outside the window, so every
    row still reads 100 %; a note says which window and where the whole table is."""
    L = len(tokens)
    W = min(window_size(tokens, console, t), L)
    row = _opened(e, tokens)["row"]
    start = max(0, min(row - W + 2, L - W))  # the opened row second to last: its keys, and the mask of the next
    stop = start + W
    lay = e.trace.layers[e.shown.layer]
    st = lay.stages(e.shown.head, list(range(start, stop)), weighted=False)
    names = tokens[start:stop]
    cut = slice(start, stop)
    say(t("tables.window", first=start, last=stop - 1, n=L, row=row), style="dim")
    scale = lay.head_rule(e.shown.head)[0]
    _matrix(console, t("tables.scores"), t("tables.corner"), names, names, st["scores"][:, cut].tolist(), number)
    scaled_title = _scaled_title(e, lang, scale)
    _matrix(console, scaled_title, t("tables.corner"), names, names, st["scaled"][:, cut].tolist(), number)
    visible = st["mask"][:, cut].int().tolist()
    _matrix(console, t("tables.mask"), t("tables.corner"), names, names, visible, str)
    _matrix(console, t("tables.masked"), t("tables.corner"), names, names, st["masked"][:, cut].tolist(), number)
    weights = st["weights"]
    outside = 1 - weights[:, cut].sum(-1) - (st["sink"] if "sink" in st else 0)
    columns = names + [f"⟨{t('tables.outside')}⟩"] + ([f"⟨{t('common.sink')}⟩"] if "sink" in st else [])
    rows = [
        [100 * float(w) for w in weights[i, cut]]
        + [100 * float(outside[i])]
        + ([100 * float(st["sink"][i])] if "sink" in st else [])
        for i in range(len(names))
    ]
    _matrix(console, t("tables.weights"), t("tables.corner"), names, columns, rows, lambda x: number(x, 1))
    console.print(t("tables.top"), markup=False)
    for i, q in enumerate(names):
        full = weights[i]
        best = sorted(range(L), key=lambda j: -float(full[j]))[:3]
        items = ", ".join(f"{tokens[j]} {percent(float(full[j]))}" for j in best if full[j] > 0)
        console.print("  " + t("tables.row", q=q, items=items), markup=False)


def _scaled_title(e: Explanation, lang: str, scale: float) -> str:
    """Stage ②'s label for the shown head (`experiment_words.scaled_label`), with its factor as printed."""
    return scaled_label(e.trace.intervention.as_applied(), (e.shown.layer, e.shown.head), lang, number(scale, 4))


EVIDENCE_KINDS = {
    "text": "common.evidence_text",
    "control": "common.evidence_control",
    "contrast": "common.evidence_contrast",
}
"""Which sentence an evidence row is on (`held._evidence`'s kind), in words."""


def evidence_lines(descriptions, lang: str) -> list[str]:
    """Every relation credited to a head (`verdicts.every_relation` of `descriptions`, [layer][head] as
    `HeadAnswers.descriptions`), the largest share first:
    its head, its share and what the other words give the same keys (`held`'s baseline), then one line per sentence
    it rests on (the text, its control and contrast sentences): the query word, the key word, the weight, the
    other words' mean weight on that key."""
    found = every_relation(descriptions)
    if not found:
        return [texts.text("tables.evidence_none", lang)]
    out = [texts.text("tables.evidence", lang)]
    for r in found:
        b = r.get("baseline") or {}
        out.append(
            texts.text(
                "tables.evidence_head",
                lang,
                head=f"L{r['layer']}H{r['head']}",
                relation=texts.text(RELATION_WORDS[r["relation"]], lang),
                share=percent(r["score"]),
                c=percent(r["chance"]),
                base=_maybe_percent(b.get("weight")),
                mine=_maybe_percent(b.get("query")),
                rows=b.get("rows", 0),
                p=p_words(b.get("p"), lang) or "–",
            )
        )
        for e in r.get("evidence", ()):
            out.append(
                texts.text(
                    "common.evidence_row",
                    lang,
                    kind=texts.text(EVIDENCE_KINDS[e["kind"]], lang),
                    text=e["text"],
                    query=e["query"],
                    to=e["key"],
                    weight=percent(e["weight"]),
                    base=_maybe_percent(e["baseline"]),
                    n=e["others"],
                    note="" if e["tested"] else texts.text("common.evidence_adjacent", lang),
                )
            )
    return out


def _maybe_percent(x: float | None) -> str:
    return "–" if x is None else percent(x)


def kv_words(m: dict, head: int, lang: str) -> str:
    """Which key/value head query head `head` reads, in words ("" without grouped-query attention); m: the model
    card as `export.card_dict` writes it."""
    if m.get("n_kv_heads", m["n_heads"]) == m["n_heads"] or "kv_of_head" not in m:
        return ""
    return texts.text("gqa.reads", lang, kv=m["kv_of_head"][head], g=m["n_heads"] // m["n_kv_heads"])


def _model_words(m: dict, say, t, lang: str) -> None:
    """What kind of model and tokenizer this is, in words: the encoder note, GQA, the tokenizer's kind (m: the
    card as `export.card_dict` writes it)."""
    if m["kind"] == "encoder":
        say(texts.text("encoder.note", lang))
    gqa = gqa_words(m, lang) if "kv_of_head" in m else ""
    if gqa:
        say(gqa)
    if m.get("tokenizer"):
        say(t("tables.tokenizer", how=texts.text(m["tokenizer"], lang)))
    if m.get("bos"):
        say(m["bos"]["text"][lang])


def _token_notes(e: Explanation, levels: dict | None, say, t) -> None:
    """How to read the token line: a repeated token's position, and the character / word levels (`levels`: the
    shown head's, `export.levels`, or None for a text without pieces)."""
    names, tokens = e.tokens.names, e.tokens.labels
    repeated = next((i for i, n in enumerate(names) if n != tokens[i]), None)
    if repeated is not None:
        say(t("tables.repeated", example=names[repeated], token=tokens[repeated], at=repeated), style="dim")
    if levels and not levels["characters"]["same"]:
        n_chars, n_words = len(levels["characters"]["names"]), len(levels["words"]["names"])
        say(t("tables.levels", n=len(tokens), chars=n_chars, words=n_words), style="dim")


def _intervention(applied: dict, say, t, lang: str) -> None:
    """One line naming each applied intervention (the registry's words) and where it acts (`applied`:
    `Intervention.as_applied`)."""
    applied = dict(applied)
    layer, head = applied.pop("layer", None), applied.pop("head", None)
    changes = [REGISTRY[name].words(lang, values) for name, values in applied.items()]
    if changes and layer is not None:
        where = t("common.layer_n", layer=layer) + (t("tables.where_head", head=head) if head is not None else "")
        changes.append(t("tables.only", where=where))
    elif changes and head is not None:
        changes.append(t("tables.only_head", head=head))
    if changes:
        say(t("tables.intervention", items="，".join(changes) if lang == "zh" else ", ".join(changes)))


def _stages(e: Explanation, levels: dict | None, tokens: list[str], console: Console, t, lang: str) -> None:
    """The shown head's step tables, every row and key (float64, `LayerTrace.stages`), then its weights per character
    and word, per meaning, its contributions, its vectors and each row's largest weights."""
    lay = e.trace.layers[e.shown.layer]
    head = e.shown.head
    stages = lay.stages(head)
    scale, _, visible = lay.head_rule(head)
    change = lay.changed.get(head)
    causal = lay.causal if change is None else change.causal
    _matrix(console, t("tables.scores"), t("tables.corner"), tokens, tokens, stages["scores"].tolist(), number)
    scaled = stages["scaled"].tolist()
    _matrix(console, _scaled_title(e, lang, scale), t("tables.corner"), tokens, tokens, scaled, number)
    mask = visible.int().tolist()
    _matrix(console, t("tables.mask" if causal else "tables.mask_off"), t("tables.corner"), tokens, tokens, mask, str)
    _matrix(console, t("tables.masked"), t("tables.corner"), tokens, tokens, stages["masked"].tolist(), number)
    console.print(_opened(e, tokens)["text"][lang], markup=False, style="dim")
    weights = stages["weights"].tolist()
    sink = lay.sink(head)  # a layer with attention sinks: each row's remainder, its own last column
    columns = tokens + ([f"⟨{t('common.sink')}⟩"] if sink is not None else [])
    extra = [[100 * float(x)] for x in sink] if sink is not None else [[] for _ in weights]
    rows = [[100 * w for w in row] + more for row, more in zip(weights, extra, strict=True)]
    _matrix(console, t("tables.weights"), t("tables.corner"), tokens, columns, rows, lambda x: number(x, 1))
    if sink is not None:
        console.print(t("tables.sink_note"), markup=False, style="dim")
    _levels(levels, console, t, lang)
    roles = list(e.roles) or [None] * len(tokens)
    if any(r is not None for r in roles):  # a text without roles (no Chinese) has no meanings to sum
        _meanings(console, t, lang, roles, weights, tokens)
    _contributions(e, tokens, console, t, lang)
    _vectors(console, t, tokens, stages["weighted"], lay)
    console.print(t("tables.top"), markup=False)
    for q, row in zip(tokens, weights, strict=False):
        best = sorted(range(len(row)), key=lambda j: -row[j])[:3]
        items = ", ".join(f"{tokens[j]} {percent(row[j])}" for j in best if row[j] > 0)
        console.print("  " + t("tables.row", q=q, items=items), markup=False)


def _levels(levels: dict | None, console: Console, t, lang: str) -> None:
    """The shown head's weights per character and per word (`levels`: `export.levels`, None for a text without
    pieces), where a level groups pieces and has few enough groups to print."""
    if not levels:
        return
    previous = None
    for level in ("characters", "words"):
        entry = levels[level]
        if entry["same"] or entry["weights"] is None or len(entry["names"]) > MAX_TABLE_TOKENS:
            continue
        if previous is not None and entry["pieces"] == previous:
            continue  # the words are the characters: one table says it
        previous = entry["pieces"]
        title = t("tables.level_weights", level=t(LEVEL_KEYS[level]), rule=levels["rule"][lang])
        labels = entry["names"]
        rows = [[100 * w for w in row] for row in entry["weights"]]
        _matrix(console, title, t("tables.corner"), labels, labels, rows, lambda x: number(x, 1))


def _meanings(console: Console, t, lang: str, r: list[str | None], weights, labels: list[str]) -> None:
    """The walkthrough's one-hot-V table on the real tokens: weights summed per meaning (`r`: each token's role,
    `Explanation.roles`, the part-of-speech roles of the text's words)."""
    columns = list(MEANINGS[lang]) + [t("common.first_token"), t("common.other")]
    rows = []
    for row in weights:
        sums = [0.0] * len(columns)
        for j, w in enumerate(row):
            col = MEANING_ROLES.index(r[j]) if r[j] in MEANING_ROLES else len(columns) - (2 if j == 0 else 1)
            sums[col] += 100 * w
        rows.append(sums)
    _matrix(
        console,
        t("tables.meaning"),
        t("tables.corner_meaning"),
        labels,
        columns,
        rows,
        lambda x: number(x, 1),
        cut_columns=False,
    )


def _contributions(e: Explanation, tokens: list[str], console: Console, t, lang: str) -> None:
    """Beside the ·V step: the shown head's contribution ‖α·v·W_O‖ per key as a share of each row
    (`views.contribution_words.field`), its sentence where its first token is looked at, and whether the first-token
    type holds on the shares for each head of the layer."""
    c = contribution_field(e, max_len=len(tokens))
    if c is None or "shares" not in c:
        return
    rows = [[100 * x for x in row] for row in c["shares"]]
    _matrix(console, t("tables.contribution"), t("tables.corner"), tokens, tokens, rows, lambda x: number(x, 1))
    if c["text"] is not None:
        console.print(c["text"][lang], markup=False, style="bold")
    if c["first_type"] is None:
        return
    described = e.answers.descriptions
    held = []
    for h, on_shares in enumerate(c["first_type"]):
        on_weights = described[c["layer"]][h].get("scores", {}).get("first")
        if on_weights and on_weights.get("credited"):
            mark = "✓" if on_shares["credited"] else "✗"
            held.append(f"head {h} {percent(on_weights['score'])}→{percent(on_shares['score'] or 0.0)} {mark}")
    if held:
        console.print(t("tables.contribution_first", layer=c["layer"], heads=", ".join(held)), markup=False)


def _vectors(console: Console, t, tokens: list[str], weighted, lay) -> None:
    """Each row's weighted values, the layer's attention output and its output, as norm and top dimensions."""
    console.print(t("tables.vectors", k=TOP_DIMENSIONS), markup=False)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in (
        t("tables.corner").split(" ")[0],
        t("common.weighted"),
        t("common.attn_out"),
        t("common.layer_output"),
    ):
        table.add_column(Text(header))
    vectors = [v.tolist() for v in (weighted, lay.attn_out, lay.output)]
    for i, q in enumerate(tokens):
        table.add_row(Text(_cut(q)), *(Text(_summary(vec[i])) for vec in vectors))
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


def _type_grid(e: Explanation, console: Console, t, lang: str) -> None:
    """Every layer × head's type in one word (its strongest: `descriptions[l][h]["kind"]`, the legend's short name;
    — where no type is clear), * where ≥ SINK_LIMIT of its attention rests on the first token, > the head shown; split
    into blocks of heads so every head fits the console width."""
    console.print(t("tables.types"), markup=False)
    n_heads = e.card.n_heads
    short = legend()["short"]
    opened = (e.shown.layer, e.shown.head)
    described = e.answers.descriptions
    cells = [
        [
            (">" if (l, h) == opened else "")
            + (short[d["kind"]][lang] if d.get("kind") in short else "—")
            + ("*" if s["first_token"] >= SINK_LIMIT else "")
            for h, (s, d) in enumerate(zip(heads, described[l], strict=True))
        ]
        for l, heads in enumerate(e.answers.summaries)
    ]
    label = max(cell_len(t("common.layer")), len(str(len(cells) - 1)))
    width = max([4] + [len(f"H{n_heads - 1}")] + [cell_len(c) for row in cells for c in row])
    per_block = max(1, (console.width - label - 2) // (width + 2))  # each column: its cells, a space, a rule
    for a in range(0, n_heads, per_block):
        b = min(n_heads, a + per_block)
        if n_heads > per_block:
            console.print(f"[H{a}–H{b - 1}]", markup=False, style="dim")
        table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
        for name in [t("common.layer"), *(f"H{h}" for h in range(a, b))]:
            table.add_column(name, no_wrap=True, justify="right", min_width=4)
        for l, row in enumerate(cells):
            shown = [Text(c, style="reverse" if c.startswith(">") else "") for c in row[a:b]]
            table.add_row(str(l), *shown)
        console.print(table)


__all__ = ["render", "number", "MAX_TABLE_TOKENS"]
