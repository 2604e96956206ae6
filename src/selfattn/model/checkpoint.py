"""A checkpoint is a folder of three files: weights, model config, tokenizer.

    model.safetensors   the DecoderLM's tensors (a tied LM head is stored once)
    config.json         {"format": "selfattn.decoder-lm", "version": 1, "model": {...}, "training": {...},
                         "files": {"model.safetensors": {"bytes", "sha256"}, "tokenizer.json": {...}}}
    tokenizer.json      the WordTokenizer (vocabulary + jieba user words)

Saved as a unit, beside the old one: the three files are written in full (fsync) into a temporary
folder on the same file system — beside the checkpoint folder when it is new, inside it
(`.checkpoint.XXXXXXXX.tmp`) when it exists — and only then moved into place by renames, config.json
last, with the size and SHA-256 of the other two (the manifest). A new folder appears complete (one
rename); an existing checkpoint loads as it was until the new one is complete, so a full disk, an
error or a kill while writing leaves it untouched (and at most the temporary folder behind). Only a
kill between the three renames leaves a folder whose files disagree with its manifest: refused on
loading, naming the temporary folder that holds the complete new checkpoint — never new weights read
with an old config. (Configs written before the manifest existed load without that check.)

`load_default()` loads the model that ships inside the package (`selfattn/model/default/`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import NamedTuple

import torch

from ..files import (
    check_target,
    open_regular,
    read_json,
    sync_folder,
    temp_folder,
    write_atomic,
)
from .decoder import DecoderConfig, DecoderLM
from .safetensors_io import assign, read_safetensors, save_weights
from .tokenizer import WordTokenizer

__all__ = [
    "Checkpoint",
    "save_checkpoint",
    "load_checkpoint",
    "load_default",
    "check_checkpoint_folder",
    "DEFAULT_DIR",
    "FILES",
    "FORMAT",
    "VERSION",
]

FORMAT = "selfattn.decoder-lm"
VERSION = 1
FILES = ("model.safetensors", "config.json", "tokenizer.json")
DEFAULT_DIR = Path(__file__).resolve().parent / "default"
MANIFEST_FILES = ("model.safetensors", "tokenizer.json")
"""The files whose size and SHA-256 config.json records."""
HASH_CHUNK = 1 << 20
TEMP_NAME = "checkpoint"
"""Inside an existing checkpoint folder, a save in progress writes into .checkpoint.XXXXXXXX.tmp/."""


class Checkpoint(NamedTuple):
    """A loaded checkpoint: `model, tokenizer, info = load_checkpoint(path)`."""

    model: DecoderLM
    tokenizer: WordTokenizer
    info: dict  # config.json's "training" section (preset, seed, metrics, command)


def save_checkpoint(
    model: DecoderLM,
    tokenizer: WordTokenizer,
    out_dir: str | os.PathLike,
    *,
    training: dict | None = None,
    force: bool = False,
) -> dict[str, str]:
    """Write the three files into out_dir (created if needed), as a unit (see the module docstring).

    Refuses (FileExistsError naming the file) to replace an existing checkpoint unless force=True.
    Returns {file name: path written}.
    """
    if not isinstance(model, DecoderLM):
        raise TypeError(f"model must be a DecoderLM, got {type(model).__name__}")
    if model.config.vocab_size != tokenizer.vocab_size:
        raise ValueError(f"model has vocab_size={model.config.vocab_size}, tokenizer {tokenizer.vocab_size}")
    out = check_checkpoint_folder(out_dir, force=force)
    existed = out.is_dir()
    if existed:
        staging = temp_folder(out, TEMP_NAME)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = temp_folder(out.parent, out.name)
    try:
        _write_files(model, tokenizer, staging, training)
        if existed:
            check_checkpoint_folder(out, force=force)  # a checkpoint that appeared meanwhile is kept
            for name in MANIFEST_FILES + ("config.json",):  # config.json last: the manifest commits the unit
                check_target(out / name)  # checked again at the rename: never a device or a FIFO replaced
                os.replace(staging / name, out / name)
            shutil.rmtree(staging, ignore_errors=True)  # empty now; the checkpoint is saved either way
        else:
            os.rename(staging, out)  # a folder that appeared meanwhile (not empty) refuses the rename
        sync_folder(out)
        sync_folder(out.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {name: str(out / name) for name in MANIFEST_FILES + ("config.json",)}


def _write_files(model: DecoderLM, tokenizer: WordTokenizer, folder: Path, training: dict | None) -> None:
    """The three files of a checkpoint, in full (each fsynced), into an empty `folder`."""
    save_weights(model, folder / "model.safetensors", metadata={"format": FORMAT})
    tokenizer.save(folder / "tokenizer.json")
    config = {
        "format": FORMAT,
        "version": VERSION,
        "model": model.config.to_dict(),
        "training": training or {},
        "files": {name: _fingerprint(folder / name) for name in MANIFEST_FILES},
    }
    write_atomic(folder / "config.json", json.dumps(config, ensure_ascii=False, indent=1) + "\n")


def _fingerprint(path: Path) -> dict:
    """{"bytes", "sha256"} of a file."""
    digest = hashlib.sha256()
    with open_regular(path, what="checkpoint file") as f:
        for chunk in iter(lambda: f.read(HASH_CHUNK), b""):
            digest.update(chunk)
        size = os.fstat(f.fileno()).st_size
    return {"bytes": size, "sha256": digest.hexdigest()}


def _read_config(path: Path) -> dict:
    if not path.exists() and path.parent.is_dir() and any((path.parent / f).exists() for f in MANIFEST_FILES):
        raise ValueError(
            f"{path.parent} has weights but no config.json: an incomplete checkpoint (was a save "
            f"interrupted?); train it again or restore the folder"
        )
    data = read_json(path, what="checkpoint config")
    if data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} config (format={data.get('format')!r})")
    if data.get("version") != VERSION:
        raise ValueError(f"{path} has version {data.get('version')!r}; this selfattn reads version {VERSION}")
    if not isinstance(data.get("model"), dict):
        raise ValueError(f"{path} has no 'model' section")
    return data


def _check_manifest(folder: Path, data: dict) -> None:
    """Refuse files that are not the ones config.json was written with (a mixed or half-replaced folder)."""
    manifest = data.get("files")
    if manifest is None:
        return
    if not isinstance(manifest, dict):
        raise ValueError(f"{folder / 'config.json'}: 'files' must be an object")
    for name in MANIFEST_FILES:
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing from the checkpoint")
        if manifest.get(name) != _fingerprint(path):
            raise ValueError(
                f"{path} is not the file config.json was saved with (size or SHA-256 differ): the "
                f"folder mixes two checkpoints or a save was interrupted; {_recovery(folder)}"
            )


def _recovery(folder: Path) -> str:
    """What to do about a mixed folder: move in the files of a save interrupted while renaming, if one is left."""
    left = sorted(p for p in folder.glob(f".{TEMP_NAME}.*.tmp") if (p / "config.json").is_file())
    if left:
        return f"a complete checkpoint is left in {left[-1]}: move its files into {folder}, or train it again"
    return "train it again"


def check_checkpoint_folder(out_dir: str | os.PathLike, *, force: bool = False) -> Path:
    """`out_dir` as a Path if a checkpoint may be saved there: not a file, none of the checkpoint's FILES
    there anything but a regular file (a FIFO, a device: ValueError, even with `force`), and (unless `force`)
    holding none of them; else NotADirectoryError / FileExistsError / ValueError naming it."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        check_target(out)  # a FIFO or a device is named as what it is
        raise NotADirectoryError(f"checkpoint path {out} exists and is not a folder")
    for name in FILES:
        if (out / name).is_dir():
            raise IsADirectoryError(f"{out / name} is a folder; a checkpoint file goes there")
        check_target(out / name)
        if not force and (out / name).exists():
            raise FileExistsError(f"{out / name} already exists; pass force=True (--force) to overwrite")
    return out


