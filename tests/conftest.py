"""Every test runs offline: nothing may reach the Hugging Face hub (set before transformers or
huggingface_hub is imported, and inherited by the subprocesses the tests start). Every test is marked
with its tiers (`browser`, `real_model`, `slow`) by the tables of tests/tiers.py."""

import os

import pytest

from tests.tiers import tiers_of

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for tier in tiers_of(item.path.as_posix(), item.name, getattr(item, "fixturenames", ())):
            item.add_marker(tier)
