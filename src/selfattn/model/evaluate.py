"""How good is a trained model at the corpus: perplexity, accuracy, and agreement that needs attention.

- `lm_metrics`: next-token cross-entropy, perplexity = exp(loss), top-1 accuracy.
- `measure_agreement`: for each sentence, put each of the six measure words into clause 1
  (一只 / 一条 / 一头 / 一匹 / 一位 / 一个 + the same colour and noun) and score the prefix
  log P(<bos> QM COLOUR NOUN); the model chose right if the true measure word scores
  highest. The only evidence against a wrong measure word is the noun two positions
  later, so this needs the noun → measure-word dependency.
- `sample_grammaticality`: sample sentences from <bos> at temperature 1 and count those
  that the grammar accepts (`selfattn.model.grammar`).
- `ref_agreement`: after clause 1 (一条紫色鱼游进大海。), among 这只 / 这条 / 这头 / 这匹 /
  这位 / 这个, does the model rank the one that agrees with the noun 4 positions back
  highest? (Singular sentences whose clause 2 starts with 这 + measure word.)
- `paragraph_loss`: next-token loss over the sentences packed in order into paragraphs of
  max_len + 1 tokens (`data.paragraphs`), the longest text the model reads.
- `paragraph_metrics`: on those paragraphs, perplexity by position, and perplexity and both
  agreements for the sentences that start late (position >= max_len // 2), against the same
  sentences read alone.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .. import checks
from ..modules import KVCache
from .corpus import MEASURES, Sentence, with_measure
from .data import encode_sentences, iterate_batches, next_token_loss, pad_batch, paragraphs
from .decoder import DecoderLM, eval_mode
from .generate import generate
from .grammar import grammar_errors

__all__ = [
    "lm_metrics",
    "measure_agreement",
    "ref_agreement",
    "sample_grammaticality",
    "paragraph_loss",
    "paragraph_metrics",
    "POSITION_EDGES",
]

POSITION_EDGES = (0, 32, 128, 512)
"""`paragraph_metrics` reports perplexity for positions [0, 32), [32, 128), [128, 512), [512, max_len)."""


@torch.no_grad()
def lm_metrics(model: DecoderLM, tokenizer, sentences: Sequence[Sentence], batch_size: int = 256) -> dict:
    """{"loss", "perplexity", "accuracy", "tokens"} of next-token prediction over `sentences`."""
    total_loss, correct, count = 0.0, 0, 0
    with eval_mode(model):
        for batch in iterate_batches(encode_sentences(tokenizer, sentences), batch_size, tokenizer.pad_id):
            logits = model(batch[:, :-1])  # (B, L-1, V)
            target = batch[:, 1:]
            keep = target != tokenizer.pad_id
            total_loss += float(next_token_loss(logits, batch, tokenizer.pad_id, reduction="sum"))
            correct += int(((logits.argmax(-1) == target) & keep).sum())
            count += int(keep.sum())
    loss = total_loss / max(count, 1)
    return {"loss": loss, "perplexity": math.exp(loss), "accuracy": correct / max(count, 1), "tokens": count}


def _sequence_logprob(model: DecoderLM, batch: torch.Tensor, pad_id: int) -> torch.Tensor:
    """batch (N, L) right-padded -> (N,) sum over t >= 1 of log P(token t | tokens < t), pads skipped."""
    logp = torch.log_softmax(model(batch[:, :-1]).float(), dim=-1)  # (N, L-1, V)
    target = batch[:, 1:]  # (N, L-1)
    picked = logp.gather(-1, target[..., None])[..., 0]
    return picked.masked_fill(target == pad_id, 0.0).sum(-1)  # (N,)


@torch.no_grad()
def measure_agreement(model: DecoderLM, tokenizer, sentences: Sequence[Sentence], max_errors: int = 10) -> dict:
    """Share of sentences whose true measure word gives the highest prefix log-probability.

    returns {"accuracy", "n", "by_measure": {measure: accuracy}, "errors": [{"sentence", "chose"}]}
    """
    if not sentences:
        raise ValueError("measure_agreement needs at least one sentence")
    rows = []
    for s in sentences:
        end = s.index("noun") + 1
        rows += [tokenizer.encode_words(with_measure(s, m)[:end]) for m in MEASURES]
    chunk = 256 * len(MEASURES)
    with eval_mode(model):
        scores = torch.cat(
            [
                _sequence_logprob(model, pad_batch(rows[i : i + chunk], tokenizer.pad_id), tokenizer.pad_id)
                for i in range(0, len(rows), chunk)
            ]
        )  # (N * 6,)
    chosen = scores.view(len(sentences), len(MEASURES)).argmax(-1).tolist()
    hits: list[bool] = []
    per: Counter[str] = Counter()
    totals = Counter(s.creature.measure for s in sentences)
    errors: list[dict[str, str]] = []
    for s, c in zip(sentences, chosen, strict=True):
        ok = MEASURES[c] == s.creature.measure
        hits.append(ok)
        per[s.creature.measure] += ok
        if not ok and len(errors) < max_errors:
            errors.append({"sentence": s.text, "chose": s.quantity + MEASURES[c]})
    return {
        "accuracy": sum(hits) / len(hits),
        "n": len(hits),
        "by_measure": {m: per[m] / totals[m] for m in MEASURES if totals[m]},
        "errors": errors,
    }


def _has_singular_ref(s: Sentence) -> bool:
    """Does clause 2 of `s` start with 这 + a measure word (not the plural 这些)?"""
    return "ref_measure" in s.roles and s.words[s.index("ref_measure")] != "这些"


def _ref_ids(tokenizer) -> list[int]:
    """(6,) the ids of 这 + each of MEASURES, in that order."""
    return [tokenizer.id_of("这" + m) for m in MEASURES]


@torch.no_grad()
def ref_agreement(model: DecoderLM, tokenizer, sentences: Sequence[Sentence]) -> dict:
    """Share of singular 这+measure references where the model ranks the right one first.

    returns {"accuracy", "n"}; n counts the sentences that have such a reference
    """
    chosen_from = _ref_ids(tokenizer)
    picked = [s for s in sentences if _has_singular_ref(s)]
    if not picked:
        raise ValueError("no sentence has a singular 这+measure reference")
    rows = [tokenizer.encode_words(s.words[: s.index("ref_measure")]) for s in picked]
    hits = 0
    with eval_mode(model):
        for start in range(0, len(rows), 512):
            part = rows[start : start + 512]
            logits = model(pad_batch(part, tokenizer.pad_id))  # (N, L, V)
            last = torch.tensor([len(r) - 1 for r in part])
            scores = logits[torch.arange(len(part)), last][:, chosen_from]  # (N, 6)
            for s, c in zip(picked[start : start + 512], scores.argmax(-1).tolist(), strict=True):
                hits += MEASURES[c] == s.creature.measure
    return {"accuracy": hits / len(picked), "n": len(picked)}


@torch.no_grad()
def sample_grammaticality(
    model: DecoderLM, tokenizer, n: int = 200, seed: int = 0, max_new_tokens: int = 24, max_examples: int = 5
) -> dict:
    """Share of n sentences sampled from <bos> (temperature 1, no top-k) that are grammatical.

    returns {"grammatical", "n", "examples": [text], "errors": [{"text", "errors"}]}
    """
    checks.integer("n", n, low=1)
    start = torch.full((n, 1), tokenizer.bos_id, dtype=torch.long)
    out = generate(model, start, min(max_new_tokens, model.max_len), eos_id=tokenizer.eos_id, seed=seed)
    ok = 0
    examples: list[str] = []
    errors: list[dict] = []
    for row in out[:, 1:].tolist():
        ids = row[: row.index(tokenizer.eos_id)] if tokenizer.eos_id in row else row
        words = [tokenizer.tokens[i] for i in ids]
        problems = grammar_errors(words)
        ok += not problems
        if not problems and len(examples) < max_examples:
            examples.append("".join(words))
        if problems and len(errors) < max_examples:
            errors.append({"text": "".join(words), "errors": problems})
    return {"grammatical": ok / n, "n": n, "examples": examples, "errors": errors}


@torch.no_grad()
def paragraph_loss(model: DecoderLM, tokenizer, sentences: Sequence[Sentence], rows_per_batch: int = 4) -> dict:
    """{"loss", "perplexity", "tokens", "rows"} of next-token prediction over `data.paragraphs` rows."""
    rows = [row for row, _ in paragraphs(tokenizer, sentences, model.max_len)]
    total, count = 0.0, 0
    with eval_mode(model):
        for i in range(0, len(rows), rows_per_batch):
            batch = pad_batch(rows[i : i + rows_per_batch], tokenizer.pad_id)  # (B, max_len + 1)
            total += float(next_token_loss(model(batch[:, :-1]), batch, tokenizer.pad_id, reduction="sum"))
            count += int((batch[:, 1:] != tokenizer.pad_id).sum())
    loss = total / max(count, 1)
    return {"loss": loss, "perplexity": math.exp(loss), "tokens": count, "rows": len(rows)}


def _sliced_cache(cache: list[KVCache], length: int, copies: int) -> list[KVCache]:
    """A fresh cache per layer holding the first `length` positions of `cache`, repeated `copies` times."""
    out = []
    for layer in cache:
        fresh = KVCache()
        keys, values = layer.keys, layer.values
        if keys is None or values is None:
            raise ValueError("cannot slice an empty KVCache")
        fresh.append(keys[:, :, :length].expand(copies, -1, -1, -1), values[:, :, :length].expand(copies, -1, -1, -1))
        out.append(fresh)
    return out


@dataclass
class _LateTally:
    """Running sums over the late sentences of `paragraph_metrics`."""

    sentences: list = field(default_factory=list)
    loss: float = 0.0  # summed loss of their words given the paragraph before them
    tokens: int = 0
    measure_hits: int = 0
    ref_hits: int = 0
    ref_n: int = 0  # late sentences with a singular 这+measure reference


def _ratio(num: float, den: int, f=lambda x: x):
    """f(num / den), or None when nothing was counted (den == 0)."""
    return f(num / den) if den else None


def _late_sentence(
    model: DecoderLM,
    tokenizer,
    row: list[int],
    s: Sentence,
    start: int,
    logp: torch.Tensor,
    picked: torch.Tensor,
    cache: list[KVCache],
    ref_ids: list[int],
    tally: _LateTally,
) -> None:
    """Add one late sentence (its first word at `start` of `row`) to `tally`.

    logp    (L, V) log-probabilities of the next token at each position of the row
    picked  (L,) loss of the token that follows each position
    cache   the row's KV cache, so the six measure-word variants reuse the paragraph before them
    """
    tally.sentences.append(s)
    n = len(tokenizer.encode_words(s.words, bos=False))
    tally.loss += float(picked[start - 1 : start - 1 + n].sum())
    tally.tokens += n
    # log P(QM COLOUR NOUN | the paragraph before) for each of the six measure words
    qm, noun = start + s.index("qm"), start + s.index("noun")
    colour = qm + 1
    variants = torch.tensor([[tokenizer.id_of(s.quantity + m), row[colour]] for m in MEASURES])  # (6, 2)
    out = torch.log_softmax(model(variants, cache=_sliced_cache(cache, qm, len(MEASURES))).float(), -1)
    scores = logp[qm - 1, variants[:, 0]] + out[:, 0, row[colour]] + out[:, 1, row[noun]]  # (6,)
    tally.measure_hits += MEASURES[int(scores.argmax())] == s.creature.measure
    if _has_singular_ref(s):
        at = start + s.index("ref_measure")
        tally.ref_hits += MEASURES[int(logp[at - 1, ref_ids].argmax())] == s.creature.measure
        tally.ref_n += 1


@torch.no_grad()
def paragraph_metrics(model: DecoderLM, tokenizer, sentences: Sequence[Sentence], late_from: int | None = None) -> dict:
    """How the model reads long inputs: `sentences` packed into paragraphs of model.max_len tokens.

    late_from  a sentence is "late" when its first word sits at this position or after
               (default model.max_len // 2)
    returns    {"rows", "tokens", "by_position": [{"from", "to", "perplexity", "tokens"}],
                "late": {"sentences", "from", "perplexity", "alone_perplexity",
                         "measure_agreement", "ref_agreement", "ref_n"}}
               late perplexity counts the words of late sentences (QM … 。) given the paragraph
               before them; alone_perplexity the same words after <bos> alone. The agreements are
               those of `measure_agreement` / `ref_agreement`, asked with the paragraph as context.
               A figure with nothing to count (no late sentence, no reference) is None.
    """
    if not sentences:
        raise ValueError("paragraph_metrics needs at least one sentence")
    late_from = model.max_len // 2 if late_from is None else late_from
    edges = [e for e in POSITION_EDGES if e < model.max_len] + [model.max_len]
    bucket_loss, bucket_n = [0.0] * (len(edges) - 1), [0] * (len(edges) - 1)
    tally = _LateTally()
    ref_ids = _ref_ids(tokenizer)
    rows = paragraphs(tokenizer, sentences, model.max_len)
    with eval_mode(model):
        for row, placed in rows:
            x = torch.tensor(row[:-1])[None]  # (1, L)
            cache = model.new_cache()
            logp = torch.log_softmax(model(x, cache=cache)[0].float(), dim=-1)  # (L, V)
            target = torch.tensor(row[1:])
            picked = -logp.gather(-1, target[:, None])[:, 0]  # (L,) loss of token t+1
            for b in range(len(edges) - 1):
                part = picked[edges[b] : edges[b + 1]]
                bucket_loss[b] += float(part.sum())
                bucket_n[b] += part.numel()
            for s, start in placed:
                if start >= late_from:
                    _late_sentence(model, tokenizer, row, s, start, logp, picked, cache, ref_ids, tally)
        late_rows = [tokenizer.encode_words(s.words) for s in tally.sentences]
        alone = (
            -float(_sequence_logprob(model, pad_batch(late_rows, tokenizer.pad_id), tokenizer.pad_id).sum())
            if late_rows
            else 0.0
        )
    n_late = len(tally.sentences)
    return {
        "rows": len(rows),
        "tokens": sum(bucket_n),
        "by_position": [
            {
                "from": edges[b],
                "to": edges[b + 1],
                "tokens": bucket_n[b],
                "perplexity": _ratio(bucket_loss[b], bucket_n[b], math.exp),
            }
            for b in range(len(edges) - 1)
        ],
        "late": {
            "from": late_from,
            "sentences": n_late,
            "perplexity": _ratio(tally.loss, tally.tokens, math.exp),
            "alone_perplexity": _ratio(alone, tally.tokens, math.exp),
            "measure_agreement": _ratio(tally.measure_hits, n_late),
            "ref_agreement": _ratio(tally.ref_hits, tally.ref_n),
            "ref_n": tally.ref_n,
        },
    }
