"""What `selfattn train` and `selfattn generate` do and print; `selfattn.cli` only parses arguments.

Each command prints for a person, or with json_output=True prints the same numbers as one
JSON object on stdout (the progress bar, when shown, goes to stderr). Each returns the
process exit code.
"""

from __future__ import annotations

import json
import sys

__all__ = ["train_command", "generate_command", "format_train_summary", "format_generation"]


def _dump(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, indent=2)


def format_train_summary(summary: dict) -> str:
    """The lines `selfattn train` prints after training."""
    m = summary["metrics"]
    lines = [
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
    ]
    for claim in summary["probe"]["claims"]:
        lines.append(f"attention probe {claim['example']}: strongest attention on the claimed words in "
                     f"{claim['heads_hit']} of {claim['n_heads']} heads (hit rate ≥ {summary['probe']['threshold']:.0%})")
    par = m.get("paragraphs")
    if par and par["late"]["sentences"]:
        late = par["late"]
        lines.append(f"paragraphs of {summary['positions']['max_len']} tokens (test): perplexity by position "
                     + ", ".join(f"{b['from']}–{b['to'] - 1}: {b['perplexity']:.3f}" for b in par["by_position"]))
        lines.append(f"{late['sentences']} sentences starting at position ≥ {late['from']}: perplexity "
                     f"{late['perplexity']:.3f} (the same sentences alone: {late['alone_perplexity']:.3f}), "
                     f"measure-word agreement {late['measure_agreement']:.1%}, "
                     f"这+measure agreement {late['ref_agreement']:.1%} of {late['ref_n']}")
        for claim in summary["paragraph_probe"]["claims"]:
            best = max(claim["heads"], key=lambda h: h["lift"])
            lines.append(f"late attention probe {claim['query']} → {', '.join(claim['targets'])}: strongest in "
                         f"{claim['heads_hit']} of {claim['n_heads']} heads; best head layer {best['layer']} "
                         f"head {best['head']} gives them {best['lift']:.1f}× the weight of even attention")
    if "positions" in summary:
        pos = summary["positions"]
        lines.append(f"position embeddings: {pos['max_len'] - pos['untrained']} of {pos['max_len']} trained, on "
                     f"{pos['min_tokens']:,}–{pos['max_tokens']:,} tokens each; each moved ≥ "
                     f"{pos['min_relative_change']:.0%} of its initial length")
    lines += [f"wrote {path}" for path in summary["files"].values()]
    return "\n".join(lines)


def train_command(*, preset: str = "default", out: str = "out/model", seed: int = 0, epochs: int | None = None,
                  batch_size: int | None = None, lr: float | None = None, plot: str | None = None,
                  force: bool = False, threads: int | None = 1, progress: bool = True,
                  json_output: bool = False) -> int:
    """`selfattn train`: run_training with these options, then print the summary (or JSON)."""
    from .train import run_training

    try:
        summary = run_training(preset, out, seed=seed, epochs=epochs, batch_size=batch_size, lr=lr, plot=plot,
                               force=force, progress=progress, threads=threads)
    except FileExistsError as e:
        print(f"selfattn train: {e}", file=sys.stderr)
        return 1
    print(_dump(summary) if json_output else format_train_summary(summary))
    return 0


def format_generation(gen) -> str:
    """The lines `selfattn generate` prints: the text, then its words and why it stopped."""
    return "\n".join([
        gen.text,
        " / ".join(gen.prompt_tokens) + " ‖ " + " / ".join(gen.new_tokens) + f"   (stopped: {gen.stopped})",
    ])


def generate_command(text: str, *, model: str | None = None, max_new_tokens: int = 40, greedy: bool = False,
                     temperature: float = 1.0, top_k: int | None = None, seed: int | None = 0,
                     use_cache: bool = True, json_output: bool = False) -> int:
    """`selfattn generate TEXT`: continue TEXT with the default model or the checkpoint at `model`."""
    from .checkpoint import load_checkpoint, load_default
    from .generate import generate_text

    lm, tokenizer, _ = load_default() if model is None else load_checkpoint(model)
    gen = generate_text(lm, tokenizer, text, max_new_tokens, greedy=greedy, temperature=temperature,
                        top_k=top_k, seed=seed, use_cache=use_cache)
    if json_output:
        print(_dump({**gen.to_dict(), "model": model or "default"}))
    else:
        print(format_generation(gen))
    return 0
