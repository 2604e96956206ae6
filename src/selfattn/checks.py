"""Value checks at the API edge, written once: each returns the normalised value or raises a
`TypeError`/`ValueError` that names the argument and the value it got.

    integer("window", w, low=1)              -> int        (bool refused: True is not 1 here)
    real("temperature", t, low=0, low_open=True, high=1e4)  -> float, finite
    boolean("causal", c)                     -> bool

Pure Python (no torch, no NumPy import) so that `selfattn.reference` can use it; NumPy scalars
pass because they register as `numbers.Integral` / `numbers.Real`.
"""

from __future__ import annotations

import math
import numbers

__all__ = ["integer", "real", "boolean", "optional_integer"]


def _describe(x) -> str:
    return f"{type(x).__name__} {x!r}"


def integer(name: str, x, *, low: int | None = None, high: int | None = None) -> int:
    """`x` as an int in [low, high] (either bound optional); bools and floats are refused."""
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {_describe(x)}")
    x = int(x)
    if low is not None and x < low:
        raise ValueError(f"{name} must be >= {low}, got {x}")
    if high is not None and x > high:
        raise ValueError(f"{name} must be <= {high}, got {x}")
    return x


def optional_integer(name: str, x, *, low: int | None = None, high: int | None = None) -> int | None:
    """None, or `integer(name, x, low=low, high=high)`."""
    return None if x is None else integer(name, x, low=low, high=high)


def real(
    name: str,
    x,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """`x` as a finite float within the bounds (closed unless `low_open` / `high_open`); bools refused."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {_describe(x)}")
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {x}")
    if low is not None and (x < low or (low_open and x == low)):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low:g}, got {x:g}")
    if high is not None and (x > high or (high_open and x == high)):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high:g}, got {x:g}")
    return x


def boolean(name: str, x) -> bool:
    """`x` if it is a bool (not 0/1, not a tensor)."""
    if not isinstance(x, bool):
        raise TypeError(f"{name} must be a bool, got {_describe(x)}")
    return x
