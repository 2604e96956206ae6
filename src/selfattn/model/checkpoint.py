"""A checkpoint is a folder of three files: weights, model config, tokenizer.

    model.safetensors   the DecoderLM's tensors (a tied LM head is stored once)
    config.json         {"format": "selfattn.decoder-lm", "version": 1, "model": {...}, "training": {...}}
    tokenizer.json      the WordTokenizer (vocabulary + jieba user words)

`load_default()` loads the model that ships inside the package (`selfattn/model/default/`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple

import torch

from .decoder import DecoderConfig, DecoderLM
from .tokenizer import WordTokenizer
from .safetensors_io import assign, read_safetensors, unique_state, write_safetensors

__all__ = ["Checkpoint", "save_checkpoint", "load_checkpoint", "load_default", "DEFAULT_DIR", "FILES"]

FORMAT = "selfattn.decoder-lm"
VERSION = 1
FILES = ("model.safetensors", "config.json", "tokenizer.json")
DEFAULT_DIR = Path(__file__).resolve().parent / "default"


class Checkpoint(NamedTuple):
    """A loaded checkpoint: `model, tokenizer, info = load_checkpoint(path)`."""

    model: DecoderLM
    tokenizer: WordTokenizer
    info: dict            # config.json's "training" section (preset, seed, metrics, command)


def save_checkpoint(model: DecoderLM, tokenizer: WordTokenizer, out_dir: str | os.PathLike, *,
                    training: dict | None = None, force: bool = False) -> dict[str, str]:
    """Write the three files into out_dir (created if needed).

    Refuses (FileExistsError naming the file) to replace an existing checkpoint unless force=True.
    Returns {file name: path written}.
    """
    if not isinstance(model, DecoderLM):
        raise TypeError(f"model must be a DecoderLM, got {type(model).__name__}")
    if model.config.vocab_size != tokenizer.vocab_size:
        raise ValueError(f"model has vocab_size={model.config.vocab_size}, tokenizer {tokenizer.vocab_size}")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"checkpoint path {out} exists and is not a folder")
    if not force:
        for name in FILES:
            if (out / name).exists():
                raise FileExistsError(f"{out / name} already exists; pass force=True (--force) to overwrite")
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "model.safetensors": write_safetensors(unique_state(model), out / "model.safetensors",
                                               metadata={"format": FORMAT}),
        "tokenizer.json": tokenizer.save(out / "tokenizer.json"),
    }
    config = {"format": FORMAT, "version": VERSION, "model": model.config.to_dict(), "training": training or {}}
    (out / "config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    paths["config.json"] = out / "config.json"
    return {k: str(v) for k, v in paths.items()}


def _read_config(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"checkpoint config not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} config (format={data.get('format') if isinstance(data, dict) else None!r})")
    if data.get("version") != VERSION:
        raise ValueError(f"{path} has version {data.get('version')!r}; this selfattn reads version {VERSION}")
    if not isinstance(data.get("model"), dict):
        raise ValueError(f"{path} has no 'model' section")
    return data


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
        raise ValueError(f"{folder}: tokenizer.json has {tokenizer.vocab_size} tokens, "
                         f"config.json says vocab_size={config.vocab_size}")
    model = DecoderLM(config)
    assign(model, read_safetensors(folder / "model.safetensors"), str(folder / "model.safetensors"))
    return Checkpoint(model.to(device).eval(), tokenizer, data.get("training", {}))


def load_default(*, device: str | torch.device = "cpu") -> Checkpoint:
    """The model that ships with selfattn, trained on the corpus of `selfattn.model.corpus`."""
    if not (DEFAULT_DIR / "model.safetensors").is_file():
        raise FileNotFoundError(f"the default model is missing from {DEFAULT_DIR}; reinstall selfattn, or "
                                f"rebuild it with `selfattn train --out {DEFAULT_DIR} --force`")
    return load_checkpoint(DEFAULT_DIR, device=device)
