"""Where an explainer's model comes from, and what transformers should build from it.

    locate("runs/my-model")         -> Source  a local folder, as it is
    locate("SmolLM2.Q4_1.gguf")     -> Source  a GGUF file (or a folder holding exactly one, and no config.json)
    locate("Qwen/Qwen2.5-0.5B")     -> Source  the hub snapshot: downloaded (safetensors, JSON and tokenizer
                                               files only, with a progress bar) or, offline, the local cache
    folder_kind(source)             -> ("selfattn" | the transformers model_type, the config as a dict)
    architecture(config)            -> ("decoder" | "encoder", why): which Auto class builds it
    position_scheme(config, model)  -> a key of `views.texts` ("positions.rope", …), read from the config
    check_config(config, source)    refuses sizes that could not be built in memory, and numbers no model
                                    is built with (NaN, a norm's epsilon or a rotary base at or below 0),
                                    naming the field
    check_loaded(folder, model, info) refuses a model whose weights did not all load (missing, wrong
                                      shape, NaN/inf): it would be explained as a random model

No list of model types: any model transformers builds is tried, and the explainer's dry run
(`session.Explainer`) refuses one whose attention does not go through transformers' attention interface.
Pickle weights are never loaded. A config — a folder's config.json, or a GGUF file's metadata, read
before any tensor — is bounded (`selfattn.limits`) before the model is built.
The default model (no `--model`) never comes here, so it never touches the network.
"""

from __future__ import annotations

import math
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from ... import checks
from ...files import open_regular, read_json
from ...limits import TRANSFORMERS_LIMITS, check_parameters

__all__ = [
    "LIMITS",
    "Source",
    "locate",
    "resolve",
    "folder_kind",
    "architecture",
    "position_scheme",
    "check_config",
    "check_loaded",
    "is_hub_id",
    "GGUF_SUFFIX",
]

LIMITS = TRANSFORMERS_LIMITS
"""Largest value accepted per config field: `selfattn.limits.TRANSFORMERS_LIMITS`, the one table of sizes
(the parameter budget is `selfattn.limits.check_parameters`: MAX_PARAMETERS and the memory available)."""

WEIGHT_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken"]
"""The files a hub download fetches: configs, weights (safetensors only), tokenizer files."""

GGUF_SUFFIX = ".gguf"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
DECODER_HEADS = ("ForCausalLM", "LMHeadModel")
"""An architecture whose class name ends so is a decoder with a language-model head."""
POSITIVE_FIELDS = ("_eps", "epsilon", "rope_theta")
"""A config number whose name ends so (rms_norm_eps, layer_norm_epsilon, rope_theta …) must be above 0: a norm
divides by the root of its epsilon, and the rotary frequencies are powers of the base."""
GGUF_READ_ERRORS = (ValueError, KeyError, OSError, IndexError, struct.error, EOFError, OverflowError)
"""What transformers' GGUF reader raises on a file cut short or whose metadata lies about its sizes."""


@dataclass(frozen=True)
class Source:
    """A model on disk: `folder`, and `gguf`, the name of the GGUF file in it to read (None: config.json and
    safetensors); `name` is what the views call it."""

    folder: Path
    name: str
    gguf: str | None = None


def is_hub_id(text: str) -> bool:
    """ "owner/name" that is not an existing local path."""
    return bool(_HUB_ID.match(text)) and not Path(text).exists()


def locate(source: str | os.PathLike) -> Source:
    """Where `source` (a folder, a .gguf file, or a hub id) is on disk."""
    text = os.fspath(source)
    if not isinstance(text, str) or not text:
        raise ValueError(f"model must be a folder, a .gguf file or a hub id like 'Qwen/Qwen2.5-0.5B', got {source!r}")
    path = Path(text)
    if path.is_dir():
        ggufs = sorted(p.name for p in path.iterdir() if p.suffix.lower() == GGUF_SUFFIX)
        if (path / "config.json").is_file() or not ggufs:
            return Source(path, path.name)
        if len(ggufs) > 1:
            raise ValueError(f"{path} holds {len(ggufs)} GGUF files ({', '.join(ggufs)}): give the one to read")
        return Source(path, ggufs[0], gguf=ggufs[0])
    if path.suffix.lower() == GGUF_SUFFIX and path.exists():
        open_regular(path, what="GGUF file").close()  # a FIFO or a device is named, never waited on
        return Source(path.parent, path.name, gguf=path.name)
    if is_hub_id(text):
        return Source(_snapshot(text), text)
    what = "GGUF file" if path.suffix.lower() == GGUF_SUFFIX else "model folder"
    raise FileNotFoundError(f"{what} not found: {path}")  # the path last, as the user typed it


