"""`DecoderLM`: a GPT-style decoder-only language model built from `MultiHeadSelfAttention`.

    ids (B, L) ─ token embedding + position embedding ─► x (B, L, d_model)
      └─ n_layers × pre-norm block:   x = x + attn(LN(x))      causal self-attention
                                      x = x + mlp(LN(x))       d_model → d_ff → d_model
      └─ LN ─► lm_head ─► logits (B, L, vocab_size)

The layout (names aside) is GPT-2's, so `selfattn.model.hf_checkpoints.load_gpt2` fills it with real
GPT-2 weights. With one `KVCache` per layer (`model.new_cache()`), feeding a sequence in
pieces gives the logits of one full pass: positions continue at `cache.length`. Without a
cache, `model(ids, start=s)` reads ids at positions s, s + 1, … (s may differ per row), and
`model(ids, positions=p)` at any positions p.

Context parallelism (one sequence split across processes, docs/distributed.md):
`model(shard(ids, group, dim=1), group=group)` runs on this rank's rows of the sequence: each row
embedded at its global position, attention over the whole sequence round the ring.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from .. import checks
from ..distributed.context import ContextParallel
from ..distributed.layout import Sharded
from ..limits import CONFIG_LIMITS, check_parameters  # the one table, checked before anything is built
from ..modules import KVCache, MultiHeadSelfAttention

__all__ = ["DecoderConfig", "DecoderLM", "DecoderBlock", "MLP", "ACTIVATIONS"]

ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2's "gelu_new"
    "relu": F.relu,
}

INIT_STD = 0.02
"""Standard deviation of the initial weights (GPT-2's initializer_range)."""


@dataclass(frozen=True)
class DecoderConfig:
    """Everything needed to build a `DecoderLM` (and to save it as JSON).

    vocab_size      tokens in the vocabulary
    d_model         width of every position's vector (the tutorial's 128)
    n_layers        decoder blocks
    n_heads         query heads per block; n_kv_heads key/value heads (None: n_heads)
    d_ff            hidden width of the MLP (None: 4 · d_model)
    max_len         positions the position embedding covers
    activation      "gelu", "gelu_tanh" or "relu"
    norm_eps        LayerNorm epsilon
    bias            biases in the linear layers
    tie_embeddings  the LM head reuses the token embedding matrix
    dropout         on embeddings, attention weights and residual branches (training only)
    """

    vocab_size: int
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int | None = None
    d_ff: int | None = None
    max_len: int = 64
    activation: str = "gelu"
    norm_eps: float = 1e-5
    bias: bool = True
    tie_embeddings: bool = True
    dropout: float = 0.0

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_len"):
            checks.integer(name, getattr(self, name), low=1, high=CONFIG_LIMITS[name])
        for name in ("n_kv_heads", "d_ff"):
            checks.optional_integer(name, getattr(self, name), low=1, high=CONFIG_LIMITS[name])
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")
        checks.real("norm_eps", self.norm_eps, low=0, low_open=True, high=1.0)
        checks.real("dropout", self.dropout, low=0, high=1, high_open=True)
        checks.boolean("bias", self.bias)
        checks.boolean("tie_embeddings", self.tie_embeddings)
        check_parameters(self.parameters, "the config", "n_layers × d_model × …")

    @property
    def parameters(self) -> int:
        """About how many parameters the model has (embeddings, attention, MLP; biases and norms left out)."""
        kv = (self.n_kv_heads or self.n_heads) * (self.d_model // self.n_heads)
        attention = self.d_model * (2 * self.d_model + 2 * kv)
        mlp = 2 * self.d_model * self.hidden
        embeddings = (self.vocab_size * (1 if self.tie_embeddings else 2) + self.max_len) * self.d_model
        return self.n_layers * (attention + mlp) + embeddings

    @property
    def hidden(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d_model

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> DecoderConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown DecoderConfig fields {unknown}; known: {sorted(known)}")
        return cls(**data)


@contextlib.contextmanager
def eval_mode(model: nn.Module):
    """Evaluation mode (no dropout) inside the block, then the model's previous mode again, even on an error."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


class MLP(nn.Module):
    """x (B, L, d_model) -> fc -> activation -> proj -> (B, L, d_model)."""

    def __init__(self, d_model: int, hidden: int, activation: str, bias: bool = True, dropout: float = 0.0):
        super().__init__()
        self.fc = nn.Linear(d_model, hidden, bias=bias)
        self.proj = nn.Linear(hidden, d_model, bias=bias)
        self.act = ACTIVATIONS[activation]
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(self.act(self.fc(x))))


class DecoderBlock(nn.Module):
    """Pre-norm block: x + attn(LN(x)), then + mlp(LN(x)).  x (B, L, d_model) -> same."""

    def __init__(self, cfg: DecoderConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = MultiHeadSelfAttention(
            cfg.d_model, cfg.n_heads, cfg.n_kv_heads, causal=True, bias=cfg.bias, dropout=cfg.dropout
        )
        self.ln_2 = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mlp = MLP(cfg.d_model, cfg.hidden, cfg.activation, cfg.bias, cfg.dropout)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None, *, context_parallel: ContextParallel | None = None
    ) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln_1(x), cache=cache, context_parallel=context_parallel))
        return x + self.mlp(self.ln_2(x))


class DecoderLM(nn.Module):
    """Decoder-only language model.  input_ids (B, L) or (L,) -> logits (B, L, vocab) or (L, vocab)."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        if not isinstance(config, DecoderConfig):
            raise TypeError(f"config must be a DecoderConfig, got {type(config).__name__}")
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.max_len, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(DecoderBlock(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2's initialisation: N(0, 0.02), residual projections scaled by 1/√(2·n_layers)."""
        residual_std = INIT_STD / math.sqrt(2 * self.config.n_layers)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln_" in name or name.startswith("ln_f"):
                nn.init.ones_(p)
            elif name.endswith(("attn.out_proj.weight", "mlp.proj.weight")):
                nn.init.normal_(p, std=residual_std)
            else:
                nn.init.normal_(p, std=INIT_STD)

    @property
    def max_len(self) -> int:
        return self.config.max_len

    def new_cache(self) -> list[KVCache]:
        """One empty KVCache per layer, for `forward(..., cache=...)`."""
        return [KVCache() for _ in self.blocks]

    def _embed(
        self, input_ids: torch.Tensor, start: int | torch.Tensor, origin: str, positions: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, bool]:
        if not isinstance(input_ids, torch.Tensor):
            raise TypeError(f"input_ids must be a torch.Tensor of token ids, got {type(input_ids).__name__}")
        if input_ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"input_ids must be int64 or int32, got {input_ids.dtype}")
        added = input_ids.dim() == 1
        if added:
            input_ids = input_ids[None]
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (L,) or (B, L), got shape {tuple(input_ids.shape)}")
        B, L = input_ids.shape
        if positions is not None:
            pos = self._check_positions(positions, B, L, added).to(input_ids.device)  # (L,) or (B, L)
        else:
            pos = self._start_positions(start, B, L, origin, input_ids.device)  # (L,) or (B, L)
        if L and (int(input_ids.min()) < 0 or int(input_ids.max()) >= self.config.vocab_size):
            raise ValueError(
                f"token ids must be in [0, {self.config.vocab_size}), got "
                f"[{int(input_ids.min())}, {int(input_ids.max())}]"
            )
        return self.drop(self.tok_emb(input_ids) + self.pos_emb(pos)), added  # (B, L, d_model)

    def _start_positions(self, start: int | torch.Tensor, B: int, L: int, origin: str, device) -> torch.Tensor:
        """start, start + 1, …: (L,) for an int start, (B, L) for one start per row."""
        pos = torch.arange(L, device=device)  # (L,)
        if isinstance(start, torch.Tensor):  # one start per row
            if start.shape != (B,) or start.dtype not in (torch.int64, torch.int32):
                raise ValueError(
                    f"start must be an int or an int64/int32 tensor of shape (B,) = ({B},), "
                    f"got {start.dtype} of shape {tuple(start.shape)}"
                )
            lowest, highest = (int(start.min()), int(start.max())) if B else (0, 0)
            pos = start.to(device)[:, None] + pos  # (B, L)
        else:
            lowest = highest = start
            pos = start + pos
        if lowest < 0:
            raise ValueError(f"start must be >= 0, got {lowest}")
        if highest + L > self.config.max_len:
            raise ValueError(
                f"{highest + L} positions ({origin} {highest} + input {L}) exceed max_len={self.config.max_len}"
            )
        return pos

    def _check_positions(self, positions, B: int, L: int, one_row: bool) -> torch.Tensor:
        """positions (L,) or (B, L) int, each in [0, max_len)."""
        if not isinstance(positions, torch.Tensor) or positions.dtype not in (torch.int64, torch.int32):
            raise TypeError(
                f"positions must be an int64/int32 tensor, got "
                f"{positions.dtype if isinstance(positions, torch.Tensor) else type(positions).__name__}"
            )
        shapes = [(L,)] if one_row else [(L,), (B, L)]
        if tuple(positions.shape) not in shapes:
            raise ValueError(
                f"positions must have shape {' or '.join(map(str, shapes))} (one per input id), "
                f"got {tuple(positions.shape)}"
            )
        if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= self.config.max_len):
            raise ValueError(
                f"positions must be in [0, max_len={self.config.max_len}), got "
                f"[{int(positions.min())}, {int(positions.max())}]"
            )
        return positions

    def forward(
        self,
        input_ids: torch.Tensor | Sharded,
        cache: list[KVCache] | None = None,
        *,
        start: int | torch.Tensor = 0,
        positions: torch.Tensor | None = None,
        group=None,
    ):
        """Logits of the next token at every position.

        input_ids  (B, L) or (L,)  int token ids; or, for context parallelism, the `Sharded` that
                   `shard(input_ids, group, dim=1)` (or `dim=0` for (L,)) returns: this rank's rows
        cache      None, or `new_cache()`: the past is read from it and the new keys/values appended;
                   positions then continue at the cache's length
        start      without a cache: the position of input_ids[..., 0], an int or a (B,) int tensor
                   with one start per row (training places paragraphs at random positions, so that
                   every position embedding is trained)
        positions  instead of start: the position of every id, int (L,) or (B, L), each < max_len
        group      with Sharded input_ids: the process group it was sharded over (None: the default
                   group); every rank must call with its own shard
        returns    (B, L, vocab_size), or (L, vocab_size) for 1-D input; for Sharded input the
                   Sharded logits of this rank's rows (rows at padding positions >= L are garbage)
        """
        if isinstance(input_ids, Sharded):
            return self._forward_sharded(input_ids, cache, start, positions, group)
        if group is not None:
            raise TypeError(
                f"group is for context parallelism: pass input_ids as the Sharded that "
                f"shard(input_ids, group, dim=1) returns, got a {type(input_ids).__name__}"
            )
        past = None if cache is None else self._check_cache(cache)
        if isinstance(start, bool) or not isinstance(start, (int, torch.Tensor)):
            raise TypeError(f"start must be an int or a (B,) int tensor, got {type(start).__name__} {start!r}")
        if positions is not None and (cache is not None or not (isinstance(start, int) and start == 0)):
            raise ValueError("pass positions or start/cache, not both: positions place every id themselves")
        if positions is not None:
            x, added = self._embed(input_ids, 0, "start", positions)
        elif cache is not None:
            if not (isinstance(start, int) and start == 0):
                raise ValueError("pass start or cache, not both: with a cache, positions continue at its length")
            assert past is not None  # checked from the cache above
            x, added = self._embed(input_ids, past, "cache")
        else:
            x, added = self._embed(input_ids, start, "start")
        try:
            for i, block in enumerate(self.blocks):
                x = block(x, cache=None if cache is None else cache[i])
        except BaseException:  # an error or an interrupt between layers: no layer keeps this step's positions
            if past is not None:  # past is set exactly when a cache is given
                for layer in cache or ():
                    layer.truncate(past)
            raise
        logits = self.lm_head(self.ln_f(x))  # (B, L, V)
        return logits[0] if added else logits

    def _check_cache(self, cache) -> int:
        """The length of the past a cache holds: one distinct KVCache per layer (`new_cache()`), every
        layer holding the same positions; else a TypeError/ValueError naming what is wrong."""
        if not isinstance(cache, (list, tuple)):
            raise TypeError(
                f"cache must be a list of KVCache, one per layer (model.new_cache()), got {type(cache).__name__}"
            )
        if len(cache) != len(self.blocks):
            raise ValueError(f"cache has {len(cache)} layers, the model {len(self.blocks)}")
        first_seen: dict[int, int] = {}
        for i, layer in enumerate(cache):
            if not isinstance(layer, KVCache):
                raise TypeError(f"cache[{i}] must be a KVCache, got {type(layer).__name__}")
            j = first_seen.setdefault(id(layer), i)
            if j != i:
                raise ValueError(
                    f"cache[{j}] and cache[{i}] are one KVCache object: each layer needs its own (model.new_cache())"
                )
        lengths = [len(layer) for layer in cache]
        if len(set(lengths)) > 1:
            raise ValueError(
                f"the cache's layers are out of sync: they hold {lengths} positions (a step stopped between "
                f"layers?); every layer must hold the same past: start again with model.new_cache()"
            )
        return lengths[0] if lengths else 0

    def _forward_sharded(self, ids: Sharded, cache, start, positions, group) -> Sharded:
        """This rank's rows of a sequence split across `group`: ids (B, Lr) -> Sharded logits (B, Lr, V)."""
        refused = [
            name
            for name, given in (
                ("cache", cache is not None),
                ("positions", positions is not None),
                ("start", not (isinstance(start, int) and start == 0)),
            )
            if given
        ]
        if refused:
            raise ValueError(
                f"with Sharded input_ids (context parallelism) pass no {' / '.join(refused)}: "
                f"positions come from the shard, and a KV cache is a one-process (decoding) thing"
            )
        if (ids.tensor.dim(), ids.dim) not in ((2, 1), (1, 0)):
            raise ValueError(
                f"Sharded input_ids must be (B, Lr) sharded along dim 1 or (Lr,) along dim 0, got "
                f"shape {tuple(ids.tensor.shape)} sharded along dim {ids.dim}"
            )
        if ids.seq_len > self.config.max_len:
            raise ValueError(f"the sequence has {ids.seq_len} positions, over max_len={self.config.max_len}")
        cp = ContextParallel.of(ids, group)
        pos = ids.positions
        pos = torch.where(pos < ids.seq_len, pos, torch.zeros_like(pos))  # padding rows: any valid position
        x, added = self._embed(ids.tensor, 0, "start", pos)  # (B, Lr, d_model)
        for block in self.blocks:
            x = block(x, context_parallel=cp)
        logits = self.lm_head(self.ln_f(x))  # (B, Lr, V)
        return ids.like(logits[0] if added else logits)

    def num_parameters(self) -> int:
        """Distinct parameters (a tied LM head counted once)."""
        return sum(p.numel() for p in self.parameters())
