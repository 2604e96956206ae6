"""The model's own attention formulas, read from its modules and config: what the stepper's X and Q/K/V steps say.

    f = formula.describe(model)      # a selfattn DecoderLM or a transformers model (its first attention layer)
    f["text"]["qkv"]["zh"]           # "Q = RoPE(q_norm(X·W_Q))，K = RoPE(k_norm(X·W_K))，V = X·W_V …"

    {"norm": "layer" | "rms" | "unknown",  the norm that makes X (the attention's input) from the residual
     "post_norm": bool,                    X is the previous layer's output after its norm (BERT), not a pre-norm
     "bias": {"q", "k", "v": bool},        whether each projection adds a bias
     "qk_norm": bool,                      Q and K normalised per head before RoPE (Qwen3, Gemma-3)
     "rope": {"dims", "head_dim"} | None,  rotary positions on the first `dims` of each head's dims
     "scale": {"value", "from": "head_dim" | "query_pre_attn_scalar" | "scaling"}, "softcap": float | None,
     "sinks": bool, "n_heads", "n_kv_heads",
     "text": {"x": {zh, en}, "qkv": {zh, en}}}

Every part is read from the module that computes it (the projection's own bias, the norm's class, the
q_norm module), and `tests/explainer/source/test_formula.py` recomputes each exported Q and K from X by the formula
shown, so a formula printed is the model's own.
"""

from __future__ import annotations

import torch

from .views import texts

__all__ = ["describe", "shape"]

PROJECTIONS = (("q_proj", "k_proj", "v_proj"), ("query", "key", "value"), ("w_q", "w_k", "w_v"))
"""The names of the Q/K/V projections in the attention modules we read (transformers, BERT, ours)."""
NORMS = ("input_layernorm", "ln_1", "pre_attention_norm", "attention_norm", "ln_attn")
"""The pre-attention norm's name in a decoder layer (Llama-like, GPT-2 and ours, others)."""


