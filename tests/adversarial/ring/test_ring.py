"""Ring attention's surface of the hostile campaign: process groups of 2-5 ranks under hostile arguments, every
answer against the float64 spec. Marked `hostile`."""

from __future__ import annotations

import pytest

from ..tally import assert_clean
from . import cases

pytestmark = pytest.mark.hostile


def test_the_ring_campaign(tmp_path):
    assert_clean([cases.run(tmp_path)])