def resolve(source: str | os.PathLike) -> Path:
    """The local folder of `source` (`locate`)."""
    return locate(source).folder


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


def folder_kind(source: Source | Path, dtype: str = "float32") -> tuple[str, dict]:
    """("selfattn" or the transformers model_type, the config as a dict) of a model, its sizes checked (the
    parameter budget counting `dtype`'s bytes, the dtype it is to be loaded in)."""
    source = source if isinstance(source, Source) else Source(Path(source), Path(source).name)
    if source.gguf is not None:
        data = gguf_config(source.folder / source.gguf, dtype)
        return str(data.get("model_type")), data
    folder = source.folder
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{folder} has no config.json (nor a .gguf file): not a model folder")
    try:
        data = read_json(config_path, what="model config")
    except ValueError as e:
        raise ValueError(f"{config_path} is not valid JSON: {e}") from None
    from ...model.checkpoint import FORMAT

    if data.get("format") == FORMAT:
        return "selfattn", data
    kind = data.get("model_type")
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"{config_path} names no model_type: neither a selfattn checkpoint nor a transformers model")
    check_config(data, config_path, dtype)
    full = _with_defaults(kind, data, config_path)
    architecture(full)  # an encoder–decoder is refused before its weights are looked at
    check_weights(folder)
    return kind, full


def _with_defaults(kind: str, data: dict, where: Path) -> dict:
    """The config as transformers reads it (its class's defaults filled in: the layer count the dry run
    checks, is_encoder_decoder …); a model_type transformers does not know is refused by name."""
    try:
        import transformers
    except ImportError:
        raise ValueError(f"{where} is a transformers model; reading it needs the `transformers` package") from None
    try:
        config = transformers.AutoConfig.for_model(kind, **{k: v for k, v in data.items() if k != "model_type"})
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{where}: model_type {kind!r} is not supported: transformers cannot read it ({e})") from None
    except _invalid_config() as e:
        raise ValueError(f"{where}: {_validation_reason(e)}") from None
    return config.to_dict()


def _invalid_config() -> type[Exception]:
    """The error of a config class's own validators (huggingface_hub's strict dataclasses): a hidden size that is
    not a multiple of the head count, …"""
    from huggingface_hub.errors import StrictDataclassError

    return StrictDataclassError


def _validation_reason(e: Exception) -> str:
    """A validator's own sentence ("The hidden size (33) is not a multiple of the number of attention heads (4).")
    without the wrapper's line about which validator said it."""
    cause = e.__cause__ if e.__cause__ is not None else e
    return " ".join(str(cause).split())[:300]


def gguf_config(path: Path, dtype: str = "float32") -> dict:
    """The transformers config of a GGUF file, read from its metadata only (transformers' GGUF reader, no
    tensor is read or dequantized) or from the cache of this file's weights (`gguf_cache.cached_config`), its
    sizes checked (`check_config`)."""
    open_regular(path, what="GGUF file").close()
    try:
        import transformers
    except ImportError:
        raise ValueError(f"{path} is a GGUF file; reading it needs the `transformers` and `gguf` packages") from None
    from . import gguf_cache

    cached = gguf_cache.cached_config(path)
    if cached is not None:
        check_config(cached, path, dtype)
        return cached
    try:
        config = transformers.AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
    except ImportError as e:
        raise ValueError(f"{path}: reading GGUF files needs the `gguf` package ({e})") from None
    except GGUF_READ_ERRORS as e:
        reason = "the file ends inside its metadata, or the metadata claims more than the file holds"
        said = reason if isinstance(e, struct.error) else str(e)[:300]
        raise ValueError(f"{path} could not be read as a GGUF model: {said}") from None
    except _invalid_config() as e:
        raise ValueError(f"{path}: {_validation_reason(e)}") from None
    data = config.to_dict()
    check_config(data, path, dtype)
    return data