def describe(model: torch.nn.Module) -> dict:
    """The formula parts of `model`'s first attention layer and its config (see the module doc)."""
    config = getattr(model, "config", None)
    get = (lambda name, default=None: getattr(config, name, default)) if config is not None else (lambda n, d=None: d)
    text_config = get("text_config")
    if text_config is not None:
        get = lambda name, default=None: getattr(text_config, name, default)  # noqa: E731 - a multimodal model's text part
    attn, layer = _first_attention(model)
    bias = _biases(attn)
    n_heads = describe_heads(model, attn)
    hidden = int(get("hidden_size", get("n_embd", 0)) or 0)
    head_dim = int(get("head_dim", 0) or getattr(attn, "head_dim", 0) or (hidden // n_heads if n_heads else 0))
    n_kv = int(get("num_key_value_heads", 0) or getattr(attn, "n_kv_heads", 0) or n_heads)
    qk_norm = attn is not None and any(hasattr(attn, name) for name in ("q_norm", "q_layernorm", "query_norm"))
    rope = _rope(get, head_dim)
    norm, post = _norm(layer, get)
    scalar = get("query_pre_attn_scalar")
    if scalar is not None:
        scale = {"value": float(scalar) ** -0.5, "from": "query_pre_attn_scalar", "scalar": float(scalar)}
    elif attn is not None and isinstance(scaling := getattr(attn, "scaling", None), float):
        scale = {"value": scaling, "from": "head_dim" if head_dim else "scaling"}
    else:
        scale = {"value": head_dim**-0.5 if head_dim else None, "from": "head_dim"}
    out = {
        "norm": norm,
        "post_norm": post,
        "bias": bias,
        "qk_norm": bool(qk_norm),
        "rope": rope,
        "scale": scale,
        "softcap": get("attn_logit_softcapping"),
        "sinks": attn is not None and hasattr(attn, "sinks"),
        "n_heads": n_heads,
        "n_kv_heads": n_kv,
    }
    return out | {"text": words(out)}


def shape(model: torch.nn.Module) -> tuple[int, int]:
    """(layers, query heads) of `model` as its config says (num_hidden_layers / n_layer / n_layers, the text config's
    for a multimodal model), else as its modules do (those holding Q/K/V projections, `PROJECTIONS`), without
    running it; the heads are its config's (or the first attention module's `n_heads`). A ValueError where either
    cannot be read."""
    config = getattr(model, "config", None)
    text = getattr(config, "text_config", None) or config
    layers = next((getattr(text, n) for n in ("num_hidden_layers", "n_layer", "n_layers") if hasattr(text, n)), None)
    if not isinstance(layers, int):  # no config that says: the modules holding Q/K/V projections
        layers = sum(
            1
            for module in model.modules()
            if any(all(isinstance(getattr(module, n, None), torch.nn.Module) for n in names) for names in PROJECTIONS)
        )
    heads = int(describe_heads(model))
    if not layers or not heads:
        raise ValueError(f"cannot read the number of attention layers and heads of {type(model).__name__}")
    return layers, heads


def describe_heads(model: torch.nn.Module, attn: torch.nn.Module | None = None) -> int:
    """The query heads of `model`'s attention layers (its config's, else its first attention module's `attn`, found
    when not given), or 0."""
    config = getattr(model, "config", None)
    text = getattr(config, "text_config", None) or config
    n = getattr(text, "num_attention_heads", None) or getattr(text, "n_head", None) or getattr(text, "n_heads", None)
    if n:
        return int(n)
    attn = _first_attention(model)[0] if attn is None else attn
    return int(getattr(attn, "n_heads", 0) or 0)


def _first_attention(model: torch.nn.Module) -> tuple[torch.nn.Module | None, torch.nn.Module | None]:
    """(the first module holding Q/K/V projections, the module holding it: its layer), or (None, None)."""
    parents: dict[str, torch.nn.Module] = {}
    for name, module in model.named_modules():
        parents[name] = module
        for names in PROJECTIONS:
            if all(isinstance(getattr(module, n, None), torch.nn.Module) for n in names):
                path = name.split(".")
                layer = None
                for cut in range(len(path) - 1, 0, -1):  # the nearest ancestor that holds a norm
                    candidate = parents.get(".".join(path[:cut]))
                    if candidate is not None and any(hasattr(candidate, n) for n in NORMS):
                        layer = candidate
                        break
                return module, layer
        if hasattr(module, "c_attn") and hasattr(module, "c_proj"):  # GPT-2: one fused projection
            return module, parents.get(name.rsplit(".", 1)[0]) if "." in name else None
    return None, None


def _biases(attn: torch.nn.Module | None) -> dict[str, bool]:
    if attn is None:
        return {"q": False, "k": False, "v": False}
    if hasattr(attn, "c_attn"):
        has = getattr(attn.c_attn, "bias", None) is not None
        return {"q": has, "k": has, "v": has}
    for names in PROJECTIONS:
        if all(hasattr(attn, n) for n in names):
            modules = [getattr(attn, n) for n in names]
            return {key: getattr(m, "bias", None) is not None for key, m in zip("qkv", modules, strict=True)}
    return {"q": False, "k": False, "v": False}


def _rope(get, head_dim: int) -> dict | None:
    kind = str(get("position_embedding_type", "") or "").lower()
    if kind in ("absolute", "relative_key", "relative_key_query") or get("n_positions") is not None:
        return None
    if get("rope_theta") is None and get("rope_parameters") is None and get("rope_scaling") is None:
        return None
    factor = get("partial_rotary_factor")
    params = get("rope_parameters")
    if factor is None and isinstance(params, dict):  # transformers 5: in rope_parameters (per layer type)
        found = [params.get("partial_rotary_factor")] + [
            v.get("partial_rotary_factor") for v in params.values() if isinstance(v, dict)
        ]
        factor = next((f for f in found if f is not None), None)
    factor = float(factor or 1.0)
    return {"dims": int(head_dim * factor), "head_dim": head_dim}


NORM_KEYS = {"layer": "formula.norm_layer", "rms": "formula.norm_rms", "unknown": "formula.norm_unknown"}
"""Each kind of norm (`_kind`), in words."""


def _norm(layer: torch.nn.Module | None, get) -> tuple[str, bool]:
    """(the kind of norm X comes out of, whether it is the previous layer's post-norm)."""
    for name in NORMS if layer is not None else ():
        module = getattr(layer, name, None)
        if module is not None:
            return _kind(module), False
    # BERT: no norm before attention; X is the embeddings' or the previous layer's output LayerNorm
    eps = get("layer_norm_eps")
    return ("layer" if eps is not None else "unknown"), eps is not None


def _kind(module: torch.nn.Module) -> str:
    name = type(module).__name__.lower()
    if "rms" in name:
        return "rms"
    if isinstance(module, torch.nn.LayerNorm) or "layernorm" in name:
        return "layer"
    return "unknown"


def words(f: dict) -> dict:
    """The X and Q/K/V steps in words, zh and en, from the parts (`texts` "formula.*")."""
    out: dict = {"x": {}, "qkv": {}}
    for lang in texts.LANGS:
        norm = texts.text(NORM_KEYS[f["norm"]], lang)
        out["x"][lang] = texts.text("formula.x_post" if f["post_norm"] else "formula.x", lang, norm=norm)
        parts = [_projection(f, name, lang) for name in ("Q", "K", "V")]
        notes = []
        if f["rope"] is not None:
            rope = f["rope"]
            key = "formula.rope_all" if rope["dims"] == rope["head_dim"] else "formula.rope_part"
            notes.append(texts.text(key, lang, dims=rope["dims"], head_dim=rope["head_dim"]))
        if f["qk_norm"]:
            notes.append(texts.text("formula.qk_norm", lang, norm=norm))
        if f["n_kv_heads"] and f["n_kv_heads"] != f["n_heads"]:
            notes.append(texts.text("formula.gqa", lang, n=f["n_heads"], kv=f["n_kv_heads"]))
        sep = "，" if lang == "zh" else ", "
        end = "；" if lang == "zh" else "; "
        out["qkv"][lang] = sep.join(parts) + (end + end.join(notes) if notes else "")
    return out


def _projection(f: dict, name: str, lang: str) -> str:
    inner = f"X·W_{name}" + (" + b_" + name if f["bias"][name.lower()] else "")
    if name in "QK" and f["qk_norm"]:
        inner = f"{name.lower()}_norm({inner})"
    if name in "QK" and f["rope"] is not None:
        inner = f"RoPE({inner})"
    return f"{name} = {inner}"
