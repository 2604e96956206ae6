import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from selfattn.model.checkpoint import FILES, load_checkpoint, save_checkpoint
from selfattn.model.decoder import DecoderConfig, DecoderLM


def test_round_trip_gives_the_same_logits(tokenizer, tmp_path):
    torch.manual_seed(0)
    model = DecoderLM(DecoderConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2)).eval()
    files = save_checkpoint(model, tokenizer, tmp_path / "ck", training={"seed": 1})
    assert sorted(files) == ["config.json", "model.safetensors", "tokenizer.json"]
    loaded, tok, info = load_checkpoint(tmp_path / "ck")
    ids = torch.tensor(tokenizer.encode("一只蓝色怪兽走进森林"))
    assert torch.equal(loaded(ids), model(ids))
    assert loaded.lm_head.weight is loaded.tok_emb.weight
    assert tok.tokens == tokenizer.tokens and info == {"seed": 1}
    with pytest.raises(FileExistsError, match="already exists"):
        save_checkpoint(model, tokenizer, tmp_path / "ck")
    save_checkpoint(model, tokenizer, tmp_path / "ck", force=True)


def test_broken_checkpoints_are_named(tokenizer, tmp_path):
    model = DecoderLM(DecoderConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2))
    folder = tmp_path / "ck"
    save_checkpoint(model, tokenizer, folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["model"]["n_layers"] = 2
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError, match=r"missing tensor 'blocks\.1\.ln_1\.weight' \(shape \(16,\)\) and \d+ more"):
        load_checkpoint(folder)
    config["model"]["n_layers"] = 1
    config["model"]["d_model"] = 20
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"tensor 'tok_emb\.weight' has shape \(\d+, 16\), the model expects \(\d+, 20\)"
    ):
        load_checkpoint(folder)
    (folder / "model.safetensors").write_bytes(b"corrupt")
    config["model"]["d_model"] = 16
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError, match="model.safetensors is not a readable safetensors file"):
        load_checkpoint(folder)
    with pytest.raises(FileNotFoundError, match="checkpoint folder not found"):
        load_checkpoint(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="vocab_size"):
        save_checkpoint(
            DecoderLM(DecoderConfig(vocab_size=7, d_model=8, n_layers=1, n_heads=2)), tokenizer, tmp_path / "x"
        )


def _kill_script(tmp_path, folder, patch: str) -> str:
    """A child process that saves a new checkpoint over `folder` with --force and is SIGKILLed where `patch` says."""
    return f"""
import os, signal, torch
from selfattn.model import checkpoint
from selfattn.model.decoder import DecoderConfig, DecoderLM
from selfattn.model.tokenizer import WordTokenizer

def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

{patch}
tok = WordTokenizer.load({str(tmp_path / "tokenizer.json")!r})
torch.manual_seed(1)
new = DecoderLM(DecoderConfig(vocab_size=tok.vocab_size, d_model=16, n_layers=1, n_heads=2))
checkpoint.save_checkpoint(new, tok, {str(folder)!r}, training={{"run": "new"}}, force=True)
"""


KILLED_AT = {
    "writing the weights": "checkpoint.save_weights = killed",
    "writing the tokenizer": "checkpoint.WordTokenizer.save = killed",
    "before config.json": "checkpoint.write_atomic = killed",
    "after the weights were written": (
        "original = checkpoint.save_weights\n"
        "def half(module, path, *a, **k):\n"
        "    original(module, path, *a, **k)\n"
        "    killed()\n"
        "checkpoint.save_weights = half"
    ),
}


def _run_killed(tmp_path, folder, patch: str) -> None:
    import os
    import signal
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    code = _kill_script(tmp_path, folder, patch)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


