"""A controlled experiment: the same text with and without an intervention, compared on one head.

    compare(base, changed, layer, head, prediction_before, prediction_after) -> dict

Both traces are of the same tokens. The numbers compared, for head (layer, head):

    entropy       mean entropy over rows that can see >= 2 tokens (bits), before → after
    future        mean weight on keys after the query (j > i), before → after; and the row that gives
                  the future the most (its token, its share, the future tokens it reaches)
    top           the most likely next token before → after (decoders)

and one sentence in each language says it, with those numbers. An intervention limited to one head of one
layer leaves the layers below unchanged, so that head's X is the same in both traces and only the
changed step differs; an intervention in every layer changes X of the layers above the first as well.
"""

from __future__ import annotations

import torch

from ..capture.trace import ModelTrace
from .heads import percent
from .summary import head_summary

__all__ = ["compare"]


def compare(
    base: ModelTrace,
    changed: ModelTrace,
    layer: int,
    head: int,
    prediction_before: list[dict],
    prediction_after: list[dict],
) -> dict:
    if base.tokens != changed.tokens:
        raise ValueError("an experiment compares one text with and without an intervention; the tokens differ")
    before = head_summary(base.layers[layer], head)
    after = head_summary(changed.layers[layer], head)
    w0 = base.layers[layer].stages(head, weighted=False)["weights"]  # (L, L)
    w1 = changed.layers[layer].stages(head, weighted=False)["weights"]  # (L, L)
    L = w0.shape[0]
    future = torch.ones(L, L, dtype=torch.bool).triu(1)  # (L, L) True where j > i
    f0, f1 = (w0 * future).sum(-1), (w1 * future).sum(-1)  # (L,) weight on the future, per row
    row = int(torch.argmax(f1))
    reached = [j for j in range(row + 1, L) if float(w1[row, j]) > 0]
    top0 = prediction_before[0] if prediction_before else None
    top1 = prediction_after[0] if prediction_after else None
    out = {
        "layer": layer,
        "head": head,
        "scope": "model" if changed.intervention.layer is None else "layer",
        "same_x": bool(torch.equal(base.layers[layer].x, changed.layers[layer].x)),
        "entropy": [before["entropy"], after["entropy"]],
        "future": [float(f0.mean()), float(f1.mean())],
        "future_row": {"query": row, "weight": float(f1[row]), "keys": reached},
        "top": [top0, top1],
    }
    out["text"] = _sentences(out, changed.tokens)
    return out


def _sentences(e: dict, tokens: list[str]) -> dict:
    e0, e1 = (f"{x:.2f}" for x in e["entropy"])
    zh = [f"这个 head 的平均熵 {e0} → {e1} bit"]
    en = [f"this head's mean entropy {e0} → {e1} bits"]
    r = e["future_row"]
    if r["weight"] >= 0.005:
        keys_zh = "、".join(tokens[k] for k in r["keys"])
        keys_en = ", ".join(tokens[k] for k in r["keys"])
        zh.append(f"“{tokens[r['query']]}”把 {percent(r['weight'])} 给了未来的 token（{keys_zh}）")
        en.append(f"{tokens[r['query']]} gives {percent(r['weight'])} to the future tokens {keys_en}")
    else:
        zh.append("没有权重落在未来的 token 上")
        en.append("no weight reaches a future token")
    t0, t1 = e["top"]
    if t0 and t1:
        zh.append(f"预测的下一个 token：{t0['token']} {percent(t0['prob'])} → {t1['token']} {percent(t1['prob'])}")
        en.append(
            f"the predicted next token: {t0['token']} {percent(t0['prob'])} → {t1['token']} {percent(t1['prob'])}"
        )
    if e["scope"] == "model":
        zh.append("干预作用于每一层，所以预测也可能改变")
        en.append("the intervention acts in every layer, so the prediction may change")
    elif e["same_x"]:
        zh.append("这一层的输入 X 没有变，只有被干预的这一步不同")
        en.append("this layer's input X is unchanged: only the changed step differs")
    else:
        zh.append("下面的层也被干预了，所以这一层的输入 X 也变了")
        en.append("the layers below were changed too, so this layer's input X differs as well")
    return {"zh": "；".join(zh) + "。", "en": "; ".join(en) + "."}
