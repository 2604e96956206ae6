"""A part used without its extra says which extra, under the name the user called (`selfattn.extras`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from selfattn import extras


def _blocked(module: str, code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter where `module` cannot be imported (None in sys.modules)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    prelude = f"import sys; sys.modules[{module!r}] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, env=env, timeout=120)


CATCH = "try:\n    {call}\nexcept ImportError as e:\n    print(type(e).__name__, '|', e)\n"


@pytest.mark.parametrize("name", ["head_view", "model_view", "explain", "detect_head"])
def test_an_explainer_name_without_the_extra_names_itself(name):
    done = _blocked("jieba", "import selfattn\n" + CATCH.format(call=f"selfattn.{name}"))
    assert done.returncode == 0, done.stderr
    kind, _, message = done.stdout.strip().partition(" | ")
    assert kind == "MissingExtra" and message.startswith(f"selfattn.{name} needs the [explain] extra"), done.stdout
    assert "jieba is not installed" in message and "pip install 'selfattn[explain]'" in message
    assert "bundled model" not in message


def test_hf_register_without_transformers_is_one_clear_import_error():
    done = _blocked("transformers", "import selfattn.hf\n" + CATCH.format(call="selfattn.hf.register()"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "MissingExtra | selfattn.hf.register() needs the [explain] extra (transformers is not installed): "
        "pip install 'selfattn[explain]'"
    )


def test_require_checks_only_the_modules_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)
    extras.require("explain", "x", modules=("transformers",))  # gguf missing does not matter here
    with pytest.raises(extras.MissingExtra, match=r"x needs the \[explain\] extra \(gguf is not installed\)"):
        extras.require("explain", "x", modules=("gguf", "transformers"))
    with pytest.raises(ValueError, match="'numpy' is not a module of the \\[explain\\] extra"):
        extras.require("explain", "x", modules=("numpy",))
