"""The hostile campaign's settings: the `hostile` marker and the "hostile" hypothesis profile.

    pytest -m hostile --hypothesis-profile=hostile tests/adversarial     the whole campaign (tens of minutes)
    pytest tests/adversarial                                             the regressions only (hostile skipped)

A test marked `hostile` runs only when chosen: `-m hostile` (or any -m naming it) or the "hostile" profile;
otherwise it is skipped with the command that runs it, so `make test` stays as fast as it was. The unmarked
tests here are ordinary regressions and always run.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from .library.cases import ATTENTION_CASES

settings.register_profile(
    "hostile",
    max_examples=ATTENTION_CASES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
"""The campaign's size: as many random attention calls as `scripts/hostile_run.py` makes (ATTENTION_CASES)."""

RUN = "pytest -m hostile --hypothesis-profile=hostile tests/adversarial"


def pytest_configure(config):
    config.addinivalue_line("markers", f"hostile: the hostile campaign, minutes per surface ({RUN})")


def pytest_collection_modifyitems(config, items):
    chosen = "hostile" in (config.getoption("markexpr", "") or "") or (
        config.getoption("hypothesis_profile", None) == "hostile"
    )
    if chosen:
        return
    skip = pytest.mark.skip(reason=f"the hostile campaign runs when chosen: {RUN}")
    for item in items:
        if item.get_closest_marker("hostile") is not None:
            item.add_marker(skip)
