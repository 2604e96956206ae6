"""The one table of tolerances, and the rule every fast path is judged by.

The rule: a fast path's error against the float64 reference may be at most RATIO (about twice) the
error of the naive path in the same dtype, plus a per-dtype FLOOR for the cases where the naive path
happens to be (nearly) exact and the fast path rounds differently. Every other tolerance a test uses
is a named entry of TOL, in its group, saying what error it bounds and why it has that size; no test
writes a tolerance as a number in place (tests/test_tolerance_literals.py holds them to that).
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

CLEARLY_APART = 100
"""How many times a tolerance two numbers must differ by for a test to call them different: an effect a test shows
(an ablation moving the logit difference, a BOS changing a score) is this far past the rounding it is checked to."""

_PAGE_WEIGHT = 0.5e-4 + 1e-5

TOL = {
    # --- float64: two computations of the same numbers -------------------------------------------------------
    "float64": 1e-12,  # two float64 computations of the same numbers (another order of sums)
    "float64_rel": 1e-10,  # relative: float64 against NumPy's float64 over a softmax and a product
    "float64_grad": 1e-10,  # float64 gradients of two backends (longer chains of rounding)
    "float64_grad_rel": 1e-9,  # relative: the same gradients, where they are large (compiled against eager)
    "float64_compiled": 1e-10,  # a float64 block compiled (torch.compile) against the same block run eagerly
    "float64_compiled_rel": 1e-10,  # relative: the same
    "float64_model_loss": 1e-10,  # a float64 decoder's loss by two layouts or processes (a whole model's rounding)
    "float64_central_difference": 1e-6,  # a float64 derivative against a central difference (step 1e-5: h² error)
    "float64_model_float32_norm_difference": 2e-5,  # a float64 transformers Llama's derivative against a central
    # difference of step 1e-3: its RMSNorm rounds to float32 (1e-7 of LD over the step) plus the h² term
    "float64_lse": 1e-13,  # a NumPy float64 log-sum-exp turned back into weights
    "float64_few_ops": 1e-14,  # float64 results a few operations apart (one row; a row sum)
    "float64_one_op": 1e-15,  # float64 results one rounding apart (tiny inputs, NumPy)
    "float64_hostile": 1e-7,  # float64 with scores scaled up to 1e6 (hostile scale/softcap): rounding × 1e6
    "float64_short_sum": 1e-9,  # a float64 sum of a handful of numbers (JSON, JavaScript, a shift by 100) against
    # its stated total
    "same_op_rel": 1e-12,  # relative: one operation done twice on the same numbers (bit-equal in practice)
    "few_ops_rel": 1e-11,  # relative: the same numbers through a few more operations (a scale folded in first)
    # --- float32 computations against float64 or another float32 path ----------------------------------------
    "float32": 1e-5,  # the same in float32, or float32 accumulation of half inputs
    "float32_grad": 1e-5,  # a float32 gradient (dQ of one head) against the float64 naive backend's
    "float32_grad_rel": 1e-4,  # relative: the same, where the gradient is large
    "tutorial_digits": 1e-4,  # numbers the tutorial prints to three or four digits
    # --- float32 models and what the explainer shows of them -------------------------------------------------
    "float32_weights": 1e-6,  # float32 attention weights (in [0, 1]) and statistics of them, against float64
    "float32_model_weights": 1e-5,  # float32 attention weights of a whole model's forward (several layers)
    # against the float64 reference: float32_weights' error grown through the layers
    "float32_weight_statistics": 1e-5,  # means and entropies (bits) of float32 weights computed another way (a
    # log, or weights recomputed from Q, K and the lse): ten times float32_weights
    "float32_weight_mean": 1e-5,  # a mean or sum of a float32 model's weights (a score, a share, a pair's weight)
    # against the same from transformers' or the float64 reference's weights
    "float32_same_model": 1e-6,  # one float32 model, the same numbers through another batch shape, split or offset
    "float32_logits": 1e-4,  # float32 logits reached another way (LayerNorm, a vocabulary-wide head: larger values)
    "float32_logit_ratio": 1e-4,  # a patching share (a ratio of float32 logit differences) against plain hooks'
    "same_ratio": 1e-6,  # a float32 ratio whose numerator and denominator are the same computation: exactly 1
    "float32_loss": 1e-5,  # a loss or a KL divergence (bits) of a float32 model's logits against transformers'
    "float32_probability": 1e-6,  # a softmax probability (in [0, 1]) of a float32 model's last logits, against
    # the same from transformers' logits
    "float32_lens_probability": 1e-5,  # the same through the final norm from an earlier layer (larger values)
    "float32_long_row_sum": 1e-4,  # a 901-key float32 weight row's sum against 1
    "float32_vs_transformers": 1e-5,  # our float32 model against transformers' with the same small random weights
    "float32_hf_stages": 1e-4,  # a small float32 transformers model's stages (x, q, k, v, scores, outputs) as the
    # explainer reads them, against hooks on the model: values of a few units, float32 rounding of each
    "float32_norm_fit": 1e-3,  # a float32 residual against a float64 refit of its norm (one gain per column, an
    # affine fit): float32 hidden states divided by their float32 RMS
    "float32_real_model": 1e-4,  # a pretrained float32 model (MiniLM, 6 layers × 384) against transformers or batched
    "float32_real_model_logits": 1e-3,  # logit differences of the pretrained SmolLM2 (30 layers): larger logits
    "float32_real_model_logit_ratio": 1e-3,  # a patching share of the pretrained SmolLM2 against plain hooks'
    "hf_selfattn_vs_eager": 20 * FLOOR[torch.float32],  # attn_implementation="selfattn" vs "eager": logits of a
    # 2-layer float32 model, the attention's float32 error passed on
    "planted_head": 1e-3,  # a planted head's float32 weights (and the means of them) against float64's
    "transformer_lens_rounding": 2e-3,  # TransformerLens rounds its "abs" score to 3 decimals: float32 may move
    # the rounding by one unit, and the half unit of rounding comes on top
    "float16_thumbnail": 1e-3,  # a float16 thumbnail of weights in [0, 1] (11 bits: steps of 2⁻¹¹ below 1)
    "float16_thumbnail_rel": 1e-3,  # relative: the same
    # --- p-values and Monte Carlo ------------------------------------------------------------------------
    "p_value_rel": 1e-3,  # relative: a permutation p-value of float32 weights; it amplifies their rounding by 1/sd
    "p_value_same_weights_rel": 1e-4,  # relative: the same for a tiny model's weights read by us and by hooks
    "p_value_floor": 1e-12,  # absolute, beside a relative p-value tolerance: p-values far below any α
    "p_value_underflow": 1e-300,  # absolute, beside same_op_rel: p-values that underflow to (nearly) 0
    "monte_carlo_p": 0.03,  # an analytic p-value against 4000 permutation draws: the draws' sampling error ...
    "monte_carlo_p_rel": 0.3,  # ... and its part that grows with p (the normal approximation's tail)
    "monte_carlo_sd_rel": 0.05,  # relative: an analytic standard deviation against that of 4000 draws
    "monte_carlo_floor": 1e-3,  # absolute, beside monte_carlo_mean's three standard errors
    # --- outputs that must change ---------------------------------------------------------------------------
    "must_differ": 1e-4,  # outputs that must change (other tokens, other positions): somewhere by more than this
    "must_differ_logits": 1e-3,  # logits an ablation must change: somewhere by more than ten times float32_logits
    "must_differ_weights": 1e-2,  # weights an intervention must change: somewhere by more than this
    # --- the explorer page: numbers it shows, and numbers it carries in data attributes ----------------------
    "page_number": 0.5e-4 + 2e-5,  # shown with 4 decimals: half a unit of the last digit, plus float32 against float64
    "terminal_percent": 0.05 + 1e-6,  # a weight the terminal prints as a percentage with 1 decimal
    "page_weight": _PAGE_WEIGHT,  # a weight shown as a percentage with 2 decimals, plus float32 against float64
    "page_weight_difference": 2 * _PAGE_WEIGHT,  # the difference of two weights shown so: two roundings
    "page_data": 1e-6,  # a float32 value the page carries (JSON) against Python's
    "float16_rel": 2**-11,  # relative: a number rounded to float16 (half a unit in binary16's last place)
    # relative: a product of two numbers each rounded to float16 (half a unit in binary16's last place, 2^-11,
    # twice, and their product), against the product of the exact numbers: what q[d]·k[d] of the page's q, k carries
    "float16_product_rel": 2 * 2**-11 + 2**-22,
    "json_weights": 0.5e-6 + 1e-5,  # --json weights at 6 decimals, a float32 model against transformers' eager
    "layers_page_weight": 1e-4,  # a weight the layers page carries or shows, against the trace's
    "rounded_to_4_decimals": 0.5e-4 + 1e-9,  # a number stored rounded to 4 decimals: half a unit, plus float64's
    "rounded_to_2_decimals": 0.005 + 1e-9,  # a number shown with 2 decimals: half a unit, plus float64's
    "percent_rounded_to_1_decimal": 0.05 + 1e-4,  # a percentage shown with 1 decimal: half a unit, plus float32's
    "colour_channel": 1,  # an 8-bit colour channel: the drawn colour and the expected one round to neighbours
    "pixel": 1.0,  # drawn boxes: aligned within a pixel; different widths differ by more than one
    "drawn_ratio_rel": 1e-6,  # relative: ratios of drawn sizes that must be equal (line width ∝ weight)
    # --- float32 on a GPU against the float64 reference (no naive path to compare with there) ---------------
    "gpu_float32_lse": 1e-4,
    "gpu_float32_grad": 1e-2,  # gradients of a 300-position float32 head: sums over 300 keys
    # --- reports and statistics -------------------------------------------------------------------------
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

GRADIENT_SUM_FACTOR = 8
"""A gradient through a compiled or transformed call sums every output cell's over the keys: its tolerance is the
forward's × the cells × this (`kernels/transform_cells.py`)."""
MONTE_CARLO_SIGMAS = 3
"""How many standard errors a Monte Carlo mean may lie from its expectation (3: a 0.3 % false alarm)."""


def monte_carlo_mean(draws) -> float:
    """How far the mean of `draws` (1-D) may lie from the expectation it estimates: MONTE_CARLO_SIGMAS standard
    errors, plus TOL["monte_carlo_floor"]."""
    draws = np.asarray(draws, dtype=np.float64)
    return MONTE_CARLO_SIGMAS * float(draws.std()) / np.sqrt(len(draws)) + TOL["monte_carlo_floor"]


def one_step(scale: float) -> float:
    """A value stored as a whole number of steps 1/scale lies within one step of the value it stands for."""
    return 1 / scale


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
