"""An `Explainer`: a model, its tokenizer and its name, ready to explain a text.

    ex = Explainer.load()                       # the bundled default model (never touches the network)
    ex = Explainer.load("runs/my-model")        # a checkpoint written by `selfattn train`
    ex = Explainer.load("path/to/qwen")         # a transformers folder (config.json + safetensors + tokenizer)
    ex = Explainer.load("SmolLM2.Q4_1.gguf")    # a GGUF file (or a folder holding one), tokenizer included
    ex = Explainer.load("Qwen/Qwen2.5-0.5B")    # a hub id: downloaded once, or from the local cache offline
    ex = Explainer.from_transformers(model, tokenizer)   # a model loaded with attn_implementation="selfattn"
    e = pipeline.explain(ex, Spec("一只蓝色怪兽走进森林"))   # an `Explanation` (`result`)

Any model transformers runs through its attention interface is explained, decoder or encoder
(`loaders`: the class read from the config, a dry run that every layer calls selfattn). Tokens are
shown as a person reads them (`pieces`): byte pieces as the characters they spell, a repeated token
with its position. The CLI, the HTML report and the web app all go through `pipeline.explain`, so they show one
set of numbers. Thread-safe: interventions travel in a context (`selfattn.intercept`), never as
attributes set on the model, so one Explainer may serve several requests at once.
"""

from __future__ import annotations

import functools
import os
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..model import corpus
from . import catalogue as texts
from . import formula
from . import induction_probe as _probe
from . import pieces as P
from .card import Card
from .interventions import Intervention
from .source import resolve as sources
from .tokenizing import CheckpointTokenizer, FunctionTokenizer, Tokenizer
from .trace_types import ModelTrace

__all__ = ["Explainer", "DEFAULT_TEXT", "MAX_CHARS", "vocabulary", "unknown_report", "dtype_name"]

DEFAULT_TEXT = "一只蓝色怪兽走进森林"
MAX_CHARS = 4000
"""Longest text accepted (characters), whatever the model's context."""
SUGGESTED_MODEL = "Qwen/Qwen2.5-0.5B"
"""A real model to suggest for free text (Chinese and English)."""
DEFAULT_NAME = "selfattn default model"
NO_CAUSAL = "no_causal"
"""The intervention an encoder refuses: it has no causal mask to switch off."""


