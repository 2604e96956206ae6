"""The experiments interpretability research runs, on any model an `Explainer` holds, each as data and words.

    taxonomy(explainer, text=None)                        every head's types with scores (text + induction probe)
    ablation(explainer, text, heads, mode="zero", target=, foil=, reference=)
                                                          the change in the next-token distribution, the loss and
                                                          the logit difference target − foil
    patching(explainer, clean, corrupted, target=, foil=) the share of the logit difference each head recovers
    logit_lens(explainer, text, position=None)            the top next tokens after every layer at one position
    run(explainer, text, ablate=, patch=, lens=)          the ones asked for, as doc["ablation"|"patching"|"lens"]

Each returns a JSON-ready dict with a "text" {zh, en}: what it found, in a sentence (`views.findings`). The
computations are the capture room's (`capture.patching`, `capture.lens`, `capture.trace`) and the head
types' (`analysis.head_types`, `analysis.heads`); this module turns texts into ids the way the explainer does,
and ids back into readable tokens. Layers and heads are counted from 0, as everywhere.

Every token is shown as a person reads it, as in the export: a predicted token has `shown` beside its
`token` ("␣Mary"), the tokens of a text have `names` ("金鱼@5") beside `tokens`.

The induction probe is `probe`'s (`frame`, `probe_ids`, `probe_bos`, re-exported here): the same probe the
explain sentences and the model view read. A --target token is read without the tokens the tokenizer adds
by itself (`frame`).
"""

from __future__ import annotations

import contextlib
import time

import torch

from .. import checks
from ..limits import MAX_ABLATED_HEADS, MAX_PATCH_TOKENS, SIZES
from . import pieces as _pieces
from . import session as _session
from . import tracing
from .analysis import held, summary
from .analysis import taxonomy as _taxonomy
from .analysis.answers import head_answers
from .analysis.roles import has_roles
from .capture import lens as _lens
from .capture import patching as _patching
from .induction_probe import (
    PROBE_LENGTH,
    PROBE_TRIES,
    frame,
    own_ids,
    probe_bos,
    probe_ids,
    probe_input,
    vocab_size,
)
from .interventions import Intervention
from .views import findings
from .views.export import bos_dict
from .views.head_sentences import describe

__all__ = [
    "PROBE_LENGTH",
    "PROBE_TRIES",
    "frame",
    "token_id",
    "probe_ids",
    "probe_bos",
    "taxonomy",
    "ablation",
    "patching",
    "logit_lens",
    "parse_heads",
    "pairs",
    "run",
]

TOP_K = 5


def _ids(explainer, text: str, cut=None, prepend_bos: bool | None = None) -> tuple[list[str], torch.Tensor, dict]:
    """(token labels, ids (L,), extra model kwargs) of `text`: `cut` (its `Explainer.cut`, made once by the
    pipeline) when given, else cut here with the BOS as `prepend_bos` asks (`Explainer.bos`)."""
    tokens, ids, extra, _ = explainer.cut(_session.check_text(text), prepend_bos) if cut is None else cut
    return list(tokens), torch.as_tensor(ids), extra


def token_id(explainer, token) -> int:
    """The id of one token, given as its text (" Mary", with its leading space) or as an id."""
    if isinstance(token, bool) or not isinstance(token, (str, int)):
        raise TypeError(f"a token must be its text or its id, got {type(token).__name__}")
    if isinstance(token, int):
        n = vocab_size(explainer.model)
        if not 0 <= token < n:
            raise ValueError(f"token id {token} is not in the vocabulary (0 … {n - 1})")
        return token
    ids = own_ids(explainer, token)
    if len(ids) != 1:
        pieces = " / ".join(repr(explainer.decode(i)) for i in ids) or "nothing"
        raise ValueError(f"{token!r} is {len(ids)} tokens ({pieces}), not one: give a single token")
    return ids[0]


