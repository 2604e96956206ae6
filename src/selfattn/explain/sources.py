"""Where an explainer's model comes from: a folder, or a hub id resolved to a folder.

    resolve("runs/my-model")        -> Path   a local folder, as it is
    resolve("Qwen/Qwen2.5-0.5B")    -> Path   the hub snapshot: downloaded (safetensors, JSON and
                                              tokenizer files only, with a progress bar) or, offline,
                                              taken from the local Hugging Face cache
    folder_kind(path)               -> "selfattn" | one of TRANSFORMERS_TYPES
    check_config(config, source)    refuses sizes that could not be built in memory, naming the field

The default model (no `--model`) never comes here, so it never touches the network.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .. import checks
from ..files import read_json
from ..limits import TRANSFORMERS_LIMITS, check_parameters

__all__ = [
    "TRANSFORMERS_TYPES",
    "DECODER_TYPES",
    "LIMITS",
    "POSITIONS",
    "POSITIONS_ZH",
    "resolve",
    "folder_kind",
    "check_config",
    "is_hub_id",
]

DECODER_TYPES = ("llama", "qwen2", "qwen3", "mistral", "gemma2", "gpt2")
TRANSFORMERS_TYPES = DECODER_TYPES + ("bert",)
"""transformers `model_type`s the explainer loads (each tested with a tiny random model)."""

POSITIONS = {
    "llama": "RoPE: Q/K shown after rotation",
    "qwen2": "RoPE: Q/K shown after rotation",
    "qwen3": "RoPE: Q/K shown after rotation (after QK-norm)",
    "mistral": "RoPE: Q/K shown after rotation",
    "gemma2": "RoPE: Q/K shown after rotation",
    "gpt2": "learned absolute positions, added to X",
    "bert": "learned absolute positions, added to X",
}

POSITIONS_ZH = {
    "learned absolute positions, added to X": "学到的绝对位置向量，加在 X 上",
    "RoPE: Q/K shown after rotation": "RoPE：显示的是旋转之后的 Q/K",
    "RoPE: Q/K shown after rotation (after QK-norm)": "RoPE：显示的是旋转之后的 Q/K（在 QK-norm 之后）",
}
"""Each positional scheme of POSITIONS (and the default model's), in Chinese, for the Chinese views."""

LIMITS = TRANSFORMERS_LIMITS
"""Largest value accepted per config field: `selfattn.limits.TRANSFORMERS_LIMITS`, the one table of sizes
(the parameter budget is `selfattn.limits.check_parameters`: MAX_PARAMETERS and the memory available)."""

WEIGHT_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken"]
"""The files a hub download fetches: configs, weights (safetensors only), tokenizer files."""

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def is_hub_id(text: str) -> bool:
    """ "owner/name" that is not an existing local path."""
    return bool(_HUB_ID.match(text)) and not Path(text).exists()


def resolve(source: str | os.PathLike) -> Path:
    """A local folder for `source` (a folder path, or a hub id)."""
    text = os.fspath(source)
    if not isinstance(text, str) or not text:
        raise ValueError(f"model must be a folder or a hub id like 'Qwen/Qwen2.5-0.5B', got {source!r}")
    folder = Path(text)
    if folder.is_dir():
        return folder
    if is_hub_id(text):
        return _snapshot(text)
    raise FileNotFoundError(f"model folder not found: {folder}")


def _snapshot(repo_id: str) -> Path:
    try:
        from huggingface_hub import constants, snapshot_download
    except ImportError:
        raise ValueError(f"{repo_id} is a hub id; fetching it needs the `huggingface_hub` package") from None
    offline = bool(constants.HF_HUB_OFFLINE)
    try:
        path = snapshot_download(repo_id, allow_patterns=WEIGHT_PATTERNS, local_files_only=offline)
    except Exception as e:  # noqa: BLE001 — a network, auth or cache failure: say which, in one line
        if not offline:
            try:  # no network: the cache may still hold it
                return Path(snapshot_download(repo_id, allow_patterns=WEIGHT_PATTERNS, local_files_only=True))
            except Exception:  # noqa: BLE001
                pass
        where = "offline (HF_HUB_OFFLINE=1)" if offline else "could not download it"
        raise ValueError(
            f"{repo_id}: {where}, and it is not in the local Hugging Face cache "
            f"({type(e).__name__}); download it once with network access"
        ) from None
    return Path(path)


def folder_kind(folder: Path) -> tuple[str, dict]:
    """("selfattn" or a transformers model_type, the parsed config.json) of a model folder."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{folder} has no config.json: not a model folder")
    try:
        data = read_json(config_path, what="model config")
    except ValueError as e:
        raise ValueError(f"{config_path} is not valid JSON: {e}") from None
    from ..model.checkpoint import FORMAT

    if data.get("format") == FORMAT:
        return "selfattn", data
    kind = data.get("model_type")
    if kind not in TRANSFORMERS_TYPES:
        raise ValueError(
            f"{folder}: model_type {kind!r} is not supported; selfattn reads its own checkpoints "
            f"and transformers folders of {', '.join(TRANSFORMERS_TYPES)}"
        )
    check_weights(folder)
    check_config(data, config_path)
    return kind, data


def check_weights(folder: Path) -> None:
    """Safetensors only: a folder with pickle weights and no safetensors is refused."""
    if any(folder.glob("*.safetensors")):
        return
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    hint = f" (found {pickles}: pickle files are never loaded; convert them to safetensors)" if pickles else ""
    raise FileNotFoundError(f"{folder} has no *.safetensors weights{hint}")


def check_config(config: dict, source: Path) -> None:
    """Refuse a config whose sizes could not be built: each field against LIMITS, and the estimated
    parameter count against the one budget (`limits.check_parameters`: MAX_PARAMETERS, and what the
    machine's available memory holds), before anything is allocated. Configs nest a text config in
    some models: checked too."""
    for name, limit in LIMITS.items():
        value = config.get(name)
        if value is None:
            continue
        try:
            checks.integer(f"{source}: {name}", value, low=1)
        except TypeError as e:  # a wrong type in a file is bad content, refused like the rest: ValueError
            raise ValueError(str(e)) from None
        if value > limit:
            raise ValueError(f"{source}: {name}={value:,} is over the limit of {limit:,}")
    layers = config.get("num_hidden_layers") or config.get("n_layer") or 0
    width = config.get("hidden_size") or config.get("n_embd") or 0
    ff = config.get("intermediate_size") or config.get("n_inner") or 4 * width
    vocab = config.get("vocab_size") or 0
    estimate = layers * (4 * width * width + 3 * width * ff) + 2 * vocab * width
    check_parameters(estimate, str(source), "num_hidden_layers × hidden_size × …")
    text = config.get("text_config")
    if isinstance(text, dict):
        check_config(text, source)
