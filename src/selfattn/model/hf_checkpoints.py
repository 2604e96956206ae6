"""Real checkpoints: Hugging Face GPT-2 and BERT directories, loaded into selfattn's own modules.

    load_gpt2("path/to/gpt2")   config.json + model.safetensors  ->  DecoderLM (causal)
    load_bert("path/to/minilm") config.json + model.safetensors  ->  Encoder   (not causal)

Only safetensors is read — never a pickle (.bin / .pt). Every tensor is looked up by its
Hugging Face name and checked against the shape the config implies; a missing tensor, a
wrong shape, a tensor left over, or a file that is not safetensors gets a ValueError that
names it. Tensors are converted to float32 unless `dtype` says otherwise.

GPT-2 stores its linear layers as `Conv1D`, weight (in, out) — the transpose of
`nn.Linear`'s (out, in) — and fuses Q, K and V into one `c_attn` of width 3·d_model:

    c_attn.weight (d, 3d) = [ W_Q | W_K | W_V ]   ->  q_proj.weight = W_Q.T, k_proj … , v_proj …
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..files import read_json
from .decoder import DecoderConfig, DecoderLM
from .encoder import Encoder, EncoderConfig
from .safetensors_io import assign, read_safetensors

__all__ = ["load_gpt2", "load_bert", "gpt2_config", "bert_config"]

GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
BERT_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
GPT2_IGNORED = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers of old GPT-2 files
BERT_IGNORED = ("pooler.", "cls.", "embeddings.position_ids")  # heads and buffers the encoder does not use
OUTSIDE_PREFIX = ("lm_head.weight",)  # GPT2LMHeadModel keeps its head beside "transformer."


def _read_json(path: Path) -> dict:
    return read_json(path, what="config.json")


def _field(cfg: dict, key: str, source: Path, default=None):
    if key in cfg and cfg[key] is not None:
        return cfg[key]
    if default is None:
        raise ValueError(f"{source} has no {key!r}")
    return default


def _weights_file(folder: Path) -> Path:
    path = folder / "model.safetensors"
    if not path.is_file():
        pickles = [p.name for p in folder.glob("*.bin")] + [p.name for p in folder.glob("*.pt")]
        hint = f" (found {pickles}: pickle files are never loaded; convert them to safetensors)" if pickles else ""
        raise FileNotFoundError(f"{path} not found{hint}")
    return path


class _Tensors:
    """Hugging Face tensors by name, with the name prefix resolved and every use checked."""

    def __init__(
        self, path: Path, prefix_candidates: tuple[str, ...], probe: str, ignored: tuple[str, ...], dtype: torch.dtype
    ):
        self.path = path
        raw = read_safetensors(path)
        prefix = next((p for p in prefix_candidates if p + probe in raw), None)
        if prefix is None:
            raise ValueError(
                f"{path} is missing tensor {prefix_candidates[0] + probe!r} "
                f"(also tried prefixes {list(prefix_candidates[1:])})"
            )
        self.prefix: str = prefix
        self.tensors: dict[str, torch.Tensor] = {}  # name without prefix -> tensor
        self.names: dict[str, str] = {}  # name without prefix -> name in the file
        for name, t in raw.items():
            if name.startswith(self.prefix):
                short = name[len(self.prefix) :]
            elif name.startswith(ignored) or name in OUTSIDE_PREFIX:
                short = name
            else:
                raise ValueError(f"{path} has unexpected tensor {name!r} (outside prefix {self.prefix!r})")
            self.tensors[short] = t
            self.names[short] = name
        self.ignored = ignored
        self.dtype = dtype
        self.used: set[str] = set()

    def take(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        """The tensor `name` (without prefix), checked to have `shape`, in self.dtype."""
        if name not in self.tensors:
            full = name if name in OUTSIDE_PREFIX else self.prefix + name
            raise ValueError(f"{self.path} is missing tensor {full!r} (expected shape {shape})")
        t, full = self.tensors[name], self.names[name]
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{self.path}: tensor {full!r} has shape {tuple(t.shape)}, expected {tuple(shape)}")
        if not t.is_floating_point():
            raise ValueError(f"{self.path}: tensor {full!r} has dtype {t.dtype}, expected floating point")
        self.used.add(name)
        return t.to(self.dtype)

    def has(self, name: str) -> bool:
        return name in self.tensors

    def check_all_used(self) -> None:
        left = sorted(
            n
            for n in self.tensors
            if n not in self.used and not any(part in n or n.startswith(part) for part in self.ignored)
        )
        if left:
            raise ValueError(
                f"{self.path} has unexpected tensor {self.names[left[0]]!r}"
                + (f" and {len(left) - 1} more: {left[1:6]}" if len(left) > 1 else "")
                + "; does config.json match the weights?"
            )


# --- GPT-2 ------------------------------------------------------------------------------------


def gpt2_config(cfg: dict, source: Path = Path("config.json")) -> DecoderConfig:
    """A Hugging Face GPT2Config (as a dict) -> DecoderConfig; unsupported options raise ValueError."""
    act = _field(cfg, "activation_function", source, "gelu_new")
    if act not in GPT2_ACTIVATIONS:
        raise ValueError(
            f"{source}: activation_function {act!r} is not supported; use one of {sorted(GPT2_ACTIVATIONS)}"
        )
    for key, want in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("reorder_and_upcast_attn", False),
        ("add_cross_attention", False),
    ):
        if key in cfg and cfg[key] is not None and bool(cfg[key]) != want:
            raise ValueError(f"{source}: {key}={cfg[key]!r} is not supported (selfattn needs {want})")
    d = _field(cfg, "n_embd", source)
    return DecoderConfig(
        vocab_size=_field(cfg, "vocab_size", source),
        d_model=d,
        n_layers=_field(cfg, "n_layer", source),
        n_heads=_field(cfg, "n_head", source),
        d_ff=cfg.get("n_inner") or 4 * d,
        max_len=_field(cfg, "n_positions", source),
        activation=GPT2_ACTIVATIONS[act],
        norm_eps=float(_field(cfg, "layer_norm_epsilon", source, 1e-5)),
        bias=True,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        dropout=0.0,
    )


def load_gpt2(path: str | os.PathLike, *, dtype: torch.dtype = torch.float32) -> DecoderLM:
    """A Hugging Face GPT-2 directory (config.json + model.safetensors) as a DecoderLM in eval mode."""
    folder = Path(path)
    config = gpt2_config(_read_json(folder / "config.json"), folder / "config.json")
    t = _Tensors(_weights_file(folder), ("transformer.", ""), "wte.weight", GPT2_IGNORED, dtype)
    d, V, F = config.d_model, config.vocab_size, config.hidden
    state = {
        "tok_emb.weight": t.take("wte.weight", (V, d)),
        "pos_emb.weight": t.take("wpe.weight", (config.max_len, d)),
        "ln_f.weight": t.take("ln_f.weight", (d,)),
        "ln_f.bias": t.take("ln_f.bias", (d,)),
    }
    for i in range(config.n_layers):
        h, b = f"h.{i}.", f"blocks.{i}."
        for ln in ("ln_1", "ln_2"):
            state[b + ln + ".weight"] = t.take(h + ln + ".weight", (d,))
            state[b + ln + ".bias"] = t.take(h + ln + ".bias", (d,))
        w_qkv = t.take(h + "attn.c_attn.weight", (d, 3 * d))  # Conv1D: (in, out)
        b_qkv = t.take(h + "attn.c_attn.bias", (3 * d,))
        for j, name in enumerate(("q_proj", "k_proj", "v_proj")):
            state[b + f"attn.{name}.weight"] = w_qkv[:, j * d : (j + 1) * d].T
            state[b + f"attn.{name}.bias"] = b_qkv[j * d : (j + 1) * d]
        state[b + "attn.out_proj.weight"] = t.take(h + "attn.c_proj.weight", (d, d)).T
        state[b + "attn.out_proj.bias"] = t.take(h + "attn.c_proj.bias", (d,))
        state[b + "mlp.fc.weight"] = t.take(h + "mlp.c_fc.weight", (d, F)).T
        state[b + "mlp.fc.bias"] = t.take(h + "mlp.c_fc.bias", (F,))
        state[b + "mlp.proj.weight"] = t.take(h + "mlp.c_proj.weight", (F, d)).T
        state[b + "mlp.proj.bias"] = t.take(h + "mlp.c_proj.bias", (d,))
    if not config.tie_embeddings:
        state["lm_head.weight"] = t.take("lm_head.weight", (V, d))
    elif t.has("lm_head.weight"):
        t.take("lm_head.weight", (V, d))  # a tied copy of wte: shape-checked, not needed
    t.check_all_used()
    model = DecoderLM(config).to(dtype)
    assign(model, state, str(t.path))
    return model.eval()


# --- BERT -------------------------------------------------------------------------------------


def bert_config(cfg: dict, source: Path = Path("config.json")) -> EncoderConfig:
    """A Hugging Face BertConfig (as a dict) -> EncoderConfig; unsupported options raise ValueError."""
    act = _field(cfg, "hidden_act", source, "gelu")
    if act not in BERT_ACTIVATIONS:
        raise ValueError(f"{source}: hidden_act {act!r} is not supported; use one of {sorted(BERT_ACTIVATIONS)}")
    kind = cfg.get("position_embedding_type", "absolute")
    if kind != "absolute":
        raise ValueError(f"{source}: position_embedding_type {kind!r} is not supported (only 'absolute')")
    if cfg.get("is_decoder"):
        raise ValueError(f"{source}: is_decoder=true is not supported; load_bert builds an encoder")
    return EncoderConfig(
        vocab_size=_field(cfg, "vocab_size", source),
        d_model=_field(cfg, "hidden_size", source),
        n_layers=_field(cfg, "num_hidden_layers", source),
        n_heads=_field(cfg, "num_attention_heads", source),
        d_ff=_field(cfg, "intermediate_size", source),
        max_len=_field(cfg, "max_position_embeddings", source),
        type_vocab_size=_field(cfg, "type_vocab_size", source, 2),
        norm_eps=float(_field(cfg, "layer_norm_eps", source, 1e-12)),
        activation=BERT_ACTIVATIONS[act],
    )


def load_bert(path: str | os.PathLike, *, dtype: torch.dtype = torch.float32) -> Encoder:
    """A Hugging Face BERT-style directory (config.json + model.safetensors) as an Encoder in eval mode.

    Works for BertModel files (names like "embeddings.word_embeddings.weight", e.g. all-MiniLM-L6-v2)
    and for task models that prefix them with "bert." (their heads are ignored).
    """
    folder = Path(path)
    config = bert_config(_read_json(folder / "config.json"), folder / "config.json")
    t = _Tensors(_weights_file(folder), ("", "bert."), "embeddings.word_embeddings.weight", BERT_IGNORED, dtype)
    d, F = config.d_model, config.d_ff
    e = "embeddings."
    state = {
        "word_emb.weight": t.take(e + "word_embeddings.weight", (config.vocab_size, d)),
        "pos_emb.weight": t.take(e + "position_embeddings.weight", (config.max_len, d)),
        "type_emb.weight": t.take(e + "token_type_embeddings.weight", (config.type_vocab_size, d)),
        "ln_emb.weight": t.take(e + "LayerNorm.weight", (d,)),
        "ln_emb.bias": t.take(e + "LayerNorm.bias", (d,)),
    }
    for i in range(config.n_layers):
        h, b = f"encoder.layer.{i}.", f"blocks.{i}."
        pairs = (
            ("attention.self.query", "attn.q_proj", (d, d)),
            ("attention.self.key", "attn.k_proj", (d, d)),
            ("attention.self.value", "attn.v_proj", (d, d)),
            ("attention.output.dense", "attn.out_proj", (d, d)),
            ("attention.output.LayerNorm", "ln_1", None),
            ("intermediate.dense", "mlp.fc", (F, d)),
            ("output.dense", "mlp.proj", (d, F)),
            ("output.LayerNorm", "ln_2", None),
        )
        for src, dst, shape in pairs:
            state[b + dst + ".weight"] = t.take(h + src + ".weight", shape or (d,))
            state[b + dst + ".bias"] = t.take(h + src + ".bias", (shape[0],) if shape else (d,))
    t.check_all_used()
    model = Encoder(config).to(dtype)
    assign(model, state, str(t.path))
    return model.eval()
