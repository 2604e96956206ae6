"""Masks given as FlexAttention mask_mods: the native kernel's block map against FlexAttention compiled.

Three masks a FlexAttention user writes as a mask_mod — a causal document mask (packed documents of seeded random
lengths), prefix-LM (a bidirectional prefix, causal after it) and a causal dilated mask (every DILATION-th key) —
as cases of `selfattn bench` (`cases(Case)`, registered in `cases.CASES`: native, SDPA, tiled and auto, × SDPA
per row; not flex there, whose create_block_mask evaluates a document mask by vmap for minutes at L = 8192), and
head to head against FlexAttention here:

    python -m selfattn.bench.mask_mod_cases [--quick] [--load N]

times, in one run and in turns (`timing.best_seconds_interleaved`), `selfattn.attention(q, k, v, mask_mod=mod,
backend="native")` and FlexAttention itself — `torch.compile(flex_attention)` called with the block mask of its
own `create_block_mask(mod, None, None, L, L, _compile=True)` — and prints each row's native / flex ratio.
FlexAttention's create_block_mask and its compile are announced with their seconds and not counted in its per-call
time (as native's block map is made once per shape, then kept: its first call is the warm-up). Benchmarks are not
tests.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..functional import attention
from ..masks import BLOCK_MASKS
from .load import busy_processes
from .timing import MIN_SECONDS, QUICK_MIN_SECONDS, best_seconds_interleaved

__all__ = ["cases", "mask_mod", "head_to_head", "main", "DILATION", "PREFIX_SHARE", "MEAN_DOC"]

DILATION = 4
"""The dilated mask keeps keys j <= i with (i − j) a multiple of this: every block of the causal half partial."""

PREFIX_SHARE = 4
"""The prefix-LM mask's bidirectional prefix is L / PREFIX_SHARE positions."""

MEAN_DOC = 1024
"""Mean document length of the document mask (lengths drawn uniformly in [MEAN_DOC / 4, 7 · MEAN_DOC / 4])."""

DOC_SEED = 3
"""The seed of the document lengths."""


