"""The CLI's surface of the hostile campaign: every subcommand as a subprocess under hostile arguments, texts,
paths (existing files, FIFOs and devices with --force) and model files. Marked `hostile` (minutes each)."""

from __future__ import annotations

import pytest

from ..tally import assert_clean
from . import cases, model_files, text_and_files

pytestmark = pytest.mark.hostile


@pytest.mark.parametrize("surface", [cases, text_and_files, model_files], ids=lambda m: m.__name__.rsplit(".")[-1])
def test_the_cli_campaign(surface, tmp_path):
    assert_clean([surface.run(tmp_path / "work")])
