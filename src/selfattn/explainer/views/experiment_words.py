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
    """One sentence per language of the numbers of `experiment.compare` (`e`), naming the tokens (the catalogue's
    compare.* clauses, joined)."""
    return {lang: _sentence(e, tokens, lang) for lang in ("zh", "en")}


def _sentence(e: dict, tokens: list[str], lang: str) -> str:
    e0, e1 = (f"{x:.2f}" for x in e["entropy"])
    clauses = [text("compare.entropy", lang, before=e0, after=e1)]
    r = e["future_row"]
    if e["ablated"]:
        clauses = [text("compare.ablated", lang)]
    elif r["weight"] >= 0.005:
        keys = text("common.list", lang).join(tokens[k] for k in r["keys"])
        clauses.append(text("compare.future", lang, query=tokens[r["query"]], weight=percent(r["weight"]), keys=keys))
    else:
        clauses.append(text("compare.no_future", lang))
    t0, t1 = e["top"]
    if t0 and t1:
        top = {"p_before": percent(t0["prob"]), "p_after": percent(t1["prob"])}
        clauses.append(text("compare.top", lang, before=t0["token"], after=t1["token"], **top))
    if e["kl_bits"] is not None:
        clauses.append(text("findings.kl", lang, kl=f"{e['kl_bits']:.3f}"))
    if e["loss"][0] is not None:
        l0, l1 = (f"{x:.3f}" for x in e["loss"])
        clauses.append(text("findings.loss", lang, before=l0, after=l1))
    if e["scope"] == "model":
        clauses.append(text("compare.every_layer", lang))
    else:
        clauses.append(text("compare.same_x" if e["same_x"] else "compare.x_differs", lang))
    return text("compare.sentence", lang, clauses=text("common.join", lang).join(clauses))


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
