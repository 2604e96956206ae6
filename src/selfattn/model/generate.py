"""Text generation with a `DecoderLM`: greedy, temperature and top-k, with or without a KV cache.

With the cache, each step feeds only the newest token and attends over the cached keys and
values of the past (bottom-right causal alignment: the one new query sees everything);
without it, each step reruns the whole sequence. Both give the same tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from .. import checks
from ..limits import MAX_SEED, TEMPERATURE_RANGE
from .decoder import DecoderLM, eval_mode

__all__ = ["generate", "generate_text", "Generation", "next_token", "MIN_TEMPERATURE", "MAX_TEMPERATURE"]

MIN_TEMPERATURE, MAX_TEMPERATURE = TEMPERATURE_RANGE
"""Lowest and highest sampling temperature (`selfattn.limits.TEMPERATURE_RANGE`). Use greedy=True for
the limit T → 0."""


def _check_sampling(greedy: bool, temperature: float, top_k: int | None) -> None:
    checks.boolean("greedy", greedy)
    checks.real("temperature", temperature, low=MIN_TEMPERATURE, high=MAX_TEMPERATURE)
    checks.optional_integer("top_k", top_k, low=1)


def next_token(
    logits: torch.Tensor,
    *,
    greedy: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Pick one token per row.

    logits   (B, V) scores of the next token
    returns  (B,) int64: argmax if greedy, else a sample of softmax(logits / temperature)
             restricted to the top_k highest logits
    """
    if greedy:
        return logits.argmax(dim=-1)
    scores = logits.float() / temperature  # (B, V)
    if top_k is not None and top_k < scores.shape[-1]:
        kth = scores.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        scores = scores.masked_fill(scores < kth, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


@torch.no_grad()
def generate(
    model: DecoderLM,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    greedy: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    eos_id: int | None = None,
    seed: int | None = None,
    use_cache: bool = True,
) -> torch.Tensor:
    """Continue `input_ids` by up to `max_new_tokens` tokens.

    input_ids       (L,) or (B, L) int64, L >= 1 (start with <bos> for a model trained with it)
    max_new_tokens  int >= 0; L + max_new_tokens - 1 must not exceed model.max_len
    greedy          argmax at every step (temperature and top_k are then unused)
    temperature     in [MIN_TEMPERATURE, MAX_TEMPERATURE]; divides the logits before sampling
    top_k           sample only among the k most likely tokens (None: all)
    eos_id          stop once every row has produced it; a row that has stops repeating it
    seed            seeds a private torch.Generator (None: torch's global generator)
    use_cache       decode with one KVCache per layer (same tokens, less work)
    returns         (L + n,) or (B, L + n) int64, n <= max_new_tokens
    """
    if not isinstance(model, DecoderLM):
        raise TypeError(f"model must be a DecoderLM, got {type(model).__name__}")
    _check_sampling(greedy, temperature, top_k)
    checks.integer("max_new_tokens", max_new_tokens, low=0)
    if seed is not None:
        checks.integer("seed", seed, low=0, high=MAX_SEED)
    if not isinstance(input_ids, torch.Tensor):
        input_ids = torch.as_tensor(input_ids, dtype=torch.long)
    added = input_ids.dim() == 1
    ids = input_ids[None] if added else input_ids  # (B, L)
    if ids.dim() != 2 or ids.shape[1] < 1:
        raise ValueError(f"input_ids must be (L,) or (B, L) with L >= 1, got shape {tuple(input_ids.shape)}")
    need = ids.shape[1] + max_new_tokens - 1
    if max_new_tokens and need > model.max_len:
        raise ValueError(
            f"a prompt of {ids.shape[1]} tokens + {max_new_tokens} new tokens needs {need} positions; "
            f"the model has max_len={model.max_len}"
        )
    generator = None
    if seed is not None:
        generator = torch.Generator(device=ids.device).manual_seed(seed)
    with eval_mode(model):
        cache = model.new_cache() if use_cache else None
        step_input = ids
        done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)  # (B,)
        for _ in range(max_new_tokens):
            logits = model(step_input if use_cache else ids, cache=cache)[:, -1]  # (B, V)
            tok = next_token(logits, greedy=greedy, temperature=temperature, top_k=top_k, generator=generator)
            if eos_id is not None:
                tok = torch.where(done, torch.full_like(tok, eos_id), tok)
                done |= tok == eos_id
            ids = torch.cat([ids, tok[:, None]], dim=1)
            step_input = tok[:, None]  # (B, 1)
            if eos_id is not None and bool(done.all()):
                break
    return ids[0] if added else ids


@dataclass(frozen=True)
class Generation:
    """What `generate_text` produced (and what `selfattn generate --json` prints)."""

    prompt: str
    prompt_tokens: list[str]
    new_tokens: list[str]
    continuation: str
    text: str
    stopped: str  # "eos", "max_new_tokens" or "max_len"
    seed: int | None
    greedy: bool
    temperature: float
    top_k: int | None
    unknown: list[str]  # the prompt's characters the vocabulary reads as <unk>, in order

    def to_dict(self) -> dict:
        return asdict(self)


def generate_text(
    model: DecoderLM,
    tokenizer,
    text: str,
    max_new_tokens: int = 40,
    *,
    greedy: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int | None = 0,
    use_cache: bool = True,
) -> Generation:
    """Continue `text` (e.g. "一只蓝色") with the model until <eos> or max_new_tokens.

    text     the prompt; cut by the tokenizer, <bos> put first
    returns  a `Generation`; at most model.max_len positions are used (stopped="max_len")
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    checks.integer("max_new_tokens", max_new_tokens, low=1)
    _check_sampling(greedy, temperature, top_k)
    prompt_ids = tokenizer.encode(text, bos=True)
    room = model.max_len + 1 - len(prompt_ids)
    if room < 1:
        raise ValueError(f"the prompt is {len(prompt_ids)} tokens long; the model has max_len={model.max_len}")
    n = min(max_new_tokens, room)
    device = next(model.parameters()).device
    out = generate(
        model,
        torch.tensor(prompt_ids, device=device),
        n,
        greedy=greedy,
        temperature=temperature,
        top_k=top_k,
        eos_id=tokenizer.eos_id,
        seed=seed,
        use_cache=use_cache,
    ).tolist()
    new = out[len(prompt_ids) :]
    if new and new[-1] == tokenizer.eos_id:
        stopped, new = "eos", new[:-1]
    else:
        stopped = "max_new_tokens" if n == max_new_tokens else "max_len"
    continuation = tokenizer.decode(new)
    return Generation(
        prompt=text,
        prompt_tokens=[tokenizer.tokens[i] for i in prompt_ids[1:]],
        unknown=tokenizer.unknown(text),
        new_tokens=[tokenizer.tokens[i] for i in new],
        continuation=continuation,
        text=text + continuation,
        stopped=stopped,
        seed=seed,
        greedy=greedy,
        temperature=float(temperature),
        top_k=top_k,
    )
