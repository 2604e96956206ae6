"""An `Explainer`: a model, its tokenizer and its name, ready to explain a text.

    ex = Explainer.load()                       # the bundled default model (never touches the network)
    ex = Explainer.load("runs/my-model")        # a checkpoint written by `selfattn train`
    ex = Explainer.load("path/to/qwen")         # a transformers folder (config.json + safetensors + tokenizer)
    ex = Explainer.load("Qwen/Qwen2.5-0.5B")    # a hub id: downloaded once, or from the local cache offline
    doc = ex.explain("一只蓝色怪兽走进森林")        # the export dict of `selfattn.explain.export`

The CLI, the HTML report and the web app all go through `explain`, so they show one set of numbers.
Thread-safe: interventions travel in a context (`selfattn.intercept`), never as attributes set on
the model, so one Explainer may serve several requests at once.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import checks
from . import sources
from .capture.cache import TraceCache
from .capture.interventions import Intervention
from .capture.trace import ModelTrace, capture
from .views import experiment, export, heads, relations, summary

__all__ = ["Explainer", "DEFAULT_TEXT", "MAX_CHARS", "vocabulary", "unknown_report"]

DEFAULT_TEXT = "一只蓝色怪兽走进森林"
MAX_CHARS = 4000
"""Longest text accepted (characters), whatever the model's context."""
SUGGESTED_MODEL = "Qwen/Qwen2.5-0.5B"
"""A real model to suggest for free text (Chinese and English)."""
UNKNOWN_STRINGS = ("<unk>", "[UNK]", "<|unk|>", "\ufffd")
BYTE_PIECE = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")
"""A byte-fallback piece (SentencePiece/Llama): the tokenizer did not know the character."""
OURS = ("selfattn DecoderLM", "positions.learned")
"""Our models' architecture, and their positional scheme as its key in `views.texts`."""