@pytest.mark.parametrize("moment", sorted(KILLED_AT))
def test_a_save_killed_over_an_old_checkpoint_leaves_the_old_one_loading(tokenizer, tmp_path, moment):
    """issue 18 item 5: `train --force` deleted config.json before writing, so a save killed (or a full disk)
    left a folder that did not load. A real SIGKILL in the middle of `save_checkpoint --force`: the old
    checkpoint loads as it was, with its own weights."""
    torch.manual_seed(0)
    old = DecoderLM(DecoderConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2)).eval()
    folder = tmp_path / "ck"
    save_checkpoint(old, tokenizer, folder, training={"run": "old"})
    (folder / "notes.txt").write_text("mine")
    tokenizer.save(tmp_path / "tokenizer.json")
    before = {name: (folder / name).read_bytes() for name in FILES}
    _run_killed(tmp_path, folder, KILLED_AT[moment])
    assert {name: (folder / name).read_bytes() for name in FILES} == before
    model, _, info = load_checkpoint(folder)
    ids = torch.tensor(tokenizer.encode("一只蓝色怪兽走进森林"))
    assert info == {"run": "old"} and torch.equal(model(ids), old(ids))
    assert (folder / "notes.txt").read_text() == "mine"
    save_checkpoint(old, tokenizer, folder, training={"run": "again"}, force=True)  # a leftover does not block
    assert load_checkpoint(folder).info == {"run": "again"}


def test_a_save_killed_while_moving_files_in_names_the_complete_new_checkpoint(tokenizer, tmp_path):
    """The one window left: killed between the renames that move the finished files in. The folder's files
    disagree with its manifest (refused), and the message names the folder holding the complete new one."""
    torch.manual_seed(0)
    folder = tmp_path / "ck"
    save_checkpoint(
        DecoderLM(DecoderConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2)),
        tokenizer,
        folder,
        training={"run": "old"},
    )
    tokenizer.save(tmp_path / "tokenizer.json")
    patch = (  # the renames into the checkpoint folder itself (write_atomic renames inside the temporary one)
        "moved = []\n"
        "original = os.replace\n"
        "def replace_once(a, b):\n"
        f"    if os.path.dirname(b) == {str(folder)!r}:\n"
        "        if moved: killed()\n"
        "        moved.append(b)\n"
        "    original(a, b)\n"
        "checkpoint.os.replace = replace_once"
    )
    _run_killed(tmp_path, folder, patch)
    with pytest.raises(ValueError, match=r"a complete checkpoint is left in .*\.checkpoint\.[0-9a-f]{8}\.tmp") as e:
        load_checkpoint(folder)
    left = Path(re.search(r"left in (\S+):", str(e.value)).group(1))
    for name in FILES:
        if (left / name).exists():
            (left / name).replace(folder / name)
    assert load_checkpoint(folder).info == {"run": "new"}


def test_a_failed_save_leaves_the_old_checkpoint_and_no_temporary_files(tokenizer, tmp_path, monkeypatch):
    import errno

    from selfattn.model import checkpoint

    torch.manual_seed(0)
    model = DecoderLM(DecoderConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2))
    folder = tmp_path / "ck"
    save_checkpoint(model, tokenizer, folder, training={"run": "old"})

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.WordTokenizer, "save", full)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(model, tokenizer, folder, training={"run": "new"}, force=True)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(model, tokenizer, tmp_path / "fresh", training={"run": "new"})
    assert load_checkpoint(folder).info == {"run": "old"}
    assert sorted(p.name for p in folder.iterdir()) == sorted(FILES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_a_new_checkpoint_folder_appears_complete_with_the_umasks_permissions(tokenizer, tmp_path):
    """issue 18 item 16: every file was written 0600 (mkstemp) whatever the umask."""
    import os
    import stat

    torch.manual_seed(0)
    model = DecoderLM(DecoderConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2))
    old = os.umask(0o022)
    try:
        save_checkpoint(model, tokenizer, tmp_path / "a" / "ck")
        os.umask(0o027)
        save_checkpoint(model, tokenizer, tmp_path / "a" / "ck", force=True)
    finally:
        os.umask(old)
    folder = tmp_path / "a" / "ck"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    modes = {name: stat.S_IMODE((folder / name).stat().st_mode) for name in FILES}
    assert modes == dict.fromkeys(FILES, 0o640)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["ck"]


