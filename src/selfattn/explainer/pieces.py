"""Tokens a person can read: a tokenizer's pieces grouped into the characters and words they spell.

A byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM2) cuts 一只蓝色怪兽走进森林 into 23 pieces such as
`ä¸Ģ`, `åı`, `ª`: each piece is a run of UTF-8 *bytes*, and a Chinese character (3 bytes) is often spread
over two or three pieces. SentencePiece byte fallback (`<0xE6>`) and WordPiece (`##ster`) split words
likewise. None of those pieces is "unknown": together they spell the text exactly.

The rule used here needs nothing but each piece's character span in the text (a fast tokenizer's
`offset_mapping`, or the spans of our own word tokenizer):

- **piece**: one token as the model sees it, shown as the characters its span covers (without the spaces
  around them; a piece of spaces only as "␣"); a piece that covers part of a character shares that
  character with its neighbours and is marked `(k/n)`;
- **character group**: the smallest runs of consecutive pieces whose spans overlap one another; a
  group spells whole characters (`森` over three pieces is one group);
- **word group**: character groups joined wherever a word of the text (jieba's cut, which keeps
  Latin words whole) overlaps them;
- **special tokens** (`<bos>`, `[CLS]`: an empty span) are groups of their own, shown by name;
- **unknown**: only a piece whose id is the tokenizer's unknown id, shown with the text it replaced.

Attention over groups (`aggregate`): the weight from query group A to key group B is the **mean over
A's query pieces of the sum over B's key pieces** — every row still sums to 1 (or 0 for a row that
sees nothing), and a group of one piece keeps its weights exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .catalogue import both

__all__ = [
    "Group",
    "Pieces",
    "build",
    "from_tokenizer",
    "from_strings",
    "aggregate",
    "names",
    "shown_piece",
    "shown_id",
    "shown_text",
    "shown_char",
    "shown_bytes",
    "shown_completed",
    "partial_tail",
    "tokenizer_kind",
    "AGGREGATION_RULE",
    "UNKNOWN_STRINGS",
]

UNKNOWN_STRINGS = ("<unk>", "[UNK]", "<|unk|>")
"""How an unknown token is written by the tokenizers `from_strings` meets without knowing their unknown id."""

AGGREGATION_RULE = both("model.pieces_rule")


@dataclass(frozen=True)
class Group:
    """Consecutive pieces shown as one unit.

    text     the characters the group spells (a special token's name for a special token)
    start    first character of the group in the text (−1 for a special token)
    end      one past its last character (−1 for a special token)
    members  indices of its pieces, in order
    """

    text: str
    start: int
    end: int
    members: tuple[int, ...]


@dataclass(frozen=True)
class Pieces:
    """One tokenised text, readable at three levels.

    text        the text as given
    ids         token ids, one per piece
    raw         the tokenizer's own strings for the pieces (`Ġand`, `##ster`, `ä¸Ģ`)
    labels      each piece as a person reads it: its characters, `(k/n)` when it is part k of a
                character spread over n pieces, a special token's name, or `<unk>:TEXT`
    spans       (start, end) character span of each piece; (−1, −1) for a special token
    special     each piece is a special token (empty span)
    unknown     each piece is the tokenizer's unknown token
    characters  character groups (see the module docstring)
    words       word groups
    """

    text: str
    ids: tuple[int, ...]
    raw: tuple[str, ...]
    labels: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]
    special: tuple[bool, ...]
    unknown: tuple[bool, ...]
    characters: tuple[Group, ...]
    words: tuple[Group, ...]

    def __len__(self) -> int:
        return len(self.ids)

    def group_of(self, level: str) -> tuple[Group, ...]:
        """The groups of `level`: "pieces" (one group per piece), "characters" or "words"."""
        if level == "characters":
            return self.characters
        if level == "words":
            return self.words
        if level == "pieces":
            return tuple(Group(self.labels[i], *self.spans[i], members=(i,)) for i in range(len(self.ids)))
        raise ValueError(f"level must be 'pieces', 'characters' or 'words', got {level!r}")

    def names(self, level: str = "pieces") -> list[str]:
        """The groups of `level` as a person tells them apart: their text, with "@position" (the position of
        their first piece) wherever the same text occurs twice or more ("金鱼@5"): `names`."""
        groups = self.group_of(level)
        texts = [g.text if level == "pieces" or g.start < 0 else _visible(g.text) for g in groups]
        return names(texts, [g.members[0] for g in groups])

    def as_dict(self) -> dict:
        """JSON-ready: every level, so a view can switch between them (each group with its `name`)."""

        def groups(level):
            gs = self.group_of(level)
            return [
                {"text": g.text, "name": n, "start": g.start, "end": g.end, "pieces": list(g.members)}
                for g, n in zip(gs, self.names(level), strict=True)
            ]

        return {
            "pieces": [
                {
                    "id": i,
                    "raw": r,
                    "label": label,
                    "span": list(span),
                    "special": s,
                    "unknown": u,
                }
                for i, r, label, span, s, u in zip(
                    self.ids, self.raw, self.labels, self.spans, self.special, self.unknown, strict=True
                )
            ],
            "names": self.names(),
            "characters": groups("characters"),
            "words": groups("words"),
            "rule": AGGREGATION_RULE,
        }


def build(
    text: str,
    ids: Sequence[int],
    raw: Sequence[str],
    spans: Sequence[tuple[int, int] | None],
    *,
    unk_id: int | None = None,
    special_ids: frozenset[int] | set[int] = frozenset(),
    words: Sequence[tuple[int, int]] | None = None,
) -> Pieces:
    """Group pieces whose character spans are known.

    text         the text that was tokenised
    ids, raw     the token ids and the tokenizer's strings for them (same length)
    spans        (start, end) in `text` per piece; None, or an empty span, marks a special token
                 (a special id in `special_ids` is special whatever its span, except the unknown id
                 with a span: it replaced real text, which it shows)
    unk_id       the tokenizer's unknown id, if it has one
    words        word spans (start, end) covering the text, e.g. jieba's; None: `word_spans(text)`
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    n = len(ids)
    if len(raw) != n or len(spans) != n:
        raise ValueError(f"ids, raw and spans must have one entry per piece, got {n}, {len(raw)}, {len(spans)}")
    norm: list[tuple[int, int]] = []
    special: list[bool] = []
    for i, (tid, span) in enumerate(zip(ids, spans, strict=True)):
        is_unk = unk_id is not None and tid == unk_id and span is not None and span[0] < span[1]
        if not is_unk and (span is None or span[0] >= span[1] or tid in special_ids):
            norm.append((-1, -1))
            special.append(True)
            continue
        assert span is not None  # is_unk implies a span; otherwise a None span continued above
        s, e = int(span[0]), int(span[1])
        if not 0 <= s < e <= len(text):
            raise ValueError(f"piece {i} has span ({s}, {e}) outside the text of {len(text)} characters")
        norm.append((s, e))
        special.append(False)
    unknown = [unk_id is not None and tid == unk_id for tid in ids]
    characters = _overlap_groups(text, raw, norm, [])
    word_spans_ = list(word_spans(text) if words is None else words)
    word_groups = _overlap_groups(text, raw, norm, word_spans_)
    labels = _labels(text, raw, norm, special, unknown, characters)
    return Pieces(
        text=text,
        ids=tuple(int(i) for i in ids),
        raw=tuple(raw),
        labels=tuple(labels),
        spans=tuple(norm),
        special=tuple(special),
        unknown=tuple(unknown),
        characters=tuple(characters),
        words=tuple(word_groups),
    )


def _overlap_groups(
    text: str, raw: Sequence[str], spans: list[tuple[int, int]], extra: list[tuple[int, int]]
) -> list[Group]:
    """Consecutive pieces joined while their spans (widened by any `extra` span they touch) overlap."""
    groups: list[Group] = []
    members: list[int] = []
    lo = hi = -1

    def close():
        if members:
            groups.append(Group(text[lo:hi], lo, hi, tuple(members)))

    for i, (s, e) in enumerate(spans):
        if s < 0:  # a special token stands alone
            close()
            members, lo, hi = [], -1, -1
            groups.append(Group(raw[i], -1, -1, (i,)))
            continue
        for ws, we in extra:  # widen the piece to every word it touches
            if ws < e and s < we:
                s, e = min(s, ws), max(e, we)
        if members and s < hi:
            members.append(i)
            lo, hi = min(lo, s), max(hi, e)
            continue
        close()
        members, lo, hi = [i], s, e
    close()
    return groups


def _labels(text, raw, spans, special, unknown, characters: list[Group]) -> list[str]:
    """What each piece is shown as (see `Pieces.labels`)."""
    labels = [""] * len(spans)
    for g in characters:
        n = len(g.members)
        for k, i in enumerate(g.members, start=1):
            if special[i]:
                labels[i] = raw[i]
            elif unknown[i]:
                labels[i] = f"<unk>:{shown_text(text[spans[i][0] : spans[i][1]])}"
            elif n > 1 and _shares_character(spans, g.members):
                labels[i] = f"{_visible(g.text)}({k}/{n})"
            else:
                labels[i] = _visible(text[spans[i][0] : spans[i][1]])
    return labels


SPACE_MARK = "␣"

INVISIBLE = {"\n": "↵", "\t": "⇥"}
"""How a newline and a tab read in a shown token; a space at either end reads as "␣" (one between visible
characters stays a space); any other character a person cannot see (another space such as U+00A0 or U+3000,
a format character such as the joiner U+200D, a control) reads as ⟨U+XXXX⟩, and a byte that is not a whole
character as ⟨E8⟩ (`shown_bytes`): the one notation of every view (`shown_text`)."""


def shown_char(ch: str) -> str:
    """One character as every view writes it: itself when a person can see it (or a plain space), else its
    mark (`INVISIBLE`, ⟨U+XXXX⟩)."""
    if ch in INVISIBLE:
        return INVISIBLE[ch]
    return ch if ch == " " or (ch.isprintable() and not ch.isspace()) else f"⟨U+{ord(ch):04X}⟩"


def shown_text(text: str) -> str:
    """`text` with every character a person cannot see written as its mark (`shown_char`), and the spaces at
    either end as "␣": " a" + U+00A0 + "b" + tab -> "␣a⟨U+00A0⟩b⇥". The one function the terminal, the JSON, the page
    and the notebook show tokens through."""
    inner = text.strip(" ")
    if not inner:
        return SPACE_MARK * len(text)
    lead = len(text) - len(text.lstrip(" "))
    trail = len(text) - len(text.rstrip(" "))
    return SPACE_MARK * lead + "".join(map(shown_char, inner)) + SPACE_MARK * trail


def shown_bytes(data: bytes) -> str:
    """Bytes that are not a whole character, as every view writes them: "⟨E6 A3⟩"."""
    return "⟨" + " ".join(f"{b:02X}" for b in data) + "⟩"


def _visible(text: str) -> str:
    """A label as it reads among others: without the ASCII spaces around it (a byte-level piece " Mary" is
    "Mary"); a piece of spaces only as "␣" per space; every other invisible character as its mark
    (`shown_text`: a tab "⇥", a no-break space "⟨U+00A0⟩")."""
    inner = text.strip(" ")
    return shown_text(inner or text)


def _shares_character(spans, members: tuple[int, ...]) -> bool:
    """The pieces of a character group cover overlapping spans (one character over several pieces)."""
    return any(spans[a][1] > spans[b][0] for a, b in zip(members, members[1:], strict=False))


def word_spans(text: str) -> list[tuple[int, int]]:
    """jieba's cut of `text` as (start, end) spans (it keeps Latin words and numbers whole; `jieba_words.spans`)."""
    from ..jieba_words import spans

    return spans(text)


def from_tokenizer(tokenizer, text: str, *, add_special_tokens: bool = True) -> Pieces:
    """Tokenise `text` with a transformers fast tokenizer (which gives each piece's character span)
    and group the pieces. A tokenizer that gives no spans is refused by name."""
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(
            f"{type(tokenizer).__name__} gives no character offsets (not a fast tokenizer), so its pieces "
            f"cannot be grouped into characters"
        )
    enc = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
    ids = list(enc["input_ids"])
    raw = tokenizer.convert_ids_to_tokens(ids)
    special_ids = frozenset(getattr(tokenizer, "all_special_ids", ()) or ())
    return build(
        text,
        ids,
        raw,
        [tuple(o) for o in enc["offset_mapping"]],
        unk_id=getattr(tokenizer, "unk_token_id", None),
        special_ids=special_ids,
    )


def from_strings(
    text: str,
    tokens: Sequence[str],
    ids: Sequence[int],
    *,
    special_ids: frozenset[int] | set[int] = frozenset(),
    unk_id: int | None = None,
) -> Pieces:
    """Pieces of a tokenizer that gives token strings but no offsets (our word tokenizer: jieba words, their
    characters, `<unk>`): each token's span is found by reading the text from left to right.

    A token that occurs at the reading point or after it takes that span; the unknown token (`unk_id`, or
    without one a token spelled as in UNKNOWN_STRINGS) takes the next character it replaced; a special id,
    or a token not in the text (`<bos>`), is a special token."""
    if len(tokens) != len(ids):
        raise ValueError(f"{len(tokens)} token strings for {len(ids)} ids")
    if unk_id is None:
        unk_id = next((int(i) for t, i in zip(tokens, ids, strict=True) if t in UNKNOWN_STRINGS), None)
    cursor = 0
    spans: list[tuple[int, int] | None] = []
    for token, tid in zip(tokens, ids, strict=True):
        span = None
        if unk_id is not None and tid == unk_id:
            while cursor < len(text) and text[cursor].isspace():
                cursor += 1
            span = (cursor, cursor + 1) if cursor < len(text) else None
        elif tid not in special_ids and token:
            at = text.find(token, cursor)
            span = None if at < 0 else (at, at + len(token))
        if span is not None:
            cursor = span[1]
        spans.append(span)
    return build(text, ids, list(tokens), spans, unk_id=unk_id, special_ids=frozenset(special_ids))


def names(texts: Sequence[str], positions: Sequence[int] | None = None) -> list[str]:
    """Each text, with "@position" added wherever the same text occurs more than once, so that every view
    tells repeated tokens apart: ["在", "金鱼", "金鱼"] -> ["在", "金鱼@1", "金鱼@2"]. `positions`: the
    position to name per text (default its index; a group's is its first piece)."""
    positions = list(range(len(texts))) if positions is None else list(positions)
    seen: dict[str, int] = {}
    for t in texts:
        seen[t] = seen.get(t, 0) + 1
    return [f"{t}@{p}" if seen[t] > 1 else t for t, p in zip(texts, positions, strict=True)]


def _byte_table() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the printable character standing for each of the 256 bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + extra)] = b
            extra += 1
    return table


