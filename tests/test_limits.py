"""One limits table (`selfattn.limits`): every size and the one parameter budget, bounded by the machine.

issue 16: two config-limit tables with different numbers (model/decoder.py, explain/sources.py) and two
parameter budgets (2e9 and 80e9). issue 18 item 8: a 3.4e9-parameter llama config with a 1-element
safetensors file made `explain --model` allocate the whole model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from selfattn import limits

GIB = 1 << 30


def test_one_table_of_sizes_under_both_families_of_field_names():
    from selfattn.explainer.source import resolve as sources
    from selfattn.model import decoder, encoder

    assert sources.LIMITS is limits.TRANSFORMERS_LIMITS
    assert not hasattr(sources, "MAX_PARAMETERS") and not hasattr(decoder, "LIMITS")
    assert not hasattr(encoder, "LIMITS")
    same = [
        ("n_layers", "num_hidden_layers", "layers"),
        ("d_model", "hidden_size", "width"),
        ("n_heads", "num_attention_heads", "heads"),
        ("n_kv_heads", "num_key_value_heads", "heads"),
        ("d_ff", "intermediate_size", "hidden"),
        ("vocab_size", "vocab_size", "vocab"),
        ("max_len", "max_position_embeddings", "positions"),
    ]
    for ours, theirs, size in same:
        assert limits.CONFIG_LIMITS[ours] == limits.TRANSFORMERS_LIMITS[theirs] == limits.SIZES[size], ours
    assert set(limits.TRANSFORMERS_LIMITS.values()) <= set(limits.SIZES.values())
    assert set(limits.CONFIG_LIMITS.values()) <= set(limits.SIZES.values())


def test_our_configs_read_the_table():
    from selfattn.model.decoder import DecoderConfig
    from selfattn.model.encoder import EncoderConfig

    top = limits.SIZES["layers"]
    with pytest.raises(ValueError, match=f"n_layers must be <= {top}, got {top + 1}"):
        DecoderConfig(vocab_size=5, d_model=8, n_layers=top + 1, n_heads=2)
    with pytest.raises(ValueError, match=f"n_layers must be <= {top}, got {top + 1}"):
        EncoderConfig(vocab_size=5, d_model=8, n_layers=top + 1, n_heads=2, d_ff=8)


@pytest.mark.parametrize(
    "available, estimate, refused",
    [
        (16 * GIB, 2_000_000_000, False),
        (16 * GIB, 2_200_000_000, True),
        (4 * GIB, 600_000_000, True),
        (1 << 40, 100_000_000_001, True),
    ],
)
def test_the_budget_is_the_smaller_of_the_limit_and_what_memory_holds(available, estimate, refused):
    # 16 GiB: half of it holds 2,147,483,648 float32 parameters; 4 GiB: 536,870,912; 1 TiB: 137 G, above MAX_PARAMETERS
    budget = min(100_000_000_000, available // 2 // 4)
    assert limits.parameter_budget(available) == budget
    if not refused:
        limits.check_parameters(estimate, "m", available=available)
        return
    with pytest.raises(ValueError) as e:
        limits.check_parameters(estimate, "m", "a × b", available=available)
    text = str(e.value)
    assert f"m describes about {estimate:,} parameters (a × b), {estimate * 4 / GIB:.1f} GiB as float32" in text
    assert f"{available / GIB:.1f} GiB of memory available" in text


def test_a_decoder_config_is_bounded_by_the_memory_available(monkeypatch):
    from selfattn.model.decoder import DecoderConfig

    monkeypatch.setattr(limits, "available_memory", lambda: 256 << 20)  # 256 MiB: 33,554,432 parameters
    with pytest.raises(ValueError, match=r"more than this machine can hold .* 0\.2 GiB of memory available"):
        DecoderConfig(vocab_size=1000, d_model=1024, n_layers=4, n_heads=8)
    DecoderConfig(vocab_size=1000, d_model=128, n_layers=2, n_heads=4)  # 0.5 M parameters: fine


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/meminfo is Linux's")
def test_the_memory_available_is_the_kernels_figure():
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    total = int(fields["MemTotal"].split()[0]) * 1024
    available = limits.available_memory()
    assert 0 < available <= total


def _llama_folder(tmp_path: Path) -> tuple[Path, int]:
    """A llama config of about 3.4e9 parameters beside a 1-element safetensors file."""
    import torch
    from safetensors.torch import save_file

    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 3072,
        "intermediate_size": 8192,
        "num_hidden_layers": 28,
        "num_attention_heads": 24,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
    }
    folder = tmp_path / "llama-3b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    save_file({"model.embed_tokens.weight": torch.zeros(1)}, str(folder / "model.safetensors"))
    w, ff = config["hidden_size"], config["intermediate_size"]
    estimate = config["num_hidden_layers"] * (4 * w * w + 3 * w * ff) + 2 * config["vocab_size"] * w
    return folder, estimate


def test_a_transformers_config_over_the_budget_is_refused_before_the_model_is_built(tmp_path, monkeypatch):
    from selfattn.explainer.session import Explainer

    folder, estimate = _llama_folder(tmp_path)
    assert 3.3e9 < estimate < 3.5e9

    def built(*args, **kwargs):
        raise AssertionError("the model was built before its config was refused")

    monkeypatch.setattr(Explainer, "_from_transformers", built)
    monkeypatch.setattr(limits, "available_memory", lambda: 16 * GIB)  # half holds 2.1 G float32 parameters
    with pytest.raises(ValueError) as e:
        Explainer.load(folder)
    text = str(e.value)
    assert f"describes about {estimate:,} parameters" in text
    assert "more than this machine can hold" in text and "of the 16.0 GiB of memory available" in text, text
    assert str(folder / "config.json") in text


def test_every_budget_in_bytes_is_defined_in_limits_alone():
    """Every `*_BYTES` constant of the package is assigned in selfattn/limits.py and imported where it is used, so a
    reader finds every budget in one file (an AST scan of every module's top-level assignments)."""
    import ast
    from pathlib import Path

    import selfattn

    root = Path(selfattn.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "limits.py" and path.parent == root:
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            found += [
                f"{path.relative_to(root)}: {t.id}"
                for t in targets
                if isinstance(t, ast.Name) and t.id.endswith("_BYTES")
            ]
    assert found == [], found
