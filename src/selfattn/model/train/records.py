"""What a run records about itself: the kept model's metrics and probes, and config.json's "training" section.

    metrics = final_metrics(model, tokenizer, corpus, seed)     validation, test, agreements, samples, paragraphs
    training = training_record(name, preset, seed, out, overrides, setup, run, metrics, probe, late_probe, started)

`selfattn train --json` prints the same record; `selfattn.render.print_train` turns it into sentences.
"""

from __future__ import annotations

import math
import platform
import time
from dataclasses import asdict
from pathlib import Path

import torch

from ..corpus import log_prob
from ..decoder import DecoderLM
from ..evaluate import lm_metrics, measure_agreement, paragraph_metrics, ref_agreement, sample_grammaticality
from ..tokenizer import WordTokenizer
from .loop import Run
from .presets import Preset, train_command_line
from .setup import Setup

__all__ = ["SAMPLED_SENTENCES", "final_metrics", "probe_record", "late_claim", "training_record"]

SAMPLED_SENTENCES = 200
"""Sentences sampled from <bos> to measure how many the grammar accepts, after training."""


def final_metrics(model: DecoderLM, tokenizer: WordTokenizer, corpus, seed: int) -> dict:
    """Everything `selfattn train` reports about the kept model, on validation and test."""
    floor = -sum(log_prob(s) for s in corpus.val) / sum(len(s.words) + 1 for s in corpus.val)
    return {
        "val": lm_metrics(model, tokenizer, corpus.val),
        "val_grammar_floor": {"loss": floor, "perplexity": math.exp(floor)},
        "test": lm_metrics(model, tokenizer, corpus.test),
        "measure_agreement": measure_agreement(model, tokenizer, corpus.test),
        "ref_agreement": ref_agreement(model, tokenizer, corpus.test),
        "samples": sample_grammaticality(model, tokenizer, n=SAMPLED_SENTENCES, seed=seed),
        "paragraphs": paragraph_metrics(model, tokenizer, corpus.test),
    }


def probe_record(probe: dict) -> dict:
    """What config.json (and `selfattn train --json`) keeps of `attention_probe`: the threshold, and per claim
    {query: {"heads_hit", "n_heads", "example"}}."""
    return {
        "threshold": probe["threshold"],
        **{
            c["query"]: {"heads_hit": c["heads_hit"], "n_heads": c["n_heads"], "example": c["example"]}
            for c in probe["claims"]
        },
    }


def late_claim(claim: dict) -> dict:
    """What config.json keeps of one `paragraph_probe` claim: heads hit, and the head with the highest lift
    (the one place that picks it; `selfattn.render.print_train` prints it)."""
    best = max(claim["heads"], key=lambda h: h["lift"])
    return {
        "targets": claim["targets"],
        "heads_hit": claim["heads_hit"],
        "n_heads": claim["n_heads"],
        "best_head": {
            "layer": best["layer"],
            "head": best["head"],
            "lift": round(best["lift"], 2),
            "mean_weight": round(best["mean_weight"], 4),
            "hit_rate": round(best["hit_rate"], 4),
        },
    }


def training_record(
    name: str,
    p: Preset,
    seed: int,
    out: Path,
    overrides: dict,
    s: Setup,
    run: Run,
    metrics: dict,
    probe: dict,
    late_probe: dict,
    started: float,
) -> dict:
    """The "training" section of config.json: settings, history, metrics, probes, positions, speed."""
    moved = (s.model.pos_emb.weight.detach() - s.pos_start).norm(dim=-1) / s.pos_start.norm(dim=-1)  # (max_len,)
    return {
        "preset": name,
        "settings": asdict(p),
        "seed": seed,
        "corpus": {"n_train": p.n_train, "n_val": p.n_val, "n_test": p.n_test, "seed": seed},
        "command": None if name == "custom" else train_command_line(name, seed, out, overrides),
        "history": run.history,
        "best_epoch": run.best_epoch,
        "metrics": metrics,
        "probe": probe_record(probe),
        "paragraph_probe": {
            "n": late_probe["n"],
            "from": late_probe["from"],
            **{c["query"]: late_claim(c) for c in late_probe["claims"]},
        },
        "positions": {
            "max_len": p.max_len,
            "min_tokens": int(s.counts.min()),
            "max_tokens": int(s.counts.max()),
            "untrained": int((s.counts == 0).sum()),
            "min_relative_change": round(float(moved.min()), 4),
            "median_relative_change": round(float(moved.median()), 4),
        },
        "train_seconds": round(run.train_seconds, 2),
        "seconds": round(time.perf_counter() - started, 2),
        "tokens_per_second": round(run.tokens_seen / run.train_seconds),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.machine(),
    }
