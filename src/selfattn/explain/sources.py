"""Where an explainer's model comes from: a folder, or a hub id resolved to a folder.

    resolve("runs/my-model")        -> Path   a local folder, as it is
    resolve("Qwen/Qwen2.5-0.5B")    -> Path   the hub snapshot: downloaded (safetensors, JSON and
                                              tokenizer files only, with a progress bar) or, offline,
                                              taken from the local Hugging Face cache
    folder_kind(path)               -> "selfattn" | one of TRANSFORMERS_TYPES
    check_config(config, source)    refuses sizes that could not be built in memory, naming the field
    check_loaded(folder, model, info) refuses a model whose weights did not all load (missing, wrong
                                      shape, NaN/inf): it would be explained as a random model

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
    "resolve",
    "folder_kind",
    "check_config",
    "check_loaded",
    "is_hub_id",
]

DECODER_TYPES = ("llama", "qwen2", "qwen3", "mistral", "gemma2", "gpt2")
TRANSFORMERS_TYPES = DECODER_TYPES + ("bert",)
"""transformers `model_type`s the explainer loads (each tested with a tiny random model)."""

POSITIONS = {
    "llama": "positions.rope",
    "qwen2": "positions.rope",
    "qwen3": "positions.rope_qk_norm",
    "mistral": "positions.rope",
    "gemma2": "positions.rope",
    "gpt2": "positions.learned",
    "bert": "positions.learned",
}
"""Each model type's positional scheme, as its key in the text table (`views.texts`: zh and en)."""

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


UNUSED_PREFIXES = ("pooler.",)
"""Modules the explainer never runs (BERT's pooler): their weights may be absent from a folder."""
NAMED = 3
"""How many tensor names a refusal lists."""


def check_loaded(folder: Path, model, info: dict) -> None:
    """Refuse a transformers model whose weights did not all come from the folder: transformers only warns and
    initialises the missing or wrong-shape tensors at random, and a NaN/inf tensor would give NaN weights.
    `info`: the loading info of `from_pretrained(..., output_loading_info=True, ignore_mismatched_sizes=True)`
    (a wrong shape is then reported there instead of raised as a traceback)."""
    missing = sorted(k for k in info.get("missing_keys", ()) if not k.startswith(UNUSED_PREFIXES))
    if missing:
        raise ValueError(
            f"{folder}: the weights lack {len(missing)} tensor(s) the model needs ({_names(missing)}); transformers "
            f"would fill them at random and the explanation would be of a random model"
        )
    mismatched = sorted(info.get("mismatched_keys", ()), key=lambda m: m[0])
    if mismatched:
        name, found, wanted = mismatched[0]
        raise ValueError(
            f"{folder}: tensor {name} has shape {tuple(found)} in the weights but the config needs {tuple(wanted)}"
            + (f" ({len(mismatched) - 1} more mismatched)" if len(mismatched) > 1 else "")
        )
    errors = [str(e) for e in info.get("error_msgs", ())]
    if errors:
        raise ValueError(f"{folder}: the weights did not load: {errors[0][:200]}")
    bad = [name for name, p in model.named_parameters() if p.is_floating_point() and not bool(p.isfinite().all())]
    if bad:
        raise ValueError(f"{folder}: the weights hold NaN or infinite values in {len(bad)} tensor(s) ({_names(bad)})")


def _names(names: list[str]) -> str:
    return ", ".join(names[:NAMED]) + (f", … {len(names) - NAMED} more" if len(names) > NAMED else "")