def test_weights_from_another_save_are_refused(tokenizer, tmp_path):
    torch.manual_seed(0)
    config = DecoderConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2)
    save_checkpoint(DecoderLM(config), tokenizer, tmp_path / "a")
    save_checkpoint(DecoderLM(config), tokenizer, tmp_path / "b")
    (tmp_path / "a" / "model.safetensors").write_bytes((tmp_path / "b" / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="not the file config.json was saved with"):
        load_checkpoint(tmp_path / "a")
    load_checkpoint(tmp_path / "b")


def test_weights_saved_by_save_model_under_the_other_tied_name_also_load(tokenizer, tmp_path):
    """safetensors' save_model keeps the tied LM head under "lm_head.weight"; our files keep "tok_emb.weight"."""
    from safetensors.torch import save_model

    from selfattn.model.safetensors_io import assign, read_safetensors

    torch.manual_seed(0)
    model = DecoderLM(DecoderConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2)).eval()
    save_model(model, str(tmp_path / "other.safetensors"))
    tensors = read_safetensors(tmp_path / "other.safetensors")
    assert "lm_head.weight" in tensors and "tok_emb.weight" not in tensors
    fresh = DecoderLM(model.config)
    assign(fresh, tensors, "other.safetensors")
    ids = torch.tensor(tokenizer.encode("一只蓝色怪兽"))
    assert torch.equal(fresh.eval()(ids), model(ids)) and fresh.lm_head.weight is fresh.tok_emb.weight


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("n_layers", 10_000_000, "n_layers must be <= 512, got 10000000"),
        ("d_model", 1 << 20, "d_model must be <= 32768"),
        ("norm_eps", float("nan"), "norm_eps must be finite, got nan"),
    ],
)
def test_a_hostile_config_is_refused_before_any_tensor(tmp_path, field, value, message):
    """issue 11: a config.json with huge sizes used to build the model first and eat all memory."""
    import json

    from selfattn.model.checkpoint import DEFAULT_DIR, load_checkpoint

    folder = tmp_path / "hostile"
    shutil.copytree(DEFAULT_DIR, folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["model"][field] = value
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(message)):
        load_checkpoint(folder)


def test_a_config_too_big_in_total_names_the_limit():
    from selfattn.model.decoder import DecoderConfig

    with pytest.raises(ValueError, match="over the limit of 100,000,000,000"):
        DecoderConfig(vocab_size=100, d_model=30000, n_layers=500, n_heads=10)


@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_weights_holding_nan_or_inf_are_refused_on_loading(tmp_path, poison):
    """A checkpoint whose weights hold NaN loaded and explained as NaN (invalid JSON) — issue 11's hostile run."""
    from safetensors.torch import load_file, save

    from selfattn.model.checkpoint import DEFAULT_DIR

    folder = tmp_path / "poisoned"
    shutil.copytree(DEFAULT_DIR, folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    del config["files"]  # no manifest: the content check alone must refuse
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["blocks.0.ln_1.weight"][3] = poison
    (folder / "model.safetensors").write_bytes(save(tensors))
    with pytest.raises(ValueError, match=r"tensor 'blocks.0.ln_1.weight' holds NaN or infinite values"):
        load_checkpoint(folder)


def test_a_config_with_an_integer_too_long_to_convert_names_the_file(tmp_path):
    """Python refuses ints of more than 4,300 digits with its own ValueError, which did not name the file."""
    from selfattn.model.checkpoint import DEFAULT_DIR

    folder = tmp_path / "long_int"
    shutil.copytree(DEFAULT_DIR, folder)
    text = (folder / "config.json").read_text(encoding="utf-8").replace('"n_layers": 2', '"n_layers": ' + "9" * 5000)
    (folder / "config.json").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=r"config.json: not a usable JSON file \(Exceeds the limit"):
        load_checkpoint(folder)


def test_a_config_nested_past_the_decoders_recursion_names_the_file(tmp_path):
    """json.loads recurses once per level: a deep enough nesting is a RecursionError, refused naming the file."""
    from selfattn.model.checkpoint import DEFAULT_DIR

    folder = tmp_path / "deep"
    shutil.copytree(DEFAULT_DIR, folder)
    depth = 100_000
    text = (
        (folder / "config.json")
        .read_text(encoding="utf-8")
        .replace('"n_layers": 2', '"n_layers": ' + "[" * depth + "]" * depth)
    )
    (folder / "config.json").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=r"config.json: JSON nested too deeply to read"):
        load_checkpoint(folder)
