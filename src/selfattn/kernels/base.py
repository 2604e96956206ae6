"""The one contract every attention backend keeps.

`selfattn.attention` validates its arguments once and hands a backend a `Request`.
A backend is an object with

    name: str
    refuse(request) -> str | None     why it cannot serve the request, or None if it can
    forward(request) -> Result        output (B, Hq, Lq, Dv), and weights / lse when asked

Backends never validate user input again: everything in a `Request` is already
checked and normalised (scale resolved, mask a bool or floating tensor that
broadcasts to (B, Hq, Lq, Lk)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch


@dataclass(frozen=True)
class Request:
    """One validated attention call.

    q     (B, Hq, Lq, D)
    k     (B, Hkv, Lk, D)
    v     (B, Hkv, Lk, Dv)
    mask  None, or bool (True = may look) / additive float, broadcastable to (B, Hq, Lq, Lk)
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    causal: bool
    mask: torch.Tensor | None
    window: int | None
    scale: float
    softcap: float | None
    dropout_p: float
    need_weights: bool
    need_lse: bool

    @property
    def batch(self) -> int:
        return self.q.shape[0]

    @property
    def q_heads(self) -> int:
        return self.q.shape[1]

    @property
    def kv_heads(self) -> int:
        return self.k.shape[1]

    @property
    def groups(self) -> int:
        """Query heads per key/value head (1 = MHA, Hq = MQA, else GQA)."""
        return self.q.shape[1] // self.k.shape[1]

    @property
    def len_q(self) -> int:
        return self.q.shape[2]

    @property
    def len_k(self) -> int:
        return self.k.shape[2]

    @property
    def accumulate_dtype(self) -> torch.dtype:
        """Softmax and its sums run in float32 for half types, else in the input dtype."""
        return torch.float32 if self.q.dtype in (torch.float16, torch.bfloat16) else self.q.dtype

    @property
    def needs_grad(self) -> bool:
        return torch.is_grad_enabled() and any(t.requires_grad for t in (self.q, self.k, self.v))


class Result(NamedTuple):
    """output (B, Hq, Lq, Dv) in the input dtype; weights (B, Hq, Lq, Lk) and lse (B, Hq, Lq)
    in the accumulation dtype, or None when not asked for."""

    output: torch.Tensor
    weights: torch.Tensor | None
    lse: torch.Tensor | None


class Backend(Protocol):
    name: str

    def refuse(self, request: Request) -> str | None: ...

    def forward(self, request: Request) -> Result: ...
