"""A head planted by hand: its weights set so that query i attends to key i − `back`, whatever the tokens.

The position embedding carries a phase θ·p in four dimensions as a·[cos, sin, −cos, −sin] (its mean is 0, so the
block's LayerNorm keeps the phase: those dimensions come out as 4·[cos, sin, −cos, −sin] up to the rest's small
share), the token embedding leaves those dimensions alone, and the head's query rotates the phase back by
`back`·θ: q_i · k_j = B cos(θ (i − back − j)), largest at j = i − back. With B large enough the row is one-hot
up to ~1e-6 (a key one step away is 0.25·B·(1 − cos θ) = GAP logits below), for up to PERIOD − 1 positions.
Its logits reach ~3,000, so the float32 capture's weights differ from float64's by up to ~1e-4 (PLANTED_TOL).
"""

from __future__ import annotations

import math

import torch

from selfattn.model.decoder import DecoderLM
from tests.tolerances import TOL

PERIOD = 64
"""Positions per turn of the phase: a text up to this long has one key at the largest logit."""
AMPLITUDE = 100.0
"""The position embedding's size in the four phase dimensions: it outweighs the rest of the residual stream."""
GAP = 14.0
"""Logits between the planted key and its neighbours."""
PLANTED_TOL = TOL["planted_head"]
"""How far a planted head's float32 weights (and the means of them) may lie from float64's."""


def plant(model: DecoderLM, *, layer: int = 0, head: int = 0, back: int = 1) -> DecoderLM:
    """Set `model`'s weights so that head (layer, head) puts (almost) all its weight on key i − back (key 0 while
    i < back). Only layer 0 reads the phase cleanly, so `layer` must be 0. Returns the model."""
    if layer != 0:
        raise ValueError(f"only a layer-0 head can be planted (it reads the position embedding), got layer {layer}")
    theta = 2 * math.pi / PERIOD
    attn = model.blocks[0].attn
    d = attn.head_dim
    B = GAP / (attn.scale * (1 - math.cos(theta)))
    pos = torch.arange(model.pos_emb.num_embeddings, dtype=torch.float64) * theta
    with torch.no_grad():
        model.tok_emb.weight[:, :4] = 0.0
        model.pos_emb.weight.zero_()
        phase = torch.stack([pos.cos(), pos.sin(), -pos.cos(), -pos.sin()], 1)
        model.pos_emb.weight[:, :4] = (AMPLITUDE * phase).float()
        model.blocks[0].ln_1.weight.fill_(1.0)
        model.blocks[0].ln_1.bias.zero_()
        c = torch.zeros(model.tok_emb.weight.shape[1])  # reads cos: (dim 0 − dim 2) / 8
        s = torch.zeros_like(c)  # reads sin: (dim 1 − dim 3) / 8
        c[0], c[2], s[1], s[3] = 1 / 8, -1 / 8, 1 / 8, -1 / 8
        rows = slice(head * d, (head + 1) * d)
        kv = head // (attn.n_heads // attn.n_kv_heads)
        krows = slice(kv * d, (kv + 1) * d)
        ct, st = math.cos(back * theta), math.sin(back * theta)
        attn.q_proj.weight[rows] = 0.0
        attn.q_proj.bias[rows] = 0.0
        attn.q_proj.weight[head * d] = B * (ct * c + st * s)  # cos(θ(i − back))
        attn.q_proj.weight[head * d + 1] = B * (-st * c + ct * s)  # sin(θ(i − back))
        attn.k_proj.weight[krows] = 0.0
        attn.k_proj.bias[krows] = 0.0
        attn.k_proj.weight[kv * d] = c
        attn.k_proj.weight[kv * d + 1] = s
    return model.eval()
