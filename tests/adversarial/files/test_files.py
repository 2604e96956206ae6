"""Output paths, the GGUF cache's key and ranges in arguments, through the library (`files.cases`): an ordinary
test (seconds), so the fourth reliability pass's findings stay fixed in every run."""

from __future__ import annotations

from ..tally import assert_clean
from . import cases


def test_outputs_the_cache_key_and_ranges_hold(tmp_path):
    assert_clean([cases.run(tmp_path / "work")])
