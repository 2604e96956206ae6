"""issue 18 item 14: ordinary text is accepted (CLI and HTTP), real control characters are refused."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from selfattn.cli import main
from selfattn.explainer.session import check_text
from selfattn.explainer.web import server
from tests.explainer.tiny import tiny_explainer

ORDINARY = {
    "\u3000": "ideographic space (Chinese text)",
    "\u00a0": "no-break space",
    "\u200d": "zero-width joiner (emoji sequences)",
    "\ufeff": "byte order mark / zero-width no-break space",
    "\u00ad": "soft hyphen",
    "\u200e": "left-to-right mark",
    "\u2028": "line separator",
}
REFUSED = {
    "\x00": "control character '\\x00' at position 2",
    "\x1b": "control character '\\x1b' at position 2",
    "\r": "control character '\\r' at position 2",
    "\x7f": "control character '\\x7f' at position 2",
    "\x85": "control character '\\x85' at position 2",  # C1: NEXT LINE
    "\x9b": "control character '\\x9b' at position 2",  # C1: CSI, a terminal escape by itself
    "\ud800": "control character '\\ud800' at position 2 (a lone surrogate",
    "\u202e": "the bidirectional control U+202E at position 2",
    "\u2066": "the bidirectional control U+2066 at position 2",
}


@pytest.mark.parametrize("ch", ORDINARY, ids=ORDINARY.values())
def test_ordinary_characters_are_text(ch):
    text = f"一只{ch}蓝色怪兽"
    assert check_text(text) == text
    assert check_text("\t一只\n蓝色") == "\t一只\n蓝色"


@pytest.mark.parametrize("ch, message", REFUSED.items())
def test_control_characters_are_refused(ch, message):
    with pytest.raises(ValueError, match="text contains ") as refused:
        check_text(f"一只{ch}蓝色怪兽")
    assert message in str(refused.value)


def test_the_cli_explains_chinese_text_with_an_ideographic_space(capsys, tiny_checkpoint):
    assert main(["explain", "一只蓝色怪兽\u3000走进森林", "--model", str(tiny_checkpoint), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["text"] == "一只蓝色怪兽\u3000走进森林"
    assert main(["explain", "一只\u202e蓝色", "--model", str(tiny_checkpoint)]) == 1
    assert "bidirectional control U+202E" in capsys.readouterr().err


def test_the_server_explains_it_too():
    client = TestClient(server.create_app(tiny_explainer()))
    for ch in ORDINARY:
        r = client.post("/api/explain", json={"text": f"一只{ch}蓝色怪兽"})
        assert r.status_code == 200, (hex(ord(ch)), r.text)
    r = client.post("/api/explain", json={"text": "一只\u202e蓝色"})
    assert r.status_code == 422 and "bidirectional control U+202E" in r.json()["detail"]
