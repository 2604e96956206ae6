"""The one tiny random decoder of the explainer tests (a real jieba tokenizer), in memory
(`tiny_explainer`) or saved as a checkpoint folder (`save_tiny`, the `tiny_checkpoint` fixture).

The bundled default model is trained elsewhere and may be absent; these tests need a model
that reads 1,000+ tokens, so they build their own: 2 layers × 2 heads, d_model 32,
max_len 1024. The query/key projections are drawn wide (std QK_STD, not GPT-2's 0.02) so
the attention is peaked rather than uniform — a test that swapped two keys would notice.
"""

from __future__ import annotations

import torch

from selfattn.explainer.session import Explainer
from selfattn.model.decoder import DecoderConfig, DecoderLM
from selfattn.model.tokenizer import WordTokenizer

SENTENCES = [
    ["一只", "蓝色", "怪兽", "走进", "森林", "。"],
    ["两条", "红色", "鱼", "游进", "大海", "。"],
    ["它", "在", "森林", "里", "睡觉", "。"],
    ["<script>"],
]
MAX_LEN = 1024
QK_STD = 0.25
EMB_STD = 0.2
VO_STD = 0.2
LONG_TEXT = "一只蓝色怪兽走进森林" * 200
"""2,000 characters, 1,000 words (+ <bos>): the long input of issue 5."""


def tiny_model(
    seed: int = 0, vocab_size: int | None = None, n_heads: int = 2, n_kv_heads: int | None = None
) -> DecoderLM:
    torch.manual_seed(seed)
    model = DecoderLM(
        DecoderConfig(
            vocab_size=vocab_size, d_model=32, n_layers=2, n_heads=n_heads, n_kv_heads=n_kv_heads, max_len=MAX_LEN
        )
    )
    with torch.no_grad():
        model.tok_emb.weight.normal_(0.0, EMB_STD)
        for block in model.blocks:
            block.attn.q_proj.weight.normal_(0.0, QK_STD)
            block.attn.k_proj.weight.normal_(0.0, QK_STD)
            block.attn.v_proj.weight.normal_(0.0, VO_STD)
            block.attn.out_proj.weight.normal_(0.0, VO_STD)
            block.attn.q_proj.bias.normal_(0.0, 0.1)
            block.attn.k_proj.bias.normal_(0.0, 0.1)
    return model.eval()


def tiny_explainer(seed: int = 0, n_heads: int = 2, n_kv_heads: int | None = None) -> Explainer:
    """Jieba words → vocabulary ids, <bos> first: the same tokenize as `Explainer.load`.
    n_kv_heads < n_heads: grouped-query attention (query heads share keys and values)."""
    tok = WordTokenizer.from_words(SENTENCES)
    model = tiny_model(seed, tok.vocab_size, n_heads, n_kv_heads)

    def tokenize(text: str):
        ids = tok.encode(text, bos=True)
        return [tok.tokens[i] for i in ids], torch.tensor(ids), {}

    return Explainer.from_functions(
        model, tokenize, lambda i: tok.tokens[i], name="tiny random decoder", max_len=MAX_LEN
    )


def slash_explainer(seed: int = 0) -> Explainer:
    """Tokens are what lies between " / " (the tutorial's "一只 / 蓝色 / 怪兽"), shown exactly as typed:
    a way to put any string, markup included, into the token list. Unknown words read as <unk>."""
    tok = WordTokenizer.from_words(SENTENCES)
    model = tiny_model(seed, tok.vocab_size)

    def tokenize(text: str):
        words = [w.strip() for w in text.split(" / ") if w.strip()]
        ids = [tok.bos_id] + [tok.id_of(w) if w in tok else tok.unk_id for w in words]
        return ["<bos>"] + words, torch.tensor(ids), {}

    return Explainer.from_functions(
        model, tokenize, lambda i: tok.tokens[i], name="tiny random decoder (slash tokens)", max_len=MAX_LEN
    )


def save_tiny(path, seed: int = 0, n_heads: int = 4, n_kv_heads: int | None = 2):
    """The tiny decoder (GQA by default: 4 query heads over 2 key/value heads) as a checkpoint folder."""
    from selfattn.model.checkpoint import save_checkpoint

    tok = WordTokenizer.from_words(SENTENCES)
    save_checkpoint(tiny_model(seed, tok.vocab_size, n_heads, n_kv_heads), tok, path)
    return path
