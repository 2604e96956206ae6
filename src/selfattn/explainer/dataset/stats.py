"""The mean of a number over a dataset's prompts and its 95 % confidence interval: Student's t-interval.

    mean_ci([0.2, 0.4, 0.3]) -> Mean(mean=0.3, low=…, high=…, n=3, sd=0.1, level=0.95)
    t_quantile(0.975, 19)    -> 2.0930240544…   (the two-sided 95 % critical value with 19 degrees of freedom)

The interval is mean ± t_{1−α/2, n−1} · sd / √n, sd the sample standard deviation (n − 1 in its denominator): exact
for normally distributed per-prompt numbers, and the usual large-sample interval otherwise. The t quantile is
computed here (the regularized incomplete beta function by its continued fraction, then bisection), so the package
needs no SciPy; tests/explainer/pipeline/test_dataset.py checks it against printed t-tables and SciPy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["LEVEL", "METHOD", "Mean", "mean_ci", "t_quantile", "t_two_sided_tail"]

LEVEL = 0.95
"""The confidence level of every interval of a dataset run."""
METHOD = "t"
"""How the interval is made: Student's t on the per-prompt numbers (named in the results and the CSV doc)."""

_FRACTION_STEPS = 300
"""Most terms of the incomplete beta's continued fraction (it converges in far fewer for df ≤ 10⁶)."""
_FRACTION_EPS = 1e-16
"""Relative change below which the continued fraction has converged (float64's rounding)."""
_TINY = 1e-300
"""Lentz's guard against a zero denominator."""
_BISECTIONS = 200
"""Halvings of the quantile's bracket: far past float64's 53 bits."""


@dataclass(frozen=True)
class Mean:
    """A number's mean over the prompts that have it, with its confidence interval.

    mean       the mean (None when no prompt has the number)
    low, high  the interval at `level` (None for fewer than two prompts: no spread to measure)
    n          how many prompts have the number;  sd  their sample standard deviation (None below two)"""

    mean: float | None
    low: float | None
    high: float | None
    n: int
    sd: float | None
    level: float = LEVEL

    def as_dict(self) -> dict:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n, "sd": self.sd}


def mean_ci(values: Iterable[float | None], level: float = LEVEL) -> Mean:
    """The mean and t-interval (the module doc) of `values`, the None ones left out."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    xs = [float(v) for v in values if v is not None]
    n = len(xs)
    if n == 0:
        return Mean(None, None, None, 0, None, level)
    mean = math.fsum(xs) / n
    if n == 1:
        return Mean(mean, None, None, 1, None, level)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile(1 - (1 - level) / 2, n - 1) * sd / math.sqrt(n)
    return Mean(mean, mean - half, mean + half, n, sd, level)


def t_two_sided_tail(t: float, df: float) -> float:
    """P(|T| ≥ t) for Student's T with `df` degrees of freedom (t ≥ 0): I_{df/(df+t²)}(df/2, 1/2)."""
    if t < 0 or df <= 0:
        raise ValueError(f"need t >= 0 and df > 0, got t={t!r}, df={df!r}")
    return _betainc(df / 2, 0.5, df / (df + t * t))


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom, for p in [0.5, 1): the t with P(T ≤ t) = p."""
    if not 0.5 <= p < 1:
        raise ValueError(f"p must be in [0.5, 1), got {p!r}")
    if df <= 0:
        raise ValueError(f"df must be > 0, got {df!r}")
    tail = 2 * (1 - p)  # two-sided: P(|T| ≥ t)
    low, high = 0.0, 1.0
    while t_two_sided_tail(high, df) > tail:
        low, high = high, high * 2
    for _ in range(_BISECTIONS):
        mid = (low + high) / 2
        if t_two_sided_tail(mid, df) > tail:
            low = mid
        else:
            high = mid
        if high - low <= _FRACTION_EPS * high:
            break
    return (low + high) / 2


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), x in [0, 1] (Numerical Recipes' betai)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _fraction(a, b, x) / a
    return 1 - front * _fraction(b, a, 1 - x) / b


def _fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b), by Lentz's method."""
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _FRACTION_STEPS + 1):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1 + aa * d
            d = 1 / (d if abs(d) > _TINY else _TINY)
            c = 1 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1) < _FRACTION_EPS:
            break
    return h
