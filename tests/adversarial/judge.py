"""`named`: judge one hostile call like `library.call`, and also judge what its refusal says."""

from __future__ import annotations

from .tally import Tally, raised_outside

__all__ = ["named"]


def named(tally: Tally, label: str, fn, says: tuple[str, ...] = (), check=None, expect: str | None = "error") -> str:
    """`call`, but a refusal must come from selfattn itself and say each of `says` (case-insensitive),
    else it is "wrong" (an unclear error: a deep torch message, or one that names the wrong thing)."""
    try:
        value = fn()
    except (TypeError, ValueError, OSError) as exc:
        text = str(exc).lower()
        if expect == "ok":
            return tally.record("wrong", label, f"valid input refused: {type(exc).__name__}: {exc}")
        if raised_outside(exc):
            return tally.record("wrong", label, f"unclear error from outside selfattn: {type(exc).__name__}: {exc}")
        missing = [s for s in says if s.lower() not in text]
        if missing or not text.strip():
            return tally.record("wrong", label, f"error does not say {missing}: {type(exc).__name__}: {exc}")
        return tally.record("error", label)
    except Exception as exc:  # noqa: BLE001 — the point is to count these
        return tally.record("traceback", label, f"{type(exc).__name__}: {str(exc)[:200]}")
    if expect == "error":
        return tally.record("wrong", label, "accepted, should be refused")
    why = check(value) if check is not None else None
    return tally.record("wrong", label, why) if why else tally.record("ok", label)
