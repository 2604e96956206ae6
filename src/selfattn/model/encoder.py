"""`Encoder`: a BERT-style encoder built from `MultiHeadSelfAttention(causal=False)`.

    ids (B, L) ─ word + position + token-type embedding ─ LN ─► x (B, L, d_model)
      └─ n_layers × post-norm block:   x = LN(x + attn(x, mask))     every position sees every
                                       x = LN(x + mlp(x))            non-padding position
      └─► last hidden states (B, L, d_model)

Unlike the decoder there is no causal mask: the tutorial's 1/0 table is all ones, except
for the columns of padding, which `attention_mask` turns to 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from .. import checks
from ..limits import CONFIG_LIMITS, check_parameters
from ..modules import MultiHeadSelfAttention
from .decoder import ACTIVATIONS, MLP

__all__ = ["EncoderConfig", "Encoder", "EncoderBlock"]


@dataclass(frozen=True)
class EncoderConfig:
    """vocab_size, d_model, n_layers, n_heads, d_ff, max_len, type_vocab_size, norm_eps, activation."""

    vocab_size: int
    d_model: int = 384
    n_layers: int = 6
    n_heads: int = 12
    d_ff: int = 1536
    max_len: int = 512
    type_vocab_size: int = 2
    norm_eps: float = 1e-12
    activation: str = "gelu"

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_len"):
            checks.integer(name, getattr(self, name), low=1, high=CONFIG_LIMITS[name])
        checks.integer("type_vocab_size", self.type_vocab_size, low=1, high=CONFIG_LIMITS["type_vocab_size"])
        checks.real("norm_eps", self.norm_eps, low=0, low_open=True, high=1.0)
        parameters = (
            self.n_layers * 4 * self.d_model * (self.d_model + self.d_ff // 2)
            + (self.vocab_size + self.max_len + self.type_vocab_size) * self.d_model
        )
        check_parameters(parameters, "the config", "n_layers × d_model × …")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")

    def to_dict(self) -> dict:
        return asdict(self)


class EncoderBlock(nn.Module):
    """Post-norm block (BERT): LN(x + attn(x)), then LN(x + mlp(x)).  x (B, L, d_model) -> same."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.attn = MultiHeadSelfAttention(cfg.d_model, cfg.n_heads, causal=False, bias=True)
        self.ln_1 = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mlp = MLP(cfg.d_model, cfg.d_ff, cfg.activation, bias=True)
        self.ln_2 = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.ln_1(x + self.attn(x, mask=mask))
        return self.ln_2(x + self.mlp(x))


class Encoder(nn.Module):
    """input_ids (B, L) -> last hidden states (B, L, d_model)."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        if not isinstance(config, EncoderConfig):
            raise TypeError(f"config must be an EncoderConfig, got {type(config).__name__}")
        self.config = config
        self.word_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.max_len, config.d_model)
        self.type_emb = nn.Embedding(config.type_vocab_size, config.d_model)
        self.ln_emb = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        self.blocks = nn.ModuleList(EncoderBlock(config) for _ in range(config.n_layers))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Contextual vectors of every position.

        input_ids       (B, L) int token ids
        attention_mask  (B, L) 1 = real token, 0 = padding (None: all real)
        token_type_ids  (B, L) segment ids (None: all 0)
        returns         (B, L, d_model)
        """
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
            raise ValueError(
                f"input_ids must be a (B, L) tensor, got "
                f"{tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__}"
            )
        B, L = input_ids.shape
        if L > self.config.max_len:
            raise ValueError(f"{L} positions exceed max_len={self.config.max_len}")
        if L and (int(input_ids.min()) < 0 or int(input_ids.max()) >= self.config.vocab_size):
            raise ValueError(
                f"token ids must be in [0, {self.config.vocab_size}), got "
                f"[{int(input_ids.min())}, {int(input_ids.max())}]"
            )
        for name, t in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
            if t is not None and tuple(t.shape) != (B, L):
                raise ValueError(f"{name} must have the shape of input_ids {(B, L)}, got {tuple(t.shape)}")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        pos = torch.arange(L, device=input_ids.device)  # (L,)
        x = self.ln_emb(self.word_emb(input_ids) + self.pos_emb(pos) + self.type_emb(token_type_ids))
        mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]  # (B, 1, 1, L)
        for block in self.blocks:
            x = block(x, mask=mask)
        return x  # (B, L, d_model)
