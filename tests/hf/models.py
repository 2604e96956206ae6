"""Tiny random transformers models of every architecture the integration serves, built offline
from their Config classes, and saved as hub-like folders with a tokenizer trained offline.

Each config is as small as the architecture allows (2 layers, 4 query heads, GQA where the
architecture has it), with the features the architecture is known for switched on: Mistral's
sliding window, Gemma2's softcap and alternating sliding window, Qwen3's QK-norm.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

VOCAB = 120
WINDOW = 4
"""Sliding window of Mistral and Gemma2: shorter than the test inputs, so it hides keys."""
SENTENCES = ["a blue monster walks into the forest", "the cat sleeps in the house", "two red fish swim into the sea"]

_COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=128,
)

CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(**_COMMON, num_key_value_heads=2),
    "qwen2": lambda: transformers.Qwen2Config(**_COMMON, num_key_value_heads=2),
    "qwen3": lambda: transformers.Qwen3Config(**_COMMON, num_key_value_heads=2, head_dim=8),
    "mistral": lambda: transformers.MistralConfig(**_COMMON, num_key_value_heads=2, sliding_window=WINDOW),
    "gemma2": lambda: transformers.Gemma2Config(
        **_COMMON, num_key_value_heads=2, head_dim=8, sliding_window=WINDOW, attn_logit_softcapping=5.0
    ),
    "gpt2": lambda: transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=128, n_embd=32, n_layer=2, n_head=4, bos_token_id=2, eos_token_id=3
    ),
    "bert": lambda: transformers.BertConfig(**_COMMON),
}
DECODERS = ("llama", "qwen2", "qwen3", "mistral", "gemma2", "gpt2")
QK_GAIN = 4.0
"""Query/key weights are multiplied by this, so attention is peaked and heads differ visibly."""


def gpt_oss_config():
    """A tiny gpt-oss (attention sinks: `s_aux`): 2 layers (sliding window 4, then full), 4 query heads on 2
    key/value heads, head_dim 8, 4 experts."""
    return transformers.GptOssConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=4,
        max_position_embeddings=128,
    )


def build(kind: str, attn: str = "eager", seed: int = 0) -> torch.nn.Module:
    """A tiny random model of `kind` with attention implementation `attn`, in eval mode."""
    torch.manual_seed(seed)
    config = CONFIGS[kind]()
    cls = transformers.BertModel if kind == "bert" else transformers.AutoModelForCausalLM
    model = (cls(config) if kind == "bert" else cls.from_config(config)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(part in name for part in ("q_proj", "k_proj", "c_attn", ".query.", ".key.")) and p.dim() == 2:
                p.mul_(QK_GAIN)
    model.set_attn_implementation(attn)
    return model


def tokenizer():
    """A word-level tokenizer trained offline on SENTENCES (with [UNK], [CLS], [SEP], [PAD])."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(SENTENCES, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]))
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A", special_tokens=[("[CLS]", 2)])
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]"
    )


def save(kind: str, folder: Path, seed: int = 0) -> Path:
    """The model of `kind` and the tokenizer, saved like a hub folder (safetensors only)."""
    build(kind, seed=seed).save_pretrained(folder, safe_serialization=True)
    tokenizer().save_pretrained(folder)
    return folder


def variant(base: Path, to: Path, config=None, weights=None, tokenizer=None) -> Path:
    """A copy of the saved folder `base` at `to`, broken on purpose: `config(dict)` and `tokenizer(dict)` edit
    config.json / tokenizer.json in place, `weights(tensors)` the safetensors dict (the refusal tests and the
    attack run's folders)."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(base, to)
    for name, change in (("config.json", config), ("tokenizer.json", tokenizer)):
        if change is not None:
            data = json.loads((to / name).read_text())
            change(data)
            (to / name).write_text(json.dumps(data))
    if weights is not None:
        tensors = load_file(to / "model.safetensors")
        weights(tensors)
        save_file(tensors, to / "model.safetensors", metadata={"format": "pt"})
    return to