@dataclass
class Explainer:
    """model: a DecoderLM / encoder built from selfattn modules, or a transformers model whose
    attention implementation is "selfattn".
    tokenize(text) -> (token strings, ids (L,), extra model kwargs); decode(id) -> str.
    is_unknown(token string, id) -> bool marks what the tokenizer could not represent;
    unknown_hint says what the model knows and what to use for free text."""

    model: torch.nn.Module
    name: str
    tokenize: Callable[[str], tuple[list[str], torch.Tensor, dict]]
    decode: Callable[[int], str]
    max_len: int
    architecture: str = OURS[0]
    positions: str = OURS[1]
    is_unknown: Callable[[str, int], bool] | None = None
    unknown_hint: dict[str, str] = field(default_factory=lambda: {"en": "", "zh": ""})

    @classmethod
    def load(cls, path: str | Path | None = None) -> Explainer:
        """The default model (path None), a checkpoint folder written by `selfattn train`, a transformers
        folder of one of `sources.TRANSFORMERS_TYPES`, or a hub id (see `sources.resolve`)."""
        from ..model import checkpoint

        if path is None:
            model, tokenizer = checkpoint.load_default()[:2]
            return cls._from_checkpoint(model, tokenizer, name="selfattn default model", bundled=True)
        folder = sources.resolve(path)
        kind, config = sources.folder_kind(folder)
        if kind == "selfattn":
            return cls._from_checkpoint(*checkpoint.load_checkpoint(folder)[:2], name=folder.name)
        return cls._from_transformers(
            folder, kind, config, name=str(path) if sources.is_hub_id(str(path)) else folder.name
        )

    @classmethod
    def _from_checkpoint(cls, model, tokenizer, *, name: str, bundled: bool = False) -> Explainer:
        def tokenize(text: str):
            ids = tokenizer.encode(text, bos=True)
            return [tokenizer.tokens[i] for i in ids], torch.tensor(ids), {}

        who = {"en": name if bundled else "this checkpoint", "zh": name if bundled else "这个模型"}
        words = len(tokenizer.tokens)
        hint = {
            "en": f"{who['en']} knows only the {words} tokens of its corpus (list them: selfattn vocab); for free "
            f"text use a real model, e.g. --model {SUGGESTED_MODEL}",
            "zh": f"{who['zh']} 只认识语料里的 {words} 个 token（用 selfattn vocab 列出）；任意文本请用真实模型，"
            f"例如 --model {SUGGESTED_MODEL}",
        }
        return cls(
            model=model.eval(),
            name=name,
            tokenize=tokenize,
            decode=lambda i: tokenizer.tokens[i],
            max_len=model.max_len,
            is_unknown=lambda tok, i: i == tokenizer.unk_id,
            unknown_hint=hint,
        )

    @classmethod
    def _from_transformers(cls, folder: Path, kind: str, config: dict, *, name: str) -> Explainer:
        import transformers

        from .. import hf

        hf.register()
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except (OSError, ValueError) as e:
            raise ValueError(f"{folder}: no usable tokenizer files ({e})") from None
        auto = transformers.AutoModelForCausalLM if kind in sources.DECODER_TYPES else transformers.AutoModel
        model, info = auto.from_pretrained(
            str(folder),
            attn_implementation=hf.NAME,
            local_files_only=True,
            use_safetensors=True,
            dtype=torch.float32,
            output_loading_info=True,
            ignore_mismatched_sizes=True,  # a wrong shape is reported in `info`, and refused by name below
        )
        sources.check_loaded(folder, model, info)
        model = model.eval()
        decoder = kind in sources.DECODER_TYPES
        unk = tokenizer.unk_token_id

        def tokenize(text: str):
            ids = tokenizer(text, add_special_tokens=True)["input_ids"]
            tokens = [tokenizer.decode([i]) for i in ids]
            extra = {"use_cache": False} if decoder else {"attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
            return tokens, torch.tensor(ids), extra

        def is_unknown(token: str, i: int) -> bool:
            piece = tokenizer.convert_ids_to_tokens(i)
            return i == unk or (isinstance(piece, str) and bool(BYTE_PIECE.match(piece))) or _unknown_string(token)

        max_len = int(config.get("max_position_embeddings") or config.get("n_positions") or 0)
        arch = (config.get("architectures") or [type(model).__name__])[0]
        return cls(
            model=model,
            name=name,
            tokenize=tokenize,
            decode=lambda i: tokenizer.decode([i]),
            max_len=max_len,
            architecture=f"{arch} (transformers, attention by selfattn)",
            positions=sources.POSITIONS[kind],
            is_unknown=is_unknown,
            unknown_hint={"en": "the tokenizer has no piece for these characters", "zh": "分词器没有这些字符的片段"},
        )

    def trace(self, text: str, intervention: Intervention | None = None, *, cache: TraceCache | None = None):
        """The ModelTrace of `text` with `intervention` (default none): one forward pass, or none when `cache`
        (the server's `TraceCache`) holds it already."""
        intervention = Intervention() if intervention is None else intervention
        if not isinstance(intervention, Intervention):
            raise TypeError(f"intervention must be an Intervention, got {type(intervention).__name__}")

        def run() -> ModelTrace:
            tokens, ids, kwargs = self.tokenize(check_text(text))
            if len(ids) > self.max_len:
                raise ValueError(f"the text has {len(ids)} tokens; {self.name} reads at most {self.max_len}")
            return capture(self.model, ids, tokens, intervention, **kwargs)

        return run() if cache is None else cache.get((check_text(text), intervention), run)

    def explain(
        self,
        text: str = DEFAULT_TEXT,
        *,
        layer: int | None = None,
        head: int | None = None,
        intervention: Intervention | None = None,
        stages: bool | None = None,
        find=None,
        layers=None,
        compare: bool = True,
        cache: TraceCache | None = None,
    ) -> dict:
        """The whole export dict for `text`; the shown head is (layer, head), or picked by `heads.pick`.

        find     (query, key) token strings or positions: every head ranked by that weight (`heads.search`)
        layers   the layers whose arrays the dict carries (default all; "selected": the shown one; `export.to_dict`)
        compare  with an intervention that `needs_baseline`, also trace the text without it and compare the two
                 on the shown head (doc["experiment"] gains `experiment.compare`'s numbers); False skips it
        cache    a `TraceCache` (the server's): traces it holds are read back instead of computed, so the
                 baseline of an experiment costs no pass when the text was shown before"""
        intervention = Intervention() if intervention is None else intervention
        trace = self.trace(text, intervention, cache=cache)
        table = summary.summaries(trace)
        described = heads.describe(trace, table)
        selected = self.select(trace, table, described, layer, head)
        card = export.model_info(self.name, trace, architecture=self.architecture, positions=self.positions)
        prediction = export.predictions(trace, self.decode)
        extra = {
            "descriptions": described,
            "roles": relations.roles(trace.tokens),
            "first_token": heads.first_token_note(trace, table, (selected["layer"], selected["head"])),
        }
        if find is not None:
            if not isinstance(find, (tuple, list)) or len(find) != 2:
                raise ValueError(f"find must be (query, key), got {find!r}")
            extra["search"] = heads.search(trace, *find)
        if isinstance(layers, str) and layers == "selected":
            layers = [selected["layer"]]
        doc = export.to_dict(
            trace,
            model=card,
            text=text,
            selected=selected,
            summaries=table,
            prediction=prediction,
            stages=stages,
            layers=layers,
            unknown=unknown_report(trace.tokens, trace.token_ids.tolist(), self.is_unknown, self.unknown_hint),
        )
        if checks.boolean("compare", compare) and intervention.needs_baseline():
            base = self.trace(text, cache=cache)
            doc["experiment"] |= experiment.compare(
                base, trace, selected["layer"], selected["head"], export.predictions(base, self.decode), prediction
            )
        return doc | extra

    @staticmethod
    def select(trace: ModelTrace, table, described, layer, head) -> dict:
        for name, value, n in (("layer", layer, trace.n_layers), ("head", head, trace.n_heads)):
            if value is not None and not 0 <= checks.integer(name, value) < n:
                raise ValueError(f"{name} must be in [0, {n - 1}], got {value!r}")
        if layer is not None and head is not None:
            return {"layer": layer, "head": head, "rule": None}
        if layer is not None:  # best head of that layer
            best = heads.pick([table[layer]], [described[layer]])
            return {"layer": layer, "head": best[1], "rule": "within layer"}
        if head is not None:
            best_layer = heads.pick([[row[head]] for row in table], [[row[head]] for row in described])[0]
            return {"layer": best_layer, "head": head, "rule": "within head"}
        picked_layer, picked_head = heads.pick(table, described)
        return {"layer": picked_layer, "head": picked_head, "rule": "auto"}


def unknown_report(tokens: list[str], ids: list[int], is_unknown=None, hint: dict[str, str] | None = None) -> dict:
    """{count, positions, message, hint}: the tokens the tokenizer could not represent (<unk>, byte pieces).
    `message` is the English sentence (for JSON readers); each view says the count in its own language
    and adds `hint[lang]`: what the model knows and what to use instead."""
    hint = hint or {"en": "", "zh": ""}
    test = is_unknown or (lambda tok, i: _unknown_string(tok))
    positions = [p for p, (tok, i) in enumerate(zip(tokens, ids, strict=False)) if test(tok, int(i))]
    message = ""
    if positions:
        message = f"{len(positions)} of {len(tokens)} tokens are unknown to the tokenizer"
        message += f": {hint['en']}" if hint["en"] else ""
    return {"count": len(positions), "positions": positions, "message": message, "hint": hint}


def _unknown_string(token: str) -> bool:
    return token in UNKNOWN_STRINGS or bool(BYTE_PIECE.match(token))


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