def _document_ids(L: int) -> torch.Tensor:
    """(L,) int64 document ids: documents of seeded random lengths packed one after another."""
    g = torch.Generator().manual_seed(DOC_SEED)
    lengths = torch.randint(MEAN_DOC // 4, 7 * MEAN_DOC // 4, (L // (MEAN_DOC // 4) + 1,), generator=g)
    return torch.repeat_interleave(torch.arange(len(lengths)), lengths)[:L].contiguous()


def mask_mod(name: str, L: int) -> Callable:
    """The case's mask_mod for a sequence of L positions: FlexAttention's signature, torch operations only."""
    if name == "document":
        docs = _document_ids(L)

        def document(b, h, q_idx, kv_idx):
            return (docs[q_idx] == docs[kv_idx]) & (kv_idx <= q_idx)

        return document
    if name == "prefix_lm":
        prefix = L // PREFIX_SHARE

        def prefix_lm(b, h, q_idx, kv_idx):
            return (kv_idx < prefix) | (kv_idx <= q_idx)

        return prefix_lm
    if name == "dilated":

        def dilated(b, h, q_idx, kv_idx):
            return ((q_idx - kv_idx) % DILATION == 0) & (kv_idx <= q_idx)

        return dilated
    raise ValueError(f"unknown mask {name!r}; choose document, prefix_lm or dilated")


_MODS: dict[tuple[str, int], Callable] = {}


def _mod(name: str, L: int) -> Callable:
    """One mask_mod object per (mask, L): attention keeps its block map per mask_mod (`masks.cached_block_mask`)."""
    if (name, L) not in _MODS:
        _MODS[name, L] = mask_mod(name, L)
    return _MODS[name, L]


TITLES = {
    "document": f"causal document mask as a mask_mod (documents of ~{MEAN_DOC})",
    "prefix_lm": f"prefix-LM as a mask_mod (a bidirectional prefix of L/{PREFIX_SHARE}, causal after it)",
    "dilated": f"causal dilated mask as a mask_mod (every {DILATION}th key: every block partial)",
}

FULL_LENGTH, QUICK_LENGTH = 8192, 1024
"""Sequence lengths of the full and the quick cases."""


def cases(case_type: type) -> dict[str, tuple[Any, Any]]:
    """name → (full-size case, quick case) for `cases.CASES`: instances of a subclass of `case_type` (`cases.Case`,
    given by the registry so that this module does not import it back) whose masking is the mask_mod alone."""

    @dataclass(frozen=True)
    class ModCase(case_type):
        """A bench case whose mask is a mask_mod (`mask`: document, prefix_lm or dilated), not causal/window."""

        mask: str = "document"

        def kwargs(self) -> dict[str, Any]:
            return super().kwargs() | {"causal": False, "window": None, "mask_mod": _mod(self.mask, self.len_q)}

    base: dict[str, Any] = dict(
        batch=1, q_heads=8, kv_heads=8, head_dim=64, backends=("native", "sdpa", "tiled", "auto")
    )
    out: dict[str, tuple[Any, Any]] = {}
    for mask, title in TITLES.items():
        name = f"mask_mod_{mask}"
        full = ModCase(name, title, len_q=FULL_LENGTH, len_k=FULL_LENGTH, mask=mask, **base)
        quick = ModCase(name, title, len_q=QUICK_LENGTH, len_k=QUICK_LENGTH, mask=mask, **base)
        out[name] = (full, quick)
    return out


def _flex_call(mod: Callable, q, k, v) -> tuple[Callable[[], torch.Tensor], float, float]:
    """(a call of FlexAttention compiled with its own block mask of `mod`, seconds create_block_mask took, seconds
    the first (compiling) call took)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    L = q.shape[2]
    start = time.perf_counter()
    block_mask = create_block_mask(mod, None, None, L, L, device=q.device, _compile=True)  # vmap: minutes at 8192
    made = time.perf_counter() - start
    compiled = torch.compile(flex_attention, dynamic=False)

    def call():
        with torch.no_grad():
            return compiled(q, k, v, block_mask=block_mask)

    start = time.perf_counter()
    call()
    return call, made, time.perf_counter() - start


def head_to_head(quick: bool = False, say: Callable[[str], None] = print) -> list[dict]:
    """Each mask: native and compiled Flex timed in turns; rows of ms and native / flex (below 1: native faster)."""
    rows = []
    L = QUICK_LENGTH if quick else FULL_LENGTH
    for mask in TITLES:
        mod = _mod(mask, L)
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 8, L, 64, generator=g) for _ in range(3))
        BLOCK_MASKS.clear()
        start = time.perf_counter()
        attention(q, k, v, mask_mod=mod, backend="native")
        first = time.perf_counter() - start
        flex, made, compiled = _flex_call(mod, q, k, v)
        say(
            f"{mask}: native's first call (its block map made) {first:.2f} s; Flex's create_block_mask {made:.2f} s, "
            f"its compile (first call) {compiled:.1f} s — none of these in the times below"
        )

        def native(q=q, k=k, v=v, mod=mod):
            with torch.no_grad():
                return attention(q, k, v, mask_mod=mod, backend="native")

        error = float((native() - flex()).abs().max())
        best = best_seconds_interleaved({"native": native, "flex": flex}, QUICK_MIN_SECONDS if quick else MIN_SECONDS)
        rows.append(
            {
                "mask": mask,
                "L": L,
                "native_ms": best["native"][0] * 1e3,
                "flex_ms": best["flex"][0] * 1e3,
                "ratio": best["native"][0] / best["flex"][0],
                "rounds": best["native"][1],
                "max_difference": error,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"L = {QUICK_LENGTH} instead of {FULL_LENGTH}")
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the timing (bench.load)")
    args = parser.parse_args(argv)
    with busy_processes(args.load):
        rows = head_to_head(args.quick)
    print(f"B=1 H=8 D=64 float32, {torch.get_num_threads()} threads, {args.load} busy process(es) beside")
    print(
        f"{'mask':<10} {'L':>6} {'native ms':>10} {'flex ms':>10} {'native/flex':>12} {'rounds':>7} {'max |diff|':>11}"
    )
    for r in rows:
        print(
            f"{r['mask']:<10} {r['L']:>6} {r['native_ms']:>10.2f} {r['flex_ms']:>10.2f} {r['ratio']:>12.3f} "
            f"{r['rounds']:>7} {r['max_difference']:>11.2e}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
