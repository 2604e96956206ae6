"""A controlled experiment: the same text with and without an intervention, compared on one head.

    compare(base, changed, layer, head, prediction_before, prediction_after) -> dict
    shown_head(intervention, layer, head) -> (layer, head): the head to show: the one an intervention is limited to
    scaled_label(doc, lang, scale) -> the stage ② label: "÷√d_k", and "÷T" where a temperature divides the shown head

Both traces are of the same tokens. The numbers compared, for head (layer, head):

    entropy       mean entropy over rows that can see >= 2 tokens (bits), before → after
    future        mean weight on keys after the query (j > i), before → after; and the row that gives
                  the future the most (its token, its share, the future tokens it reaches)
    top           the most likely next token before → after (decoders)
    loss          mean next-token cross-entropy over the text (nats), before → after (decoders)
    kl_bits       KL(before ‖ after) of the next-token distribution after the text, in bits (decoders)

and one sentence in each language says it, with those numbers. An intervention limited to one head of one
layer leaves the layers below unchanged, so that head's X is the same in both traces and only the
changed step differs; an intervention in every layer changes X of the layers above the first as well.
"""

from __future__ import annotations

import math

import torch

from ..capture.interventions import Intervention
from ..capture.trace import ModelTrace
from ..views.heads import percent
from ..views.texts import text
from .summary import head_summary

__all__ = ["compare", "shown_head", "scaled_label", "loss", "kl_bits"]


def loss(trace: ModelTrace) -> float | None:
    """Mean next-token cross-entropy over the text (nats, float64); None for an encoder or a single token."""
    if trace.logits is None or len(trace.token_ids) < 2:
        return None
    logits = trace.logits[:-1].double()
    return float(torch.nn.functional.cross_entropy(logits, trace.token_ids[1:].to(logits.device)))


def kl_bits(before: torch.Tensor, after: torch.Tensor) -> float:
    """KL(p ‖ q) in bits of the softmaxes of two logit vectors (V,), in float64."""
    p, q = before.double().log_softmax(-1), after.double().log_softmax(-1)
    return float((p.exp() * (p - q)).sum()) / math.log(2)


def shown_head(intervention: Intervention, layer: int | None, head: int | None) -> tuple[int | None, int | None]:
    """The (layer, head) to show: as asked, else the layer / head the intervention is limited to (so a
    limited intervention shows and describes the head it changed; None: picked by `heads.pick`)."""
    if layer is None and head is None and intervention:
        return intervention.layer, intervention.head
    return layer, head


def first_ablated(intervention: Intervention, layer: int | None, head: int | None, ablate) -> tuple[int, int] | None:
    """The head an ablation opens on (`selfattn explain --ablate`, the app's "ablate"): the first one named,
    when no head is asked and no intervention is limited to one (that one is shown instead); else None."""
    if ablate and shown_head(intervention, layer, head) == (None, None):
        return tuple(ablate[0])
    return None


def scaled_label(doc: dict, lang: str, scale: str) -> str:
    """Stage ②'s label for the shown head: ÷√d_k (or not, under no_scaling) and ÷T when a temperature is
    applied to it (the interventions limited to another layer or head do not change it); `scale` is the
    factor as printed."""
    applied = dict(doc.get("experiment", {}).get("applied", {}))
    where, which = applied.pop("layer", None), applied.pop("head", None)
    sel = doc["selected"]
    here = where in (None, sel["layer"]) and which in (None, sel["head"])
    off = here and "no_scaling" in applied
    t = applied.get("temperature", {}).get("t") if here else None
    if t is None:
        return text("tables.scaled_off" if off else "tables.scaled", lang, scale=scale)
    return text("tables.scaled_off_t" if off else "tables.scaled_t", lang, scale=scale, t=f"{t:g}")


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
        "loss": [loss(base), loss(changed)],
        "kl_bits": None if base.logits is None else kl_bits(base.logits[-1], changed.logits[-1]),
        "ablated": "ablate" in changed.intervention.applied,
    }
    out["text"] = _sentences(out, changed.tokens)
    return out


def _sentences(e: dict, tokens: list[str]) -> dict:
    e0, e1 = (f"{x:.2f}" for x in e["entropy"])
    zh = [f"这个 head 的平均熵 {e0} → {e1} bit"]
    en = [f"this head's mean entropy {e0} → {e1} bits"]
    r = e["future_row"]
    if e["ablated"]:
        zh = ["被消融的 head 权重不变，只是不再把它算出的输出传下去"]
        en = ["an ablated head's weights stay as they were: only the output it passes on is replaced"]
    elif r["weight"] >= 0.005:
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
    if e["kl_bits"] is not None:
        kl = f"{e['kl_bits']:.3f}"
        zh.append(f"下一个 token 的分布变化 KL = {kl} bit")
        en.append(f"the next-token distribution moves by KL = {kl} bits")
    if e["loss"][0] is not None:
        l0, l1 = (f"{x:.3f}" for x in e["loss"])
        zh.append(f"整句的平均交叉熵 {l0} → {l1} nat")
        en.append(f"the text's mean next-token loss {l0} → {l1} nats")
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
