"""How an `Explainer` reads a text: one `Tokenizer` protocol, and the kinds the package builds.

tok.segment(text) -> (labels [L], ids (L,), extra model keywords, pieces)   the one cut of a text
tok.decode(i) -> str          the text token `i` adds
tok.shown(i) -> str           the same as a person reads it (a byte piece as the character it begins)
tok.complete(context, ids)    each predicted piece that begins a character shown with it, or None
tok.kind                      how the text is cut, a catalogue key ("tokenizer.word", "tokenizer.byte_bpe", …)

FunctionTokenizer(tokenize, decode)   any tokenize(text) -> (tokens, ids, extra) and decode(id) -> str
CheckpointTokenizer(word_tokenizer)   the word tokenizer of a `selfattn train` checkpoint (`model.tokenizer`)
source.build.TransformersTokenizer    a transformers tokenizer and its model (`complete` runs the model)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import torch

from . import pieces as P

__all__ = ["Tokenizer", "Cut", "FunctionTokenizer", "CheckpointTokenizer"]

Cut = tuple[list[str], torch.Tensor, dict, P.Pieces]
"""(labels [L], ids (L,), extra model keywords, pieces): a text as a tokenizer cut it."""


@runtime_checkable
class Tokenizer(Protocol):
    """What an Explainer reads text with (the module doc)."""

    kind: str

    def segment(self, text: str) -> Cut: ...

    def decode(self, i: int) -> str: ...

    def shown(self, i: int) -> str: ...

    def complete(self, context: list[int], ids: list[int]) -> list[str | None]: ...


class FunctionTokenizer:
    """A tokenizer from two functions: tokenize(text) -> (token strings [L], ids (L,), extra model keywords) and
    decode(id) -> str. The pieces are found by reading the token strings in the text (`pieces.from_strings`); a
    piece is shown as `pieces.shown_piece` reads its decoded text; no completion (`complete` gives None each)."""

    def __init__(
        self,
        tokenize: Callable[[str], tuple[list[str], torch.Tensor, dict]],
        decode: Callable[[int], str],
        kind: str = "tokenizer.word",
    ):
        if not callable(tokenize) or not callable(decode):
            raise TypeError(f"tokenize and decode must be callables, got {tokenize!r} and {decode!r}")
        self.tokenize, self._decode, self.kind = tokenize, decode, kind

    def segment(self, text: str) -> Cut:
        tokens, ids, extra = self.tokenize(text)
        p = P.from_strings(text, list(tokens), [int(i) for i in ids])
        return list(p.labels), ids, extra, p

    def decode(self, i: int) -> str:
        return self._decode(i)

    def shown(self, i: int) -> str:
        return P.shown_id(i, P.shown_piece(self._decode(i)))

    def complete(self, context: list[int], ids: list[int]) -> list[str | None]:
        return [None] * len(ids)


class CheckpointTokenizer(FunctionTokenizer):
    """The word tokenizer of a selfattn checkpoint (`model.tokenizer.WordTokenizer`): <bos> first, its special
    tokens marked as such, its <unk> as the unknown piece."""

    def __init__(self, tokenizer):
        from ..model.tokenizer import SPECIAL_TOKENS

        self.words = tokenizer
        self.special = frozenset(range(len(SPECIAL_TOKENS)))
        super().__init__(lambda text: self.segment(text)[:3], lambda i: tokenizer.tokens[i])

    def segment(self, text: str) -> Cut:
        tok = self.words
        ids = tok.encode(text, bos=True)
        p = P.from_strings(text, [tok.tokens[i] for i in ids], ids, special_ids=self.special, unk_id=tok.unk_id)
        return list(p.labels), torch.tensor(ids), {}, p