def check_weights(folder: Path) -> None:
    """Safetensors only: a folder with pickle weights and no safetensors is refused."""
    if any(folder.glob("*.safetensors")):
        return
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    hint = f" (found {pickles}: pickle files are never loaded; convert them to safetensors)" if pickles else ""
    raise FileNotFoundError(f"{folder} has no *.safetensors weights{hint}")


def check_config(config: dict, source: Path, dtype: str = "float32") -> None:
    """Refuse a config whose sizes could not be built: each field against LIMITS, and the estimated
    parameter count against the one budget (`limits.check_parameters`: MAX_PARAMETERS, and what the
    machine's available memory holds at `dtype`'s bytes), before anything is allocated; and every number
    (`check_numbers`).
    Configs nest a text config in some models: checked too."""
    check_numbers(config, source)
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
    layers = config.get("num_hidden_layers") or config.get("n_layer") or config.get("n_layers") or 0
    width = config.get("hidden_size") or config.get("n_embd") or config.get("dim") or 0
    ff = config.get("intermediate_size") or config.get("n_inner") or config.get("hidden_dim") or 4 * width
    vocab = config.get("vocab_size") or 0
    estimate = layers * (4 * width * width + 3 * width * ff) + 2 * vocab * width
    check_parameters(estimate, str(source), "num_hidden_layers × hidden_size × …", dtype=dtype)
    text = config.get("text_config")
    if isinstance(text, dict):
        check_config(text, source, dtype)


def check_numbers(config: dict | list, source: Path, within: str = "") -> None:
    """Refuse a number no model is built with, naming the field and its value: NaN or infinite anywhere in the
    config (nested dicts and lists too), and a field of POSITIVE_FIELDS at or below 0."""
    items = config.items() if isinstance(config, dict) else enumerate(config)
    for name, value in items:
        field = f"{within}.{name}" if within else str(name)
        if isinstance(value, (dict, list)):
            check_numbers(value, source, field)
        elif isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{source}: {field}={value} in the config is not a finite number")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and _positive(str(name)):
            if value <= 0:
                raise ValueError(f"{source}: {field}={value} in the config must be above 0")


def _positive(name: str) -> bool:
    return name == "eps" or name.endswith(POSITIVE_FIELDS)


def architecture(config: dict) -> tuple[str, str]:
    """("decoder", why) when transformers should build the model with AutoModelForCausalLM, ("encoder", why)
    for AutoModel. Read from the config, in this order:

    1. `architectures` (the class the weights were saved from): a name ending in ForCausalLM / LMHeadModel
       is a decoder with its language-model head; any other (BertForMaskedLM, BertModel) an encoder;
    2. without it (a GGUF file, a hand-written config): `is_decoder`, then whether transformers has a
       causal-LM class for the model_type and no masked-LM class (BERT-like types have both: encoders).
    An encoder–decoder (T5, BART) is refused: the explainer reads one stack of self-attention."""
    kind = config.get("model_type")
    if config.get("is_encoder_decoder"):
        raise ValueError(
            f"model_type {kind!r} is not supported: it is an encoder–decoder model, and the explainer reads "
            "decoders and encoders (one stack of self-attention)"
        )
    names = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    if names:
        head = next((a for a in names if a.endswith(DECODER_HEADS)), None)
        if head is not None:
            return "decoder", f"its config names the architecture {head} (a language-model head)"
        return "encoder", f"its config names the architecture {names[0]} (no causal language-model head)"
    if config.get("is_decoder"):
        return "decoder", "its config says is_decoder"
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    if kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and kind not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "decoder", f"transformers builds {kind!r} as a causal language model"
    return "encoder", f"transformers has no causal-only language model for {kind!r}"


ROPE_FIELDS = ("rope", "rotary")
"""A config field whose name holds one of these (rope_theta, rope_parameters, rotary_dim, partial_rotary_factor,
global_rope_theta …) means rotary positions."""
QK_NORM_MODULES = ("q_norm", "q_layernorm", "query_layernorm")


