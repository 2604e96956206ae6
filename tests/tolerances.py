"""The one table of tolerances, and the rule every fast path is judged by.

Style rule (DESIGN.md, Style 2): a fast path's error against the float64 reference may be at most
about twice the error of the naive path in the same dtype. The per-dtype floor covers the
cases where the naive path happens to be (nearly) exact and the fast path rounds differently.
Every other absolute tolerance a test uses is a named entry of TOL.
"""

from __future__ import annotations

import numpy as np
import torch

FLOOR = {
    torch.float64: 1e-12,
    torch.float32: 2e-5,
    torch.bfloat16: 2e-2,
    torch.float16: 3e-3,
}
"""Absolute error that any path may have in this dtype, whatever the naive path achieved."""

RATIO = 2.0
"""How much worse than the naive path (same dtype) a fast path may be."""

TOL = {
    "float64": 1e-12,  # two float64 computations of the same numbers (another order of sums)
    "float32": 1e-5,  # the same in float32, or float32 accumulation of half inputs
    "float64_grad": 1e-10,  # float64 gradients of two backends (longer chains of rounding)
    "float64_central_difference": 1e-6,  # a float64 derivative against a central difference (step 1e-5: h² error)
    "float64_lse": 1e-13,  # a NumPy float64 log-sum-exp turned back into weights
    "float64_few_ops": 1e-14,  # float64 results a few operations apart (one row; a row sum)
    "float64_one_op": 1e-15,  # float64 results one rounding apart (tiny inputs, NumPy)
    "tutorial_digits": 1e-4,  # numbers the tutorial prints to three or four digits
    "float64_hostile": 1e-7,  # float64 with scores scaled up to 1e6 (hostile scale/softcap): rounding × 1e6
    "float64_short_sum": 1e-9,  # a float64 sum of a handful of numbers (JSON, JavaScript) against its stated total
    "same_op_rel": 1e-12,  # relative: one operation done twice on the same numbers (bit-equal in practice)
    # float32 models and what the explainer shows of them
    "float32_weights": 1e-6,  # float32 attention weights (in [0, 1]) and statistics of them, against float64
    "float32_same_model": 1e-6,  # one float32 model, the same numbers through another batch shape, split or offset
    "float32_logits": 1e-4,  # float32 logits reached another way (LayerNorm, a vocabulary-wide head: larger values)
    "float32_long_row_sum": 1e-4,  # a 901-key float32 weight row's sum against 1
    "float32_vs_transformers": 1e-5,  # our float32 model against transformers' with the same small random weights
    "float32_real_model": 1e-4,  # a pretrained float32 model (MiniLM, 6 layers × 384) against transformers or batched
    "hf_selfattn_vs_eager": 20 * FLOOR[torch.float32],  # attn_implementation="selfattn" vs "eager": logits of a
    # 2-layer float32 model, the attention's float32 error passed on
    "must_differ": 1e-4,  # outputs that must change (other tokens, other positions): somewhere by more than this
    # the explorer page: numbers it shows, and numbers it carries in data attributes
    "page_number": 0.5e-4 + 2e-5,  # shown with 4 decimals: half a unit of the last digit, plus float32 against float64
    "page_weight": 0.5e-4 + 1e-5,  # a weight shown as a percentage with 2 decimals, plus float32 against float64
    "page_data": 1e-6,  # a float32 value the page carries (JSON) against Python's
    "terminal_percent": 0.05 + 1e-9,  # a percentage the terminal prints with 1 decimal: half a unit of it
    "json_weights": 0.5e-6 + 1e-5,  # --json weights at 6 decimals, a float32 model against transformers' eager
    # float32 on a GPU against the float64 reference (no naive path to compare with there)
    "gpu_float32_lse": 1e-4,
    "gpu_float32_grad": 1e-2,  # gradients of a 300-position float32 head: sums over 300 keys
    # reports and statistics
    "four_decimals": 1e-4,  # a number reported rounded to 4 decimals against it recomputed
    "lr_schedule_end_rel": 1e-3,  # relative: the learning rate at the last step against the schedule's floor
    "init_scale_rel": 1e-3,  # relative: the RMS of 98,304 drawn position values against the init scale
    "fourier_gram": 1e-4,  # the gram of Fourier positions: the same at one offset anywhere, 1 on its diagonal
    "loss_from_perplexity_rel": 1e-5,  # relative: a loss rebuilt from bucket perplexities (float32 log and exp)
    # the hostile campaign (tests/adversarial): per unit of the largest |reference value| (at least 1), for calls
    # whose arguments are drawn anywhere in their valid range (scales to 1e6, softcaps to 1e-3, magnitudes 1e3)
    "hostile_float64": 1e-9,
    "hostile_float32": 2e-4,
    "hostile_float16": 3e-2,
    "hostile_bfloat16": 8e-2,
    "float64_decode_vs_full": 1e-10,  # float64 logits of a cached decoding step against the full pass
    "float32_long_window_row": 1e-4,  # one float32 row of a 65,536-key windowed attention against float64 softmax
}
"""Named tolerances for comparisons that are not "fast path against float64": absolute, except the
entries whose names end in `_rel`, which are relative."""


def agree(dtype: torch.dtype) -> float:
    """TOL for two computations of the same numbers whose accumulation is float64 or float32."""
    return TOL["float64"] if dtype == torch.float64 else TOL["float32"]


def max_error(x, ref) -> float:
    x = x.detach().double().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float64)
    ref = ref.detach().double().cpu().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref, dtype=np.float64)
    assert x.shape == ref.shape, f"shape {x.shape} != reference shape {ref.shape}"
    assert np.isfinite(x).all(), "non-finite values in the result"
    return float(np.max(np.abs(x - ref), initial=0.0))


def tolerance(dtype: torch.dtype, naive_error: float) -> float:
    return RATIO * naive_error + FLOOR[dtype]


def assert_close_to_reference(out, ref64, naive_out=None, *, dtype=None, what="output"):
    """out's error against the float64 reference is at most RATIO × naive's error + FLOOR[dtype]."""
    dtype = dtype or out.dtype
    naive_error = 0.0 if naive_out is None else max_error(naive_out, ref64)
    err = max_error(out, ref64)
    tol = tolerance(dtype, naive_error)
    assert err <= tol, (
        f"{what}: error {err:.3g} against float64 > tolerance {tol:.3g} (naive error {naive_error:.3g}, {dtype})"
    )


def lse_error(lse, ref_lse) -> float:
    """Largest |lse − ref_lse| over the rows that see something (ref_lse finite); (…, Lq) each."""
    got = lse.detach().double().cpu().numpy() if isinstance(lse, torch.Tensor) else np.asarray(lse, np.float64)
    finite = np.isfinite(ref_lse)
    return max_error(got[finite], ref_lse[finite])


def assert_lse_matches(lse, ref_lse, tol: float) -> None:
    """lse is −inf exactly where the float64 reference row sees nothing, and within tol elsewhere."""
    got = lse.detach().double().cpu().numpy()
    assert (np.isneginf(got) == ~np.isfinite(ref_lse)).all(), "lse must be −inf exactly where a row sees nothing"
    assert lse_error(got, ref_lse) <= tol
