"""The controlled experiment in words: the sentences of `analysis.experiment.compare`'s numbers, and the
label of stage ② of the shown head.

    sentences(e, tokens) -> {zh, en}      e = `experiment.compare`'s dict, tokens = the text's tokens
    scaled_label(applied, shown, lang, scale) -> the stage ② label: "÷√d_k", and "÷T" where a temperature divides
                                           the shown head
"""

from __future__ import annotations

from .head_words import percent
from .texts import text

__all__ = ["sentences", "scaled_label"]


def sentences(e: dict, tokens: list[str]) -> dict:
    """One sentence per language of the numbers of `experiment.compare` (`e`), naming the tokens."""
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


def scaled_label(applied: dict, shown: tuple[int, int], lang: str, scale: str) -> str:
    """Stage ②'s label for the head `shown` (layer, head): ÷√d_k (or not, under no_scaling) and ÷T when a
    temperature is applied to it (`applied`: `Intervention.as_applied`; the interventions limited to another layer
    or head do not change it); `scale` is the factor as printed."""
    applied = dict(applied)
    where, which = applied.pop("layer", None), applied.pop("head", None)
    here = where in (None, shown[0]) and which in (None, shown[1])
    off = here and "no_scaling" in applied
    t = applied.get("temperature", {}).get("t") if here else None
    if t is None:
        return text("tables.scaled_off" if off else "tables.scaled", lang, scale=scale)
    return text("tables.scaled_off_t" if off else "tables.scaled_t", lang, scale=scale, t=f"{t:g}")