def position_scheme(config: dict, model=None) -> str:
    """The positional scheme of a transformers model, as its key in `views.texts` ("positions.…"), read
    from its config (and, for learned positions, from the embedding modules the model holds):

        position_embedding_type "alibi" or an `alibi` field      positions.alibi
        a rope / rotary field (or position_embedding_type rotary) positions.rope (positions.rope_qk_norm when
                                                                  the model normalises Q and K first)
        position_embedding_type relative_key(_query)              positions.relative
        sinusoidal_pos_embds                                      positions.sinusoidal
        an nn.Embedding for positions (wpe, position_embeddings)  positions.learned
        none of these                                             positions.unknown"""
    kind = str(config.get("position_embedding_type") or "").lower()
    if kind == "alibi" or config.get("alibi") or config.get("use_alibi"):
        return "positions.alibi"
    rope = kind in ("rotary", "rope") or any(
        any(word in name for word in ROPE_FIELDS) and value not in (None, False, 0) for name, value in config.items()
    )
    if rope:
        qk_norm = config.get("use_qk_norm") or config.get("qk_layernorm")
        if model is not None and not qk_norm:
            qk_norm = any(name.rsplit(".", 1)[-1] in QK_NORM_MODULES for name, _ in model.named_modules())
        return "positions.rope_qk_norm" if qk_norm else "positions.rope"
    if kind.startswith("relative"):
        return "positions.relative"
    if config.get("sinusoidal_pos_embds"):
        return "positions.sinusoidal"
    if model is not None:
        import torch

        for name, module in model.named_modules():
            leaf = name.rsplit(".", 1)[-1]
            if isinstance(module, torch.nn.Embedding) and ("pos" in leaf or leaf == "wpe"):
                return "positions.learned"
    return "positions.unknown"


UNUSED_PREFIXES = ("pooler.",)
"""Modules the explainer never runs (BERT's pooler): their weights may be absent from a folder."""
NAMED = 3
"""How many tensor names a refusal lists."""


def check_loaded(folder: Path, model, info: dict, *, scan: bool = True) -> None:
    """Refuse a transformers model whose weights did not all come from the folder: transformers only warns and
    initialises the missing or wrong-shape tensors at random, and a NaN/inf tensor would give NaN weights.
    `info`: the loading info of `from_pretrained(..., output_loading_info=True, ignore_mismatched_sizes=True)`
    (a wrong shape is then reported there instead of raised as a traceback). scan False: the weights are not
    read for NaN or infinity (the same files passed that scan before: `build.PASSED`)."""
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
    bad = [name for name, p in model.named_parameters() if scan and p.is_floating_point() and not _finite(p)]
    if bad:
        raise ValueError(f"{folder}: the weights hold NaN or infinite values in {len(bad)} tensor(s) ({_names(bad)})")
    if folder.is_dir():
        check_dtypes(folder, model)


def _finite(t) -> bool:
    """Whether every value of `t` is finite, from one min/max pass and no boolean copy of the tensor: a NaN makes
    the min and the max NaN, and an infinity is the min or the max (isfinite().all() took 10× the time on a 0.5B
    model's weights: docs/calibration.md)."""
    import torch

    if t.numel() == 0:
        return True
    low, high = torch.aminmax(t.detach())
    return bool(torch.isfinite(low)) and bool(torch.isfinite(high))


def check_dtypes(folder: Path, model) -> None:
    """Refuse a safetensors tensor stored as integers (or bools) for a floating-point parameter of the model:
    transformers converts it without a word, and the model would be explained with integer weights. Read from
    the files' headers; an integer buffer (BERT's position_ids) is no parameter and passes."""
    from safetensors import safe_open

    floats = [name for name, p in model.named_parameters() if p.is_floating_point()]
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                dtype = f.get_slice(name).get_dtype()
                if dtype.startswith(("F", "BF")):
                    continue
                param = next((p for p in floats if p == name or p.endswith("." + name) or name.endswith("." + p)), None)
                if param is not None:
                    raise ValueError(
                        f"{path}: tensor {name} is stored as {dtype}, but the model's parameter {param} is floating "
                        f"point: integer weights cannot be its values (save the weights as floats)"
                    )


def _names(names: list[str]) -> str:
    return ", ".join(names[:NAMED]) + (f", … {len(names) - NAMED} more" if len(names) > NAMED else "")