BYTE_TABLE = _byte_table()


def piece_bytes(raw: str) -> bytes | None:
    """The bytes a piece stands for: a byte-fallback piece `<0xE6>`, or a byte-level piece (`æĿ`); None for
    a piece of neither kind."""
    if len(raw) == 6 and raw.startswith("<0x") and raw.endswith(">"):
        try:
            return bytes([int(raw[3:5], 16)])
        except ValueError:
            return None
    if raw and all(ch in BYTE_TABLE for ch in raw):
        return bytes(BYTE_TABLE[ch] for ch in raw)
    return None


def shown_piece(text: str, raw: str | None = None) -> str:
    """One piece (a predicted token) as a person reads it: spaces as "␣" (" Mary" -> "␣Mary"), a piece that
    holds only part of a character (its decoded text has U+FFFD) as its bytes, "⟨E6 A3⟩", and every character
    a person cannot see written out (a no-break space, a top prediction of SmolLM2's first layers, as
    ⟨U+00A0⟩, a newline as ↵): a blank cell says nothing. The notation is `shown_text`'s."""
    if "\ufffd" in text and raw is not None and "\ufffd" not in raw:
        data = piece_bytes(raw)
        if data is not None:
            return shown_bytes(data)
    return shown_text(text)


UTF8_LENGTH = ((0xC2, 0xDF, 2), (0xE0, 0xEF, 3), (0xF0, 0xF4, 4))
"""The first bytes of a UTF-8 character (lowest, highest) and the character's length in bytes."""