@dataclass
class Explainer:
    """A model, the tokenizer it reads text with and its card, ready to explain a text.

    model         a DecoderLM / encoder built from selfattn modules, or a transformers model whose attention
                  implementation is "selfattn"
    tokenizer     a `tokenizing.Tokenizer` (segment, decode, shown, complete, kind)
    card          `card.Card`: name, max_len, architecture, positions, kind, unknown_hint, loaded, bos_token
    user_words    {word: role | None}: words the part-of-speech tagger keeps whole, a given role winning over
                  its tag (`analysis.held.words_of`): our tokenizer's own words, or a reader's (`with_words`)
    grammar       {word: role}: the words whose clause-2 references the tutorial relations measure
                  (`analysis.relations.links`); the default model's grammar (`model.corpus.grammar`) for every model
    scenes        the words the contrast sentences put in place of the text's (`analysis.word_relations.Scenes`):
                  the default model's grammar's scenes (`model.corpus.scenes`) for every model"""

    model: torch.nn.Module
    tokenizer: Tokenizer
    card: Card
    user_words: dict[str, str | None] = field(default_factory=dict)
    grammar: Mapping[str, str] = field(default_factory=corpus.grammar)
    scenes: tuple[Mapping[str, tuple[str, ...]], ...] = field(default_factory=corpus.scenes)

    def __post_init__(self):
        if not isinstance(self.tokenizer, Tokenizer):
            raise TypeError(
                f"tokenizer must be a tokenizing.Tokenizer (segment, decode, shown, complete, kind), got "
                f"{type(self.tokenizer).__name__}"
            )
        if not isinstance(self.card, Card):
            raise TypeError(f"card must be a card.Card, got {type(self.card).__name__}")

    @classmethod
    def from_functions(
        cls,
        model: torch.nn.Module,
        tokenize: Callable[[str], tuple[list[str], torch.Tensor, dict]],
        decode: Callable[[int], str],
        *,
        name: str,
        max_len: int,
        **card,
    ) -> Explainer:
        """An Explainer of `model` reading text with tokenize(text) -> (token strings, ids (L,), extra model
        keywords) and decode(id) -> str (`tokenizing.FunctionTokenizer`); card: the other `Card` fields."""
        return cls(model, FunctionTokenizer(tokenize, decode), Card(name=name, max_len=max_len, **card))

    @property
    def name(self) -> str:
        """The model's name as every view says it (`Card.name`)."""
        return self.card.name

    @functools.cached_property
    def frame_bos(self) -> tuple[int | None, int | None]:
        """(the tokenizer's own first token or None, the model's BOS id or None), read once: every cut asks, and
        `knows` cuts many words. The model's BOS is its config's (`induction_probe.bos_id`), else `Card.bos_token`."""
        prefix, _ = _probe.frame(self)
        try:
            bos = _probe.bos_id(self)
        except _probe.NoProbe:  # no token embedding: no BOS to read
            bos = None
        return (prefix[0] if prefix else None), (self.card.bos_token if bos is None else bos)

    def tokenize(self, text: str) -> tuple[list[str], torch.Tensor, dict]:
        """(token labels, ids (L,), extra model keywords) of `text` as the tokenizer cuts it (no BOS plan: `cut`)."""
        return self.tokenizer.segment(text)[:3]

    def decode(self, i: int) -> str:
        """The text token `i` adds."""
        return self.tokenizer.decode(i)

    def with_words(self, user_words) -> Explainer:
        """A copy whose tagger also keeps `user_words` whole: a list of words, or {word: role} (one of
        `roles.ROLES`, or None for the tagger's), winning over this explainer's own where both name a word."""
        from dataclasses import replace

        from .analysis.roles import given_roles

        return replace(self, user_words=self.user_words | given_roles(user_words))

    @classmethod
    def load(cls, path: str | os.PathLike | None = None, dtype: str | torch.dtype | None = None) -> Explainer:
        """The default model (path None), a checkpoint folder written by `selfattn train`, a transformers
        folder, a GGUF file or a folder holding one, or a hub id (see `sources.locate`), its weights in `dtype`
        ("bfloat16", "float16", "float32" or that torch.dtype; default float32), the parameter budget counting
        that dtype's bytes."""
        from ..model import checkpoint

        name = dtype_name(dtype)
        if path is None:
            model, tokenizer = checkpoint.load_default()[:2]
            return cls._from_checkpoint(model.to(getattr(torch, name)), tokenizer, name=DEFAULT_NAME, bundled=True)
        source = sources.locate(path)
        kind, config = sources.folder_kind(source, name)
        if kind == "selfattn":
            model, tokenizer = checkpoint.load_checkpoint(source.folder)[:2]
            return cls._from_checkpoint(model.to(getattr(torch, name)), tokenizer, name=source.name)
        return cls._from_transformers(source, config, getattr(torch, name))

    @classmethod
    def from_transformers(cls, model: torch.nn.Module, tokenizer, *, name: str | None = None) -> Explainer:
        """An Explainer of a transformers model already loaded with attn_implementation="selfattn" and its
        tokenizer (`loaders.wrap`: the same dry run as a folder)."""
        from .source import build as loaders

        return cls(*loaders.wrap(model, tokenizer, name=name))

    @classmethod
    def _from_checkpoint(cls, model, tokenizer, *, name: str, bundled: bool = False) -> Explainer:
        who = {lang: name for lang in texts.LANGS} if bundled else texts.both("model.this_checkpoint")
        words = len(tokenizer.tokens)
        hint = {
            lang: texts.text("model.corpus_only", lang, who=who[lang], words=words, model=SUGGESTED_MODEL)
            for lang in texts.LANGS
        }
        card = Card(
            name=name,
            max_len=model.max_len,
            unknown_hint=hint,
            kind="decoder",
            loaded={"format": "selfattn checkpoint", "file": None, "class": type(model).__name__, "why": "ours"},
            bos_token=tokenizer.bos_id,
        )
        return cls(model.eval(), CheckpointTokenizer(tokenizer), card, user_words=dict.fromkeys(tokenizer.user_words))

    @classmethod
    def _from_transformers(cls, source: sources.Source, config: dict, dtype: torch.dtype) -> Explainer:
        from .source import build as loaders

        return cls(*loaders.load(source, config, dtype))

    def pieces_of(self, text: str, prepend_bos: bool | None = None) -> tuple[list[str], torch.Tensor, dict, P.Pieces]:
        """(token labels, ids (L,), extra model kwargs, pieces) of `text` as this explainer cuts it, the BOS put
        first or left out as `prepend_bos` asks (`bos`)."""
        cut = self.tokenizer.segment(text)
        plan = self.bos(prepend_bos)
        return _with_bos(check_tokens(text, cut, self.name), plan, self.decode)  # a text of no tokens: refused

    def bos(self, prepend_bos: bool | None = None) -> dict:
        """{prepend_bos, id, token, added, removed}: what is done with the model's BOS before a text's own tokens, as
        TransformerLens' `to_tokens` does. prepend_bos None (the default): True where the model has a BOS
        (`probe.bos_id`, else `bos_token`), else False. True: the text starts with the BOS: the tokenizer's own where
        it puts it first, else the model's prepended (added True); refused on a model with no BOS. False: no BOS:
        the tokenizer's own removed where it puts the model's BOS first (removed True). A first token the tokenizer
        puts that is not the model's BOS ([CLS]) is kept either way. id/token: the token added, removed, or the
        tokenizer's own first one (None where there is none)."""
        if prepend_bos is not None and not isinstance(prepend_bos, bool):
            raise TypeError(f"prepend_bos must be True, False or None, got {prepend_bos!r}")
        return _bos_plan(self, prepend_bos)

    def check_intervention(self, intervention: Intervention, kind: str | None) -> None:
        """Refuse what cannot apply to this model: switching the causal mask off of an encoder."""
        if (kind or self.card.kind) == "encoder" and NO_CAUSAL in intervention.applied:
            raise ValueError(
                f"{self.name} is an encoder: every token already sees every other (no causal mask), so "
                f"there is no causal mask to switch off ({NO_CAUSAL})"
            )

    def cut(self, text: str, prepend_bos: bool | None = None) -> tuple[list[str], torch.Tensor, dict, P.Pieces]:
        """`pieces_of(text, prepend_bos)` (token labels, ids (L,), extra model kwargs, pieces), refused when longer
        than the model reads: the one tokenization of a text the pipeline and the experiments read."""
        cut = self.pieces_of(text, prepend_bos)
        if len(cut[1]) > self.card.max_len:
            raise ValueError(f"the text has {len(cut[1])} tokens; {self.name} reads at most {self.card.max_len}")
        return cut

    def shape(self) -> tuple[int, int]:
        """(layers, query heads) of the model, read from its modules and config (`formula.shape`): no forward pass."""
        return formula.shape(self.model)

    def check_decoder(self, what: str) -> None:
        """Refuse an experiment that compares next-token predictions (`what`) on an encoder."""
        if self.card.kind == "encoder":
            raise ValueError(f"{self.name} is an encoder: {what} compares next-token predictions")

    def knows(self, word: str) -> bool:
        """Whether this explainer's tokenizer reads `word` without an unknown token (`pieces.Pieces.unknown`)."""
        return not any(self.pieces_of(word)[3].unknown)


