"""The words of the page's ÷√d_k step for an intervention (the controls themselves come from the registry,
`interventions.as_data()`, which `report.page_data` ships as the page's `interventions`).

    scale_words(doc["experiment"]["applied"], head_dim) -> {stage, row, how}: {zh, en} each
"""

from __future__ import annotations

from .texts import both

__all__ = ["scale_words"]


SCALE_KEYS = {  # (÷√d_k kept, T ≠ 1) -> what the scale is
    (True, False): "page.scale_on",
    (True, True): "page.scale_on_t",
    (False, False): "page.scale_off",
    (False, True): "page.scale_off_t",
}


def scale_words(applied: dict, head_dim: int) -> dict[str, dict[str, str]]:
    """The words of the ÷√d_k step for an intervention in its one shape (`Intervention.as_applied`): the step's
    and the table row's name, and what the scale is (1/√d_k, 1/(√d_k·T), 1, 1/T)."""
    scaling = "no_scaling" not in applied
    t = float(applied.get("temperature", {}).get("t", 1.0))
    return {
        "stage": both("page.scaled" if scaling else "page.st_scaled_off"),
        "row": both("page.scaled" if scaling else "page.row_scaled_off"),
        "how": both(SCALE_KEYS[scaling, t != 1], d=head_dim, t=_number(t)),
    }


def _number(x: float) -> str:
    """A number as JavaScript's String(x) writes it (1, 2, 0.37): what the page showed for T."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))