def shown_id(i: int, shown: str) -> str:
    """`shown` (a piece as `shown_piece` reads it), or where it is empty — a token that decodes to no text, such as
    an id past the tokenizer's vocabulary that a model with random weights predicts — its id, "⟨#151000⟩": a blank
    cell says nothing."""
    return shown if shown else f"⟨#{int(i)}⟩"


def partial_tail(data: bytes) -> tuple[bytes, bytes, int] | None:
    """A piece's bytes that end on the first byte(s) of a character: (the whole characters before, the
    character's bytes held here, its length), e.g. b" \xe9" -> (b" ", b"\xe9", 3); None when `data` ends on
    a whole character, or holds a byte that begins no character (it continues one of the text before)."""
    for back in range(1, min(4, len(data)) + 1):
        lead = data[-back]
        if lead & 0xC0 == 0x80:  # a continuation byte: the lead is further back
            continue
        n = next((n for lo, hi, n in UTF8_LENGTH if lo <= lead <= hi), None)
        if n is None or back >= n:
            return None
        try:
            data[:-back].decode("utf-8")
        except UnicodeDecodeError:
            return None
        return data[:-back], data[-back:], n
    return None


def shown_completed(before: bytes, part: bytes, char: str, n: int) -> str:
    """A predicted piece that begins a character, shown with the character it begins: b"\xe9" completed as 都
    -> "都 (1/3: ⟨E9⟩)" (it holds 1 of the character's 3 bytes, written out)."""
    return f"{shown_text(before.decode('utf-8'))}{char} ({len(part)}/{n}: {shown_bytes(part)})"