def unknown_report(pieces: P.Pieces, hint: dict[str, str] | None = None) -> dict:
    """{count, positions, message, hint}: the pieces that are the tokenizer's unknown token (a true `<unk>`;
    byte pieces never are: together they spell the text). `message` is the English sentence (for JSON
    readers); each view says the count in its own language and adds `hint[lang]`: what the model knows
    and what to use instead."""
    hint = hint or {"en": "", "zh": ""}
    positions = [i for i, unknown in enumerate(pieces.unknown) if unknown]
    message = ""
    if positions:
        message = f"{len(positions)} of {len(pieces)} tokens are unknown to the tokenizer"
        message += f": {hint['en']}" if hint["en"] else ""
    return {"count": len(positions), "positions": positions, "message": message, "hint": hint}


def find_positions(trace: ModelTrace, find) -> tuple:
    """(query, key) of a head search with every position written as a position: an int stays; a string of
    digits is a position; a name as the views show a repeated token ("金鱼@5") is its position, checked to
    name that token; any other string is a token for `heads.search` to look up."""
    if not isinstance(find, (tuple, list)) or len(find) != 2:
        raise ValueError(f"find must be (query, key), got {find!r}")
    names = P.names(trace.tokens)
    out = []
    for value in find:
        if isinstance(value, str):
            word = value.strip()
            if word.isdigit() and word not in trace.tokens:
                value = int(word)
            elif word in names and word not in trace.tokens:  # "金鱼@5": the 金鱼 at position 5
                value = names.index(word)
            elif "@" in word and word.rsplit("@", 1)[1].isdigit():
                raise ValueError(f"{value!r} names no token: the tokens are {' / '.join(names)}")
        out.append(value)
    return tuple(out)


def vocabulary(path: str | Path | None = None) -> list[str]:
    """The tokens a selfattn model knows, in id order: the bundled default model's corpus vocabulary
    (path None) or a checkpoint folder's. (CLI: `selfattn vocab [--model PATH]`.)"""
    from ..model import checkpoint

    tokenizer = checkpoint.load_default()[1] if path is None else checkpoint.load_checkpoint(path)[1]
    return list(tokenizer.tokens)


BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Embeddings, overrides and isolates (LRE RLE PDF LRO RLO, LRI RLI FSI PDI): they reorder how the tokens
around them are displayed (a table or the page could show "abc" for "cba"), so a text holding one is
refused. The marks LRM/RLM (U+200E/U+200F) only hint a direction and are accepted."""


def check_text(text) -> str:
    """`text` if the explainer (and `generate`) accepts it: a non-empty str of at most MAX_CHARS characters
    with no control character; else a TypeError/ValueError saying why.

    Refused, by `unicodedata.category`: controls (Cc: C0 and C1, DEL) except tab and newline, lone
    surrogates (Cs: not text at all) and the bidi controls of BIDI_CONTROLS. Everything else is ordinary
    text, whatever `str.isprintable` says: spaces such as U+3000 (ideographic) and U+00A0 (no-break),
    and the format characters U+200D (the emoji joiner), U+FEFF and U+00AD (soft hyphen)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("text is empty: give a sentence such as 一只蓝色怪兽走进森林")
    if len(text) > MAX_CHARS:
        raise ValueError(f"text has {len(text)} characters; the limit is {MAX_CHARS}")
    for at, ch in enumerate(text):
        kind = unicodedata.category(ch)
        if kind == "Cc" and ch not in "\n\t":
            raise ValueError(f"text contains a control character {ch!r} at position {at}")
        if kind == "Cs":
            raise ValueError(f"text contains a control character {ch!r} at position {at} (a lone surrogate: not UTF-8)")
        if ch in BIDI_CONTROLS:
            raise ValueError(
                f"text contains the bidirectional control U+{ord(ch):04X} at position {at}: it would reorder "
                "how the tokens are displayed"
            )
    return text


def _bos_plan(explainer, prepend_bos: bool | None) -> dict:
    first, bos = explainer.frame_bos
    want = bos is not None if prepend_bos is None else prepend_bos
    if want and bos is None and first is None:
        raise ValueError(
            f"prepend_bos=True, but {explainer.name} has no BOS token (its config names no bos_token_id) and its "
            "tokenizer puts none first: leave prepend_bos out (None) or False"
        )
    added = bool(want and first is None and bos is not None)
    removed = bool(not want and first is not None and first == bos)
    if added or removed:
        shown = bos
    else:  # the tokenizer's own first token: the BOS asked for, or one kept that is not the model's BOS ([CLS])
        shown = first
    return {
        "prepend_bos": bool(want),
        "id": shown,
        "token": None if shown is None else explainer.decode(shown),
        "added": added,
        "removed": removed,
    }


def _with_bos(cut: tuple, plan: dict, decode) -> tuple:
    """`cut` (labels, ids, extra, pieces) with the model's BOS put first (plan["added"]) or its first token
    removed (plan["removed"]); as it was otherwise. An attention mask in `extra` follows the ids."""
    if not (plan["added"] or plan["removed"]):
        return cut
    labels, ids, extra, p = cut
    ids = torch.as_tensor(ids).reshape(-1)
    if plan["added"]:
        bos = int(plan["id"])
        new_ids = [bos, *(int(i) for i in ids)]
        raw, spans = (decode(bos), *p.raw), ((-1, -1), *p.spans)
        special = {bos, *(i for i, s in zip(p.ids, p.special, strict=True) if s)}
    else:
        new_ids = [int(i) for i in ids[1:]]
        raw, spans = p.raw[1:], p.spans[1:]
        special = {i for i, s in zip(p.ids[1:], p.special[1:], strict=True) if s}
    unk = next((i for i, u in zip(p.ids, p.unknown, strict=True) if u), None)
    words = [(g.start, g.end) for g in p.words if g.start >= 0]
    pieces = P.build(p.text, new_ids, list(raw), list(spans), unk_id=unk, special_ids=frozenset(special), words=words)
    extra = dict(extra)
    if "attention_mask" in extra:
        extra["attention_mask"] = torch.ones(1, len(new_ids), dtype=torch.long)
    return list(pieces.labels), torch.tensor(new_ids), extra, pieces


def check_tokens(text: str, cut: tuple, name: str) -> tuple:
    """`cut` (labels, ids, …) of `text` unless the tokenizer turned it into no token at all (a normalizer that
    removes every character): then a ValueError naming the text, before the model is run on nothing."""
    if len(cut[1]) == 0:
        raise ValueError(f"{name}'s tokenizer turns the text {text[:80]!r} into no tokens at all: nothing to explain")
    return cut


def dtype_name(dtype: str | torch.dtype | None) -> str:
    """The name (a key of `limits.DTYPE_BYTES`) of the dtype a model is to be loaded in: "float32" for None; a
    torch.dtype or a name not among them is refused, naming it."""
    from ..limits import check_dtype

    if dtype is None:
        return "float32"
    if isinstance(dtype, torch.dtype):
        dtype = str(dtype).removeprefix("torch.")
    return check_dtype(dtype)