def load_checkpoint(path: str | os.PathLike, *, device: str | torch.device = "cpu") -> Checkpoint:
    """Load a checkpoint folder written by `save_checkpoint` (model in eval mode)."""
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"checkpoint folder not found: {folder}")
    data = _read_config(folder / "config.json")
    try:
        config = DecoderConfig.from_dict(data["model"])
    except (TypeError, ValueError) as e:
        raise ValueError(f"{folder / 'config.json'}: bad model config: {e}") from None
    tokenizer = WordTokenizer.load(folder / "tokenizer.json")
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(
            f"{folder}: tokenizer.json has {tokenizer.vocab_size} tokens, "
            f"config.json says vocab_size={config.vocab_size}"
        )
    tensors = read_safetensors(folder / "model.safetensors")
    _check_manifest(folder, data)
    model = DecoderLM(config)
    assign(model, tensors, str(folder / "model.safetensors"))
    return Checkpoint(model.to(device).eval(), tokenizer, data.get("training", {}))


def load_default(*, device: str | torch.device = "cpu") -> Checkpoint:
    """The model that ships with selfattn, trained on the corpus of `selfattn.model.corpus`."""
    if not (DEFAULT_DIR / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"the default model is missing from {DEFAULT_DIR}; reinstall selfattn, or "
            f"rebuild it with `selfattn train --out {DEFAULT_DIR} --force`"
        )
    return load_checkpoint(DEFAULT_DIR, device=device)
