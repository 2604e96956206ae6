"""A tiny random gpt-oss (attention sinks: transformers' `s_aux` → selfattn's `sinks`), saved offline as a
hub-like folder with the word-level tokenizer of tests/hf/models.py, for the explainer's sink column.

2 layers (sliding window 4, then full attention), 4 query heads on 2 key/value heads, head_dim 8. The
query/key projections are widened (QK_GAIN) so attention is peaked, and the sinks drawn wide
(SINK_STD), so some rows give the sink most of their attention and others little.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

from tests.hf.models import gpt_oss_config, tokenizer

QK_GAIN = 6.0
SINK_STD = 2.0
TEXT = "a blue monster walks into the forest"


def build(seed: int = 0) -> torch.nn.Module:
    config = gpt_oss_config()
    torch.manual_seed(seed)
    model = transformers.GptOssForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("sinks"):
                p.normal_(0.0, SINK_STD)
            elif ("q_proj" in name or "k_proj" in name) and p.dim() == 2:
                p.mul_(QK_GAIN)
    return model


def save(folder: Path, seed: int = 0) -> Path:
    build(seed).save_pretrained(folder, safe_serialization=True)
    tokenizer().save_pretrained(folder)
    return folder