def tokenizer_kind(tokenizer) -> str:
    """What kind of tokenizer a transformers fast tokenizer is, as a key of `views.texts` ("tokenizer.…"):
    byte_bpe (GPT-2, Llama 3, Qwen, SmolLM2), byte_fallback (SentencePiece BPE: Llama 2, Mistral),
    wordpiece (BERT), unigram (T5, ALBERT), bpe, wordlevel; read from its backend's model and pre-tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    model = getattr(backend, "model", None)
    name = type(model).__name__
    if name == "BPE":
        assert backend is not None  # a None backend gives a None model, named "NoneType"
        if "ByteLevel" in repr(backend.pre_tokenizer) or "ByteLevel" in repr(backend.decoder):
            return "tokenizer.byte_bpe"
        return "tokenizer.byte_fallback" if getattr(model, "byte_fallback", False) else "tokenizer.bpe"
    return {"WordPiece": "tokenizer.wordpiece", "Unigram": "tokenizer.unigram", "WordLevel": "tokenizer.wordlevel"}.get(
        name, "tokenizer.other"
    )


def aggregate(weights, groups: Sequence[Group], key_groups: Sequence[Group] | None = None):
    """Attention between groups of pieces: (…, Lq, Lk) → (…, Gq, Gk).

    weights     (…, Lq, Lk) NumPy array or torch tensor of piece weights (rows sum to 1 or 0)
    groups      the query groups; key_groups the key groups (default: the same)
    The weight from query group A to key group B = mean over A's pieces of the sum over B's pieces.
    """
    key_groups = groups if key_groups is None else key_groups
    Lq, Lk = weights.shape[-2], weights.shape[-1]
    q_assign = _assignment(groups, Lq, mean=True)  # (Gq, Lq): 1/|A| for each piece of A
    k_assign = _assignment(key_groups, Lk, mean=False)  # (Gk, Lk): 1 for each piece of B
    if isinstance(weights, np.ndarray):
        return q_assign.astype(weights.dtype) @ weights @ k_assign.T.astype(weights.dtype)
    import torch

    qa = torch.from_numpy(q_assign).to(weights.dtype).to(weights.device)
    ka = torch.from_numpy(k_assign).to(weights.dtype).to(weights.device)
    return qa @ weights @ ka.T


def _assignment(groups: Sequence[Group], n: int, *, mean: bool) -> np.ndarray:
    seen = sorted(i for g in groups for i in g.members)
    if seen != list(range(n)):
        raise ValueError(f"the groups must cover pieces 0…{n - 1} once each, they cover {len(seen)} pieces")
    a = np.zeros((len(groups), n), dtype=np.float64)
    for row, g in enumerate(groups):
        a[row, list(g.members)] = 1.0 / len(g.members) if mean else 1.0
    return a
