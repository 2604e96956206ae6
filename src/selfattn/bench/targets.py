"""The kernels' speed targets, read from one bench run: every ratio is of two rows measured side by side in it.

    targets(result)  [{target, cases, ratio, needed, met, note}], for the cases the run holds

    windows     Flex compiled over native ≥ 1.5 (a causal sliding window, a two-sided window, packed segments)
    decode      native over SDPA ≤ 1.0 for one decoding step (with and without GQA), and what auto took
    auto        auto's choice against the fastest backend of the case: ≤ 1.05× on idle cores, ≤ 1.1× under load
                (`--load`); the choice's own row is its time (the auto row adds only the dispatch, ~30 µs)
    bf16        native bf16 over SDPA bf16 ≥ 1.6 and over native fp32 ≥ 1.3, forward and forward + backward;
                met or not only where the CPU has a bf16 GEMM (AVX512-BF16 or AMX-BF16), else measured and
                marked as not a test of the target (native converts bf16 to fp32 there)

`met` is True / False, or None where the run cannot judge it (a row skipped, no bf16 GEMM on this CPU).
"""

from __future__ import annotations

__all__ = ["targets", "AUTO_IDLE", "AUTO_BUSY", "WINDOW_OVER_FLEX", "BF16_OVER_SDPA", "BF16_OVER_FP32"]

WINDOW_OVER_FLEX = 1.5
AUTO_IDLE = 1.05
AUTO_BUSY = 1.1
BF16_OVER_SDPA = 1.6
BF16_OVER_FP32 = 1.3

_WINDOW_CASES = ("sliding_window", "two_sided", "packed")
_DECODE_CASES = ("decode", "decode_gqa")
_BF16_PAIRS = (("causal_bf16", "causal_forward"), ("forward_backward_bf16", "forward_backward"))


def _times(case: dict) -> dict[str, float]:
    return {row["backend"]: row["ms"] for row in case["rows"] if row["ms"] is not None}


def _row(target: str, cases: str, ratio: float | None, needed: str, met: bool | None, note: str = "") -> dict:
    return {"target": target, "cases": cases, "ratio": ratio, "needed": needed, "met": met, "note": note}


def targets(result: dict) -> list[dict]:
    """The targets the run's cases can speak to (see the module docstring), in that order."""
    cases = {case["name"]: case for case in result["cases"]}
    busy = result["machine"].get("busy_processes", 0)
    out = []
    for name in _WINDOW_CASES:
        if name in cases:
            ms = _times(cases[name])
            ratio = ms["flex"] / ms["native"] if {"flex", "native"} <= ms.keys() else None
            out.append(
                _row(
                    "native faster than Flex compiled",
                    name,
                    ratio,
                    f"≥ {WINDOW_OVER_FLEX}",
                    None if ratio is None else ratio >= WINDOW_OVER_FLEX,
                    "" if ratio is not None else "a row was skipped",
                )
            )
    for name in _DECODE_CASES:
        if name in cases:
            ms, chosen = _times(cases[name]), _chosen(cases[name])
            ratio = ms["native"] / ms["sdpa"] if {"native", "sdpa"} <= ms.keys() else None
            note = "" if chosen is None else f"auto takes {chosen}: {ms[chosen] / ms['sdpa']:.2f}× SDPA's time"
            met = None if ratio is None else ratio <= 1.0
            out.append(_row("native's time over SDPA's", name, ratio, "≤ 1.00", met, note))
    limit = AUTO_BUSY if busy else AUTO_IDLE
    for name, case in cases.items():
        chosen = _chosen(case)
        ms = _times(case)
        if chosen is None or chosen not in ms:
            continue
        fastest = min((b for b in ms if b != "auto"), key=ms.__getitem__)
        ratio = ms[chosen] / ms[fastest]
        note = f"auto takes {chosen}" + ("" if chosen == fastest else f"; fastest: {fastest}")
        out.append(_row("auto's choice over the fastest", name, ratio, f"≤ {limit}", ratio <= limit, note))
    half_gemm = result["machine"].get("bf16_gemm", False)
    for half, full in _BF16_PAIRS:
        if half not in cases:
            continue
        ms_half = _times(cases[half])
        judged = None if not half_gemm else True
        why = "" if half_gemm else "this CPU has no bf16 GEMM (no AVX512-BF16 or AMX-BF16): not a test of the target"
        if {"native", "sdpa"} <= ms_half.keys():
            ratio = ms_half["sdpa"] / ms_half["native"]
            out.append(
                _row(
                    "native bf16 faster than SDPA bf16",
                    half,
                    ratio,
                    f"≥ {BF16_OVER_SDPA}",
                    judged and ratio >= BF16_OVER_SDPA,
                    why,
                )
            )
        ms_full = _times(cases[full]) if full in cases else {}
        if "native" in ms_half and "native" in ms_full:
            ratio = ms_full["native"] / ms_half["native"]
            out.append(
                _row(
                    "native bf16 faster than native fp32",
                    f"{half} / {full}",
                    ratio,
                    f"≥ {BF16_OVER_FP32}",
                    judged and ratio >= BF16_OVER_FP32,
                    why,
                )
            )
    return out


def _chosen(case: dict) -> str | None:
    """The backend auto ran for this case, or None (no auto row, or it was refused)."""
    return next((row["chosen"] for row in case["rows"] if row["backend"] == "auto" and row["ms"] is not None), None)
