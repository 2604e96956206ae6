"""What `selfattn train` prints after training: the summary's numbers as sentences.

A figure the run could not measure (no late sentence in a paragraph, no 这+measure reference: the
summary holds None) is printed as "n/a", never formatted as a number.
"""

from __future__ import annotations

__all__ = ["format_train_summary", "NOT_MEASURED"]

NOT_MEASURED = "n/a"


def _num(x, spec: str) -> str:
    """`format(x, spec)`, or NOT_MEASURED for None."""
    return NOT_MEASURED if x is None else format(x, spec)


def _claims(section: dict) -> dict:
    """{query: claim} of a probe section of the summary (config.json's shape: the claims sit beside
    scalar fields such as "threshold" or "n")."""
    return {query: claim for query, claim in section.items() if isinstance(claim, dict)}


def _run_lines(summary: dict) -> list[str]:
    m = summary["metrics"]
    return [
        f"trained preset {summary['preset']!r} (seed {summary['seed']}): {summary['parameters']:,} parameters, "
        f"vocabulary {summary['vocab_size']}, {summary['steps']} steps, {summary['train_seconds']:.1f} s training "
        f"({summary['tokens_per_second']:,} tokens/s on {summary['threads']} threads), "
        f"kept epoch {summary['best_epoch']}",
        f"validation: loss {m['val']['loss']:.4f}, perplexity {m['val']['perplexity']:.3f} "
        f"(the grammar itself: {m['val_grammar_floor']['perplexity']:.3f}), "
        f"next-token accuracy {m['val']['accuracy']:.2%}",
        f"test (held-out colour+noun pairs): perplexity {m['test']['perplexity']:.3f}, "
        f"measure-word agreement {m['measure_agreement']['accuracy']:.1%} of {m['measure_agreement']['n']}, "
        f"这+measure agreement {m['ref_agreement']['accuracy']:.1%} of {m['ref_agreement']['n']}",
        f"samples from <bos>: {m['samples']['grammatical']:.1%} of {m['samples']['n']} grammatical",
    ] + [
        f"attention probe {claim['example']}: strongest attention on the claimed words in "
        f"{claim['heads_hit']} of {claim['n_heads']} heads (hit rate ≥ {summary['probe']['threshold']:.0%})"
        for claim in _claims(summary["probe"]).values()
    ]


def _paragraph_lines(summary: dict) -> list[str]:
    par = summary["metrics"]["paragraphs"]
    late = par["late"]
    if late["sentences"] == 0:
        return []
    lines = [
        f"paragraphs of {summary['positions']['max_len']} tokens (test): perplexity by position "
        + ", ".join(f"{b['from']}–{b['to'] - 1}: {_num(b['perplexity'], '.3f')}" for b in par["by_position"]),
        f"{late['sentences']} sentences starting at position ≥ {late['from']}: perplexity "
        f"{_num(late['perplexity'], '.3f')} (the same sentences alone: {_num(late['alone_perplexity'], '.3f')}), "
        f"measure-word agreement {_num(late['measure_agreement'], '.1%')}, "
        f"这+measure agreement {_num(late['ref_agreement'], '.1%')} of {late['ref_n']}",
    ]
    for query, claim in _claims(summary["paragraph_probe"]).items():
        best = claim["best_head"]
        lines.append(
            f"late attention probe {query} → {', '.join(claim['targets'])}: strongest in "
            f"{claim['heads_hit']} of {claim['n_heads']} heads; best head layer {best['layer']} "
            f"head {best['head']} gives them {best['lift']:.1f}× the weight of even attention"
        )
    return lines


def _position_lines(summary: dict) -> list[str]:
    pos = summary["positions"]
    return [
        f"position embeddings: {pos['max_len'] - pos['untrained']} of {pos['max_len']} trained, on "
        f"{pos['min_tokens']:,}–{pos['max_tokens']:,} tokens each; each moved ≥ "
        f"{pos['min_relative_change']:.0%} of its initial length"
    ]


def format_train_summary(summary: dict) -> str:
    """The lines `selfattn train` prints after training (`run_training`'s summary)."""
    lines = _run_lines(summary) + _paragraph_lines(summary) + _position_lines(summary)
    lines += [f"wrote {path}" for path in summary["files"].values()]
    return "\n".join(lines)
