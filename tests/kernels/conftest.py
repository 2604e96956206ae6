"""Fixtures shared by the kernel tests."""

import pytest

from selfattn.kernels import native, native_build


@pytest.fixture(scope="session")
def native_built():
    """Build the native kernel once per session (it is cached on disk); skip only if there is no compiler."""
    missing = native_build._missing_tools()
    if missing is not None and not native.is_built():
        pytest.skip(f"the native kernel cannot be built here: {missing}")
    return native.build()


def pytest_configure(config):
    """The `slow` marker (a test of minutes: fresh processes that each compile), until pyproject registers it."""
    config.addinivalue_line("markers", "slow: minutes, not seconds (deselect with -m 'not slow')")
