"""The web app's surface of the hostile campaign: a real `selfattn serve` under hostile bodies, framing, Host
headers, slow and short bodies, Unicode, and concurrent requests. Marked `hostile` (minutes each)."""

from __future__ import annotations

import pytest

from tests.live_server import Server

from ..tally import assert_clean
from . import cases, together

pytestmark = pytest.mark.hostile


def _no_traceback(server: Server, tally) -> None:
    if "Traceback" in server.log.read_text(errors="replace"):
        tally.record("traceback", "server log", "Traceback in its output")


def test_hostile_requests(tmp_path):
    with Server(tmp_path) as server:
        tally = cases.run(server)
        _no_traceback(server, tally)
    assert_clean([tally])


def test_unicode_and_control_characters(tmp_path):
    with Server(tmp_path) as server:
        tally = cases.unicode_cases(server)
        _no_traceback(server, tally)
    assert_clean([tally])


def test_requests_sent_together_equal_the_same_sent_alone(tmp_path):
    assert_clean([together.run_http(tmp_path)])