def taxonomy(
    explainer,
    text: str | None = None,
    *,
    length: int = PROBE_LENGTH,
    seed: int = 0,
    cache=None,
    prepend_bos: bool | None = None,
    store=None,
) -> dict:
    """Every head's types with their scores: measured on the induction probe (random tokens repeated: the
    content-free behaviour, and the only fair test of induction) and, when `text` is given, on the text
    (its tutorial links included); merged by `taxonomy.merge`. The dict: model, probe {ids, tokens, length,
    seed, bos}, text, roles (whether the text's words have roles), rule, types, heads [layer][head] {type, types
    [{type, score, chance, rows, p, on}], relations, measurable, probe, text} (`verdicts.verdict`): the text's
    verdicts are the explain sentences' (`describe` with this probe), so every view names a head alike.
    cache: a `TraceCache` (an Explanation's) whose traces of the text, its control and the probe are read back.
    prepend_bos: the model's BOS before the text (`Explainer.bos`: None, the model's default); "bos" says what was
    done. The probe puts the model's BOS first wherever the model has one (probe.bos). store: where the probe's
    measures are kept across processes (`tracing.probe`; the command's)."""
    tokens, ids_, _, _ = probe_input(explainer, length, seed=seed)  # NoProbe where the model has none
    ids, tokens = [int(i) for i in ids_.reshape(-1)], list(tokens)
    on_probe = tracing.probe(explainer, length, seed=seed, cache=cache, store=store)
    assert on_probe is not None  # a model without a probe: `probe_input` above raised NoProbe
    described = None
    if text is not None:
        # as `explain` reads the text: with its controls, in one batch
        shown, controls = tracing.trace_with_controls(explainer, text, cache=cache, prepend_bos=prepend_bos)
        described = described_heads(explainer, shown, summary.summaries(shown), controls, on_probe)
    out = _taxonomy.merge(on_probe, described)
    bos = probe_bos(explainer)
    added = sum(len(part) for part in frame(explainer)) + int(bos is not None and bos["added"])
    out |= {
        "model": explainer.name,
        "probe": {"ids": ids, "tokens": tokens, "length": (len(ids) - added) // 2, "seed": seed, "bos": bos},
        "text": text,
        "bos": bos_dict(explainer.bos(prepend_bos)),
        "roles": None if text is None else has_roles(held.words_of(shown, explainer.user_words)),
    }
    out["findings"] = findings.taxonomy_words(out)
    return out


def described_heads(explainer, trace, table, controls, probe) -> list[list[dict]]:
    """Every head of `trace` answered (`analysis.answers.head_answers`, with the explainer's words and grammar) and put
    in words (`views.heads.describe`): [layer][head] {kind, text {zh, en}, types, scores, verdict, …}. table:
    `summary.summaries(trace)`; controls: `tracing.controls(explainer, trace)`; probe: every head's measures on the
    induction probe (None: the text's types only)."""
    answers = head_answers(trace, controls, probe, explainer.user_words, explainer.grammar)
    return describe(trace.tokens, trace.pieces, table, answers, controls[0].tokens if controls else ())


def parse_heads(spec: str) -> list[tuple[int, int]]:
    """ "3.1,5.2" → [(3, 1), (5, 2)] (layer.head, counted from 0); a ValueError naming a bad item. Bounded before it
    is read: at most MAX_ABLATED_HEADS items, each layer below SIZES["layers"] and head below SIZES["heads"]."""
    if not isinstance(spec, str):
        raise TypeError(f"heads must be a string such as '3.1,5.2', got {type(spec).__name__}")
    items = spec.split(",", MAX_ABLATED_HEADS)  # at most one piece more than the limit: the rest is not split
    if len(items) > MAX_ABLATED_HEADS:
        raise ValueError(f"ablate names more than {MAX_ABLATED_HEADS} heads; at most {MAX_ABLATED_HEADS} at once")
    out: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    for item in items:
        parts = item.strip().split(".")
        if len(parts) != 2 or not all(p.isascii() and p.isdecimal() for p in parts):
            raise ValueError(f"a head is LAYER.HEAD, counted from 0 (e.g. 3.1), got {item.strip()!r:.80}")
        for text, (what, most) in zip(parts, (("layer", SIZES["layers"]), ("head", SIZES["heads"])), strict=True):
            if len(text) > len(str(most)) or int(text) >= most:
                raise ValueError(f"{what} {text:.20} of head {item.strip():.50} is past any model's: at most {most}")
        pair = (int(parts[0]), int(parts[1]))
        if pair in seen:
            raise ValueError(f"head {item.strip()} is given twice")
        seen.add(pair)
        out.append(pair)
    return out


def pairs(ablate) -> list[tuple[int, int]]:
    """The heads of an ablation: "L.H,L.H" (`parse_heads`) or [(layer, head), …] of ints, each once, at most
    MAX_ABLATED_HEADS (the list's length is checked before its items are read)."""
    if isinstance(ablate, str):
        return parse_heads(ablate)
    if not isinstance(ablate, (list, tuple)):
        raise TypeError(f"ablate must be 'L.H,L.H' or a list of [layer, head], got {type(ablate).__name__}")
    if len(ablate) > MAX_ABLATED_HEADS:
        raise ValueError(f"ablate names {len(ablate)} heads; at most {MAX_ABLATED_HEADS} at once")
    out: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    for k, pair in enumerate(ablate):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(f"ablate[{k}] must be [layer, head], got {pair!r:.80}")
        item = (checks.integer(f"ablate[{k}] layer", pair[0]), checks.integer(f"ablate[{k}] head", pair[1]))
        if item in seen:
            raise ValueError(f"head {item[0]}.{item[1]} is given twice")
        seen.add(item)
        out.append(item)
    return out


def _check_heads(explainer, trace_heads: list[tuple[int, int]], n_layers: int, n_heads: int) -> None:
    if not trace_heads:
        raise ValueError("give at least one head to ablate (LAYER.HEAD)")
    for l, h in trace_heads:
        if not 0 <= l < n_layers:
            raise ValueError(f"layer must be in [0, {n_layers - 1}], got {l} (head {l}.{h})")
        if not 0 <= h < n_heads:
            raise ValueError(f"head must be in [0, {n_heads - 1}], got {h} (head {l}.{h})")


def _token(explainer, i: int) -> dict:
    """{token, shown, id}: one token, `shown` as a person reads it (`pieces.shown_piece`, as
    `analysis.predictions.predictions`:
    "␣Mary", an invisible character written out)."""
    token = explainer.decode(i)
    shown = explainer.tokenizer.shown(i)
    return {"token": token, "shown": shown, "id": i}


def _entry(explainer, i: int, prob: float) -> dict:
    """{token, shown, id, prob}: one predicted token."""
    return _token(explainer, i) | {"prob": prob}


def _top(explainer, logits: torch.Tensor, k: int = TOP_K) -> list[dict]:
    probs = logits.double().softmax(-1)
    top = probs.topk(min(k, probs.numel()))
    return [_entry(explainer, int(i), float(p)) for p, i in zip(top.values, top.indices, strict=True)]


def _read(explainer, text: str, labels: list[str]) -> dict:
    """{labels, names}: the tokens of `text` as a person reads them (`pieces` labels, its cut's) and as every view
    names them (`export` token_names: "金鱼@5", the position added to a repeated one)."""
    return {"labels": list(labels), "names": _pieces.names(list(labels))}


def _shape(explainer, what: str) -> tuple[int, int]:
    """(layers, heads) of a decoder's model (`Explainer.shape`: read from its modules, no forward pass)."""
    explainer.check_decoder(what)
    return explainer.shape()


def ablation(
    explainer,
    text: str,
    ablate,
    mode: str = "zero",
    *,
    target=None,
    foil=None,
    reference=None,
    cut=None,
    prepend_bos: bool | None = None,
) -> dict:
    """Heads ablated (`patching.ablate`: their output set to zero, or to its mean over this text in the model
    as it is, or over the `reference` texts): the next-token prediction after the text and the mean next-token
    loss, before and after; with `target` and `foil`, the logit difference target − foil at the last position
    before and after, as patching scores it.

    ablate     [(layer, head), …] or "L.H,L.H";  cut  the text's `Explainer.cut` where the caller has it
    target, foil  tokens (text such as " Mary", or ids), both or neither
    reference  texts (at most MAX_REFERENCE_TEXTS) whose every position the mean is taken over (mode "mean" only),
               each cut as the text is (`prepend_bos`)
    Returns {prompt, heads, mode, before {top, loss}, after {top, loss}, kl_bits, target {token, id, before, after},
    text}, with target and foil: logit_diff {target, foil, before, after}, with a reference set:
    reference {texts, positions}."""
    heads = pairs(ablate)
    n_layers, n_heads = _shape(explainer, "ablation")
    _check_heads(explainer, heads, n_layers, n_heads)
    if (target is None) != (foil is None):
        raise ValueError("target and foil go together: give both tokens of the logit difference, or neither")
    texts = _reference(reference, mode)
    tokens, ids, _ = _ids(explainer, text, cut, prepend_bos)
    t, f = (None, None) if target is None else (token_id(explainer, target), token_id(explainer, foil))
    if t is not None and t == f:
        raise ValueError(f"the target and the foil are the same token {explainer.decode(t)!r}")
    ref_ids = None if texts is None else [_ids(explainer, r, None, prepend_bos)[1] for r in texts]
    got = _patching.ablate(explainer.model, ids[None], heads, mode, target=t, foil=f, reference=ref_ids)
    before, after = got["before"]["logits"], got["after"]["logits"]
    top = int(before.argmax())
    out = {
        "prompt": text,
        "heads": [list(p) for p in heads],
        "mode": mode,
        "before": {"top": _top(explainer, before), "loss": got["before"]["loss"]},
        "after": {"top": _top(explainer, after), "loss": got["after"]["loss"]},
        "kl_bits": got["kl_bits"],
        "target": _token(explainer, top)
        | {"before": float(before.double().softmax(-1)[top]), "after": float(after.double().softmax(-1)[top])},
    }
    if t is not None and f is not None:
        out["logit_diff"] = {
            "target": _token(explainer, t),
            "foil": _token(explainer, f),
            "before": got["before"]["ld"],
            "after": got["after"]["ld"],
        }
    if ref_ids is not None:
        out["reference"] = {"texts": len(ref_ids), "positions": sum(len(r) for r in ref_ids)}
    out["text"] = findings.ablation_words(out)
    return out


MAX_REFERENCE_TEXTS = 256
"""Most texts a mean ablation's reference set holds (they run as one batch)."""


def _reference(reference, mode: str) -> list[str] | None:
    """The reference texts of a mean ablation, checked: a list of non-empty texts, with mode "mean"."""
    if reference is None:
        return None
    if isinstance(reference, str) or not isinstance(reference, (list, tuple)):
        raise TypeError(f"reference must be a list of texts, got {type(reference).__name__}")
    if mode != "mean":
        raise ValueError(f"a reference set goes with the mean ablation (ablate_mode 'mean'), not {mode!r}")
    if not reference:
        raise ValueError("the reference set is empty: give at least one text")
    if len(reference) > MAX_REFERENCE_TEXTS:
        raise ValueError(f"the reference set holds {len(reference)} texts; at most {MAX_REFERENCE_TEXTS}")
    for k, r in enumerate(reference):
        if not isinstance(r, str):
            raise TypeError(f"reference[{k}] must be a text, got {type(r).__name__}")
    return list(reference)


def patching(
    explainer, clean: str, corrupted: str, *, target=None, foil=None, cut=None, prepend_bos: bool | None = None
) -> dict:
    """Activation patching clean → corrupted (`patching.patch_heads`, `patching.patch_residual`): the share of
    the logit difference target − foil at the last position that each head's output, and each layer's
    residual at each position, recovers when taken from the clean run into the corrupted one.

    target, foil  tokens (text such as " Mary", or ids); default the clean and the corrupted top predictions
    cut           the clean text's `Explainer.cut` where the caller has it (both texts cut with `prepend_bos`)
    Returns {clean {text, tokens, labels, names, top}, corrupted {…}, target, foil, clean_ld, corrupted_ld,
    heads [layer][head], residual [layer][position], differ [positions], top_heads [{layer, head, recovered}],
    display {limit, label_min, light_from} (the colour scale and labels of the picture and the page:
    `patching_plot.display`), text}.
    Each text is at most MAX_PATCH_TOKENS tokens (the work grows as layers × L²)."""
    from .views import patching_plot

    n_layers, n_heads = _shape(explainer, "patching")
    c_tokens, c_ids, _ = _ids(explainer, clean, cut, prepend_bos)
    x_tokens, x_ids, _ = _ids(explainer, corrupted, None, prepend_bos)
    if len(c_ids) > MAX_PATCH_TOKENS:
        raise ValueError(
            f"patching takes texts of at most {MAX_PATCH_TOKENS} tokens (it runs layers × L prompts), "
            f"the clean text has {len(c_ids)}"
        )
    if len(c_ids) != len(x_ids):
        raise ValueError(
            f"patching needs a clean and a corrupted text of the same token length: the clean text has "
            f"{len(c_ids)} tokens ({' / '.join(c_tokens)}), the corrupted text {len(x_ids)} ({' / '.join(x_tokens)})"
        )
    c_logits, _ = _patching.head_outputs(explainer.model, c_ids[None])
    x_logits, _ = _patching.head_outputs(explainer.model, x_ids[None])
    t = int(c_logits[0, -1].argmax()) if target is None else token_id(explainer, target)
    f = int(x_logits[0, -1].argmax()) if foil is None else token_id(explainer, foil)
    if t == f:
        raise ValueError(
            f"the target and the foil are the same token {explainer.decode(t)!r}"
            + (
                " (both texts predict it first): name the target and the foil (--target, --foil), e.g. ' Mary', ' John'"
                if target is None
                else ""
            )
        )
    with _announced(f"patching each of {n_layers * n_heads} heads from the clean run ({len(c_ids)} tokens)"):
        by_head = _patching.patch_heads(explainer.model, c_ids[None], x_ids[None], t, f)
    with _announced(f"patching each layer's residual at each of {len(c_ids)} positions"):
        by_layer = _patching.patch_residual(explainer.model, c_ids[None], x_ids[None], t, f)
    out = {
        "model": explainer.name,
        "clean": {
            "text": clean,
            "tokens": c_tokens,
            **_read(explainer, clean, c_tokens),
            "top": _top(explainer, c_logits[0, -1]),
        },
        "corrupted": {
            "text": corrupted,
            "tokens": x_tokens,
            **_read(explainer, corrupted, x_tokens),
            "top": _top(explainer, x_logits[0, -1]),
        },
        "target": _token(explainer, t),
        "foil": _token(explainer, f),
        "clean_ld": by_head.clean_ld,
        "corrupted_ld": by_head.corrupted_ld,
        "heads": by_head.recovered.tolist(),
        "residual": by_layer.recovered.tolist(),
        "differ": [p for p in range(len(c_ids)) if int(c_ids[p]) != int(x_ids[p])],
    }
    out["top_heads"] = findings.top_heads(out["heads"])
    out["display"] = patching_plot.display(out)
    out["text"] = findings.patching_words(out)
    return out


@contextlib.contextmanager
def _announced(what: str):
    """A step of many forward passes, said when it starts and when it ends (`kernels.notice`: the CLI prints the
    line, the app and a Python caller hear it only if they subscribe), so a wait of seconds is never silent."""
    from ..kernels.notice import Notice, emit

    emit(Notice("patching", what, "start"))
    start = time.perf_counter()
    try:
        yield
    except BaseException:
        emit(Notice("patching", what, "failed", time.perf_counter() - start))
        raise
    emit(Notice("patching", what, "done", time.perf_counter() - start))


def logit_lens(
    explainer,
    text: str,
    *,
    position: int | None = None,
    top_k: int = TOP_K,
    intervention: Intervention | None = None,
    cache=None,
    trace=None,
    prepend_bos: bool | None = None,
) -> dict:
    """The logit lens (`lens.logit_lens`) at one position (default the last): the residual stream after every
    layer (`LayerTrace.output`, the block's output) read out by the model's final norm and unembedding.
    cache: a `TraceCache` holding the text's trace (the server's), read instead of a new pass; trace: the text's
    trace with `intervention` where the caller has it (the pipeline's), read as it is; else the text is traced as
    `explain` traces it (`tracing.trace_with_controls`).
    Returns {position, token, name, layers [{layer, top [{token, shown, id, prob}], entropy_bits}], settled, text}."""
    if trace is None:  # the text as `explain` traces it (one batch with its controls), so the numbers agree
        trace = tracing.trace_with_controls(explainer, text, intervention, cache=cache, prepend_bos=prepend_bos)[0]
    L = len(trace.tokens)
    p = L - 1 if position is None else position
    if isinstance(p, bool) or not isinstance(p, int):
        raise TypeError(f"position must be an int, got {type(p).__name__}")
    if not 0 <= p < L:
        raise ValueError(f"position must be in [0, {L - 1}] (the text's tokens), got {p}")
    residuals = torch.stack([layer.output[p] for layer in trace.layers])  # (n_layers, d_model)
    rows = _lens.logit_lens(explainer.model, residuals, top_k=top_k)
    layers = [
        {
            "layer": l,
            "top": [_entry(explainer, i, q) for i, q in zip(r["ids"], r["probs"], strict=True)],
            "entropy_bits": r["entropy_bits"],
        }
        for l, r in enumerate(rows)
    ]
    name = _pieces.names(list(trace.tokens))[p]
    out = {"position": p, "token": trace.tokens[p], "name": name, "layers": layers, "settled": findings.settled(layers)}
    out["text"] = findings.lens_words(out)
    return out


def run(
    explainer,
    text: str,
    *,
    ablate=None,
    ablate_mode: str = "zero",
    target=None,
    foil=None,
    reference=None,
    patch: dict | None = None,
    lens: dict | None = None,
    intervention: Intervention | None = None,
    cache=None,
    cut=None,
    trace=None,
    prepend_bos: bool | None = None,
) -> dict:
    """{"ablation", "patching", "lens"}: the experiments asked for on `text`, the keys the page document carries
    them under (what `selfattn explain --ablate/--patch/--logit-lens` and the app's fields ask for).

    ablate  heads (`ablation`; target, foil and reference are its) or None; patch {corrupted, target?, foil?} or None;
    lens {position?} or None. The lens reads the text with `intervention` (`trace` when given, from `cache` when it
    holds it); ablation and patching compare the model as it is, on the text's `cut` when given; every text is cut
    with the BOS as `prepend_bos` asks (`Explainer.bos`)."""
    out = {}
    if ablate is not None:
        out["ablation"] = ablation(
            explainer,
            text,
            ablate,
            ablate_mode,
            target=target,
            foil=foil,
            reference=reference,
            cut=cut,
            prepend_bos=prepend_bos,
        )
    if patch is not None:
        out["patching"] = patching(
            explainer,
            text,
            patch["corrupted"],
            target=patch.get("target"),
            foil=patch.get("foil"),
            cut=cut,
            prepend_bos=prepend_bos,
        )
    if lens is not None:
        out["lens"] = logit_lens(
            explainer,
            text,
            position=lens.get("position"),
            intervention=intervention,
            cache=cache,
            trace=trace,
            prepend_bos=prepend_bos,
        )
    return out


def attribution(explainer, clean: str, corrupted: str, *, target=None, foil=None, cut=None, exact=None) -> dict:
    """Attribution patching clean → corrupted (`capture.attribution`): every head's and every residual position's
    first-order estimate of what `patching` measures, from one clean and one corrupted forward and one backward.

    target, foil  as `patching` (default the clean and the corrupted top predictions)
    exact         `patching`'s dict for the same texts, target and foil, where it ran: its shares are set beside
                  the estimates ("exact") with their rank agreement on its top heads (`attribution.rank_agreement`)
    Returns {clean {text, tokens}, corrupted {…}, target, foil, clean_ld, corrupted_ld, activation, heads
    [layer][head], residual [layer][position] (estimated shares of clean_ld − corrupted_ld), heads_ld (the same in
    logits), top_heads [{layer, head, recovered}], exact {heads, residual, agreement {top, spearman, shared}} or
    None, display {limit, label_min, light_from} (the page's colour scale, `patching_plot.display`)}."""
    from .capture import attribution as _attribution
    from .views import patching_plot

    _shape(explainer, "attribution")
    c_tokens, c_ids, _ = _ids(explainer, clean, cut)
    x_tokens, x_ids, _ = _ids(explainer, corrupted)
    if len(c_ids) != len(x_ids):
        raise ValueError(
            f"attribution needs a clean and a corrupted text of the same token length: the clean text has "
            f"{len(c_ids)} tokens ({' / '.join(c_tokens)}), the corrupted text {len(x_ids)} ({' / '.join(x_tokens)})"
        )
    if target is None or foil is None:
        c_logits, _ = _patching.head_outputs(explainer.model, c_ids[None])
        x_logits, _ = _patching.head_outputs(explainer.model, x_ids[None])
    t = int(c_logits[0, -1].argmax()) if target is None else token_id(explainer, target)
    f = int(x_logits[0, -1].argmax()) if foil is None else token_id(explainer, foil)
    if t == f:
        raise ValueError(f"the target and the foil are the same token {explainer.decode(t)!r}: name them apart")
    got = _attribution.attribute(explainer.model, c_ids[None], x_ids[None], t, f)
    heads_share = got.heads.tolist()
    out = {
        "model": explainer.name,
        "clean": {"text": clean, "tokens": c_tokens},
        "corrupted": {"text": corrupted, "tokens": x_tokens},
        "target": _token(explainer, t),
        "foil": _token(explainer, f),
        "clean_ld": got.clean_ld,
        "corrupted_ld": got.corrupted_ld,
        "activation": "z: each head's output before W_O (weights · V); the residual: each block's output",
        "heads": heads_share,
        "residual": got.residual.tolist(),
        "heads_ld": got.heads_ld.tolist(),
        "top_heads": findings.top_heads(heads_share),
        "exact": None,
    }
    if exact is not None:
        if (exact["target"]["id"], exact["foil"]["id"]) != (t, f) or exact["corrupted"]["text"] != corrupted:
            raise ValueError("exact is patching's result for other texts or tokens than these")
        agreement = _attribution.rank_agreement(torch.tensor(exact["heads"]), got.heads)
        out["exact"] = {"heads": exact["heads"], "residual": exact["residual"], "agreement": agreement}
    out["display"] = patching_plot.display(out)  # the colour scale of the page's maps, as patching's
    return out
