"""A dataset run's findings in sentences (zh, en; the catalogue's "dataset." keys), each saying over how many of the
prompts it holds: "L0H1 is credited as “prev” on 17 of 20 prompts", "L1H0 recovers 0.412 of the logit difference
on average (95 % CI 0.301 to 0.523); it recovers the most of any head on 12 of 20 prompts".

    sentences(result) -> {"zh": (…), "en": (…)}

Which heads are named: for each head its type held on the most prompts (the NAMED heads held most widely); with
patching the NAMED heads of the largest mean share; with an ablation, its KL and, with target and foil, on how many
prompts the logit difference fell.
"""

from __future__ import annotations

from ..analysis.head_types import REGISTRY
from ..catalogue import LANGS, text
from ..views.findings import name

__all__ = ["NAMED", "sentences"]

NAMED = 5
"""Most heads one kind of sentence names (the rest are in the table, the JSON and the CSV)."""
DIGITS = 3
"""Decimals of a mean and its interval in a sentence."""
BROAD = "broad"
"""The type of a head that attends everywhere: said of nearly every head of a small model, so not named here."""


def _number(x: float | None) -> str:
    return "—" if x is None else f"{x:.{DIGITS}f}"


def _type_word(t: str, lang: str) -> str:
    entry = REGISTRY.get(t)
    return t if entry is None else entry.words["short"][lang]


def _interval(lang: str, mean) -> str:
    """ "0.412 (95 % CI 0.301 to 0.523)", or the mean alone with the reason there is no interval."""
    if mean.low is None:
        return text("dataset.no_interval", lang, mean=_number(mean.mean))
    return text("dataset.interval", lang, mean=_number(mean.mean), low=_number(mean.low), high=_number(mean.high))


def sentences(result) -> dict[str, tuple[str, ...]]:
    """The sentences of a `DatasetResult` (the module doc), in each language."""
    n = result.n
    out: dict[str, tuple[str, ...]] = {}
    held = sorted(
        (
            (-k, h.layer, h.head, t)
            for h in result.heads
            for t, k in h.holds.items()
            if t != BROAD and k == max(v for u, v in h.holds.items() if u != BROAD)
        ),
    )[:NAMED]
    shares = []
    if "patching_recovered" in result.numbers:
        shares = sorted(
            (h for h in result.heads if h.means["patching_recovered"].mean is not None),
            key=lambda h: -h.means["patching_recovered"].mean,
        )[:NAMED]
    kl = result.scalars.get("ablation_kl_bits")
    change = result.scalars.get("ablation_ld_change")
    fell = sum(1 for p in result.prompts if (p.scalars.get("ablation_ld_change") or 0) < 0)
    for lang in LANGS:
        lines = [text("dataset.summary", lang, n=n, model=result.model)]
        if result.resumed:
            lines.append(text("dataset.resumed", lang, k=result.resumed, n=n, out=result.out))
        if not held:
            lines.append(text("dataset.no_type", lang, n=n))
        for minus_k, layer, head, t in held:
            lines.append(text("dataset.holds", lang, head=name(layer, head), type=_type_word(t, lang), k=-minus_k, n=n))
        for h in shares:
            m = h.means["patching_recovered"]
            said = _interval(lang, m)
            lines.append(text("dataset.patching", lang, head=name(h.layer, h.head), share=said, k=h.top, n=n))
        if kl is not None and kl.n:
            heads = ", ".join(name(l, h) for l, h in result.options["ablate"])
            lines.append(text("dataset.ablation", lang, heads=heads, kl=_interval(lang, kl), n=kl.n))
        if change is not None and change.n:
            lines.append(text("dataset.ablation_ld", lang, k=fell, n=change.n, change=_interval(lang, change)))
        out[lang] = tuple(lines)
    return out
