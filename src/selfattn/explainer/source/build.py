"""An explainer's parts from transformers: a folder, a GGUF file, or a model already loaded.

    model, tokenizer, card = load(source, config)     the fields of a `session.Explainer`
    model, tokenizer, card = wrap(model, tokenizer, name=…)   the same for a model loaded by the caller
    TransformersTokenizer(tokenizer, model, decoder)  a transformers tokenizer as a `tokenizing.Tokenizer`
    confirm(model, segment, name)            the dry run: every attention layer calls selfattn

Which class builds the model is read from the config (`sources.architecture`: AutoModelForCausalLM for a
decoder with a language-model head, AutoModel for an encoder), never from a list of model types. Whether
the explainer can read it is decided by trying: the dry run runs the model once on a short text inside
`selfattn.intercept` and counts the `selfattn.attention` calls; a model whose layers do not all call it
(its attention bypasses transformers' attention interface: GPT-Neo, DeBERTa, BLOOM …) or whose attention
passes something selfattn cannot honour is refused, naming why.

A GGUF file is read by transformers' GGUF reader (the `gguf` package): its metadata first (the config,
bounded before any tensor, `sources.gguf_config`), then its tensors, dequantized with transformers' progress
bar ("Converting and de-quantizing GGUF tensors…"); its tokenizer comes from the same file. What was
dequantized is kept in the cache folder (`gguf_cache`), so the next load of the same file in the same dtype
reads safetensors instead.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch

from ...functional import intercept
from .. import pieces as P
from ..card import Card
from ..views import texts
from . import resolve as sources

__all__ = ["load", "wrap", "confirm", "DRY_RUN_TEXT", "TransformersTokenizer"]

DRY_RUN_TEXT = "When Mary and John went to the store"
"""The text of the dry run: a few tokens in every vocabulary (byte pieces at worst)."""
COMPLETION_STEPS = 3
"""At most this many forward steps complete a predicted piece that begins a character (UTF-8: 4 bytes at most)."""
DEFAULT_CONTEXT = 4096
"""Context assumed for a config that states none (a few encoders): the text limit still applies."""
UNKNOWN_HINT = texts.both("model.unknown_hint")
PASSED = "loaded"
"""The kind of `stamps.Entries` that says which files, loaded in which dtype by which code, passed the weights' scan
(`sources.check_loaded`: no NaN or infinity) and the dry run (`confirm`): a later load of the same files skips both
(0.56 s of the 0.5B configuration's load), as nothing of them can differ."""


def load(source: sources.Source, config: dict, dtype: torch.dtype = torch.float32) -> tuple:
    """The Explainer fields (model, tokenizer, card) of a transformers folder or GGUF file whose config
    (`sources.folder_kind`) was checked: the tokenizer, the model built by the class the config names, loaded
    in `dtype` with the "selfattn" attention implementation, its weights checked, and the dry run passed. A GGUF
    file's weights come from the cache (`gguf_cache`) when it holds them for this file and dtype, and are stored
    there when they were dequantized."""
    try:
        import transformers
    except ImportError:
        raise ValueError(f"{source.folder} is a transformers model; explaining it needs `transformers`") from None
    from ... import hf
    from . import gguf_cache

    hf.register()
    kind, why = sources.architecture(config)
    from .stamps import Entries, folder_files, stamp

    # the files as they are before they are read: a GGUF file (also when its weights come from the cache), else the
    # folder's files
    read_from = [source.folder / source.gguf] if source.gguf else folder_files(source.folder)
    files = stamp(read_from)
    cached = gguf_cache.find(source.folder / source.gguf, dtype) if source.gguf else None
    folder = cached or source.folder
    gguf: dict[str, Any] = {"gguf_file": source.gguf} if source.gguf and cached is None else {}
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True, **gguf)
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"{source.folder}: no usable tokenizer files ({str(e)[:300]})") from None
    auto = transformers.AutoModelForCausalLM if kind == "decoder" else transformers.AutoModel
    # the config already read (and bounded): a GGUF file's metadata is not parsed once more for it
    known = transformers.AutoConfig.for_model(
        config["model_type"], **{k: v for k, v in config.items() if k != "model_type"}
    )
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # its load report (with terminal colours) would precede ours,
    try:  # which names what is missing or misshapen (`sources.check_loaded`) and refuses the folder
        model, info = auto.from_pretrained(  # type: ignore[misc]  # output_loading_info=True: (model, info)
            str(folder),
            config=known,
            attn_implementation=hf.NAME,
            local_files_only=True,
            dtype=dtype,
            output_loading_info=True,
            ignore_mismatched_sizes=True,  # a wrong shape is reported in `info`, and refused by name below
            **(gguf or {"use_safetensors": True}),
        )
    except KeyError as e:  # a model that picks its attention class from its own table (GPT-Neo) has no "selfattn"
        raise ValueError(
            f"{source.name}: model_type {config['model_type']!r} is not supported: its attention bypasses "
            f"transformers' attention interface (it cannot be built with attn_implementation='selfattn': "
            f"KeyError {e})"
        ) from None
    finally:
        transformers.logging.set_verbosity(verbosity)
    if files is not None and stamp(read_from) != files:  # written under the load: these weights have no name
        files = None
    passed = Entries(PASSED)
    named = {"files": files, "class": f"{auto.__name__} → {type(model).__name__}", "dtype": str(dtype)}
    checked = files is not None and passed.read(named, lambda value: value is True) is True
    sources.check_loaded(source.folder / (source.gguf or ""), model, info, scan=not checked)
    if source.gguf and cached is None:
        gguf_cache.store(source.folder / source.gguf, dtype, model, tokenizer, config)
    how = {
        "format": "gguf" if source.gguf else "safetensors",
        "file": source.gguf,
        "class": named["class"],
        "why": why,
    }
    parts = _parts(
        model.eval(), tokenizer, name=source.name, config=config, kind=kind, how=how, stamp=files, dry_run=not checked
    )
    if files is not None and not checked:  # every check passed on these files: the next load of them skips both
        passed.write(named, True)
    return parts


def wrap(model: torch.nn.Module, tokenizer, *, name: str | None = None) -> tuple:
    """The Explainer fields (model, tokenizer, card) of a transformers model the caller loaded with
    attn_implementation="selfattn" (after `selfattn.hf.register()`), and its fast tokenizer; the dry run is run
    the same way."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "to_dict"):
        raise TypeError(f"model must be a transformers PreTrainedModel, got {type(model).__name__}")
    if getattr(config, "_attn_implementation", None) != "selfattn":
        raise ValueError(
            f"{type(model).__name__} runs attn_implementation={config._attn_implementation!r}; load it with "
            "attn_implementation='selfattn' (after selfattn.hf.register()) so the explainer sees its attention"
        )
    head = any(type(model).__name__.endswith(h) for h in sources.DECODER_HEADS)
    how = {"format": "in memory", "file": None, "class": type(model).__name__, "why": "given by the caller"}
    return _parts(
        model.eval(),
        tokenizer,
        name=name or _name_of(model, tokenizer),
        config=config.to_dict(),
        kind="decoder" if head else "encoder",
        how=how,
    )


def _name_of(model, tokenizer) -> str:
    """A loaded model's name: where it was loaded from (`name_or_path`, the model's or else its tokenizer's),
    else its class with "in memory" (a model built from a config)."""
    for obj in (model, getattr(model, "config", None), tokenizer):
        where = getattr(obj, "name_or_path", None) or getattr(obj, "_name_or_path", None)
        if isinstance(where, str) and where:
            return where
    return f"{type(model).__name__} (in memory)"


class TransformersTokenizer:
    """A transformers tokenizer read as a `tokenizing.Tokenizer`; `complete` runs `model` (a decoder's) greedily."""

    def __init__(self, tokenizer, model: torch.nn.Module, decoder: bool):
        self.tokenizer, self.model, self.decoder = tokenizer, model, decoder
        self.special = frozenset(getattr(tokenizer, "all_special_ids", ()) or ())
        self.unk = getattr(tokenizer, "unk_token_id", None)
        self.kind = P.tokenizer_kind(tokenizer)

    def segment(self, text: str):
        tokenizer = self.tokenizer
        if getattr(tokenizer, "is_fast", False):
            p = P.from_tokenizer(tokenizer, text)
        else:  # no offsets: the pieces' spans are found by reading their decoded strings in the text
            ids = tokenizer(text, add_special_tokens=True)["input_ids"]
            p = P.from_strings(
                text, [tokenizer.decode([i]) for i in ids], ids, special_ids=self.special, unk_id=self.unk
            )
        L = len(p.ids)
        extra = {"use_cache": False} if self.decoder else {"attention_mask": torch.ones(1, L, dtype=torch.long)}
        return list(p.labels), torch.tensor(p.ids), extra, p

    def decode(self, i: int) -> str:
        return self.tokenizer.decode([i])

    def shown(self, i: int) -> str:
        return P.shown_id(i, P.shown_piece(self.decode(i), self.tokenizer.convert_ids_to_tokens(i)))

    def _piece(self, i: int) -> bytes:
        """The bytes piece `i` adds: its byte-level or byte-fallback bytes, else its decoded text's."""
        raw = self.tokenizer.convert_ids_to_tokens(i)  # None for an id past the tokenizer's vocabulary
        data = None if raw is None else P.piece_bytes(raw)
        return self.decode(i).encode("utf-8") if data is None else data

    def complete(self, context: list[int], ids: list[int]) -> list[str | None]:
        """Each predicted piece of `ids` after `context` shown with the character it begins
        (`pieces.shown_completed`), completed by greedy decoding from one KV cache of the context (the model's
        most likely next piece, at most COMPLETION_STEPS times, as transformers' generate(do_sample=False));
        None where a piece ends on a whole character, the greedy continuation does not complete it (the views
        then show its bytes) or the model is an encoder."""
        tails = [P.partial_tail(self._piece(i)) if "\ufffd" in self.decode(i) else None for i in ids]
        if not self.decoder or all(t is None for t in tails):
            return [None] * len(ids)
        model = self.model
        # transformers ≥ 5.2x names the KV cache `cache` (argument and output), before `past_key_values`
        kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        with torch.no_grad():
            past = model(torch.tensor([context]), use_cache=True)[kw]
        out: list[str | None] = []
        for i, tail in zip(ids, tails, strict=True):
            if tail is None:
                out.append(None)
                continue
            before, part, n = tail
            got, cache, step = part, copy.deepcopy(past), i
            for _ in range(COMPLETION_STEPS):
                if len(got) >= n:
                    break
                with torch.no_grad():
                    o = model(torch.tensor([[step]]), use_cache=True, **{kw: cache})
                cache, step = o[kw], int(o.logits[0, -1].argmax())
                got += self._piece(step)
            try:
                out.append(P.shown_completed(before, part, got[:n].decode("utf-8"), n))
            except UnicodeDecodeError:  # the greedy continuation is no continuation of this character
                out.append(None)
        return out


def _parts(
    model, tokenizer, *, name: str, config: dict, kind: str, how: dict, stamp: str | None = None, dry_run: bool = True
) -> tuple:
    """(model, tokenizer, card): what an Explainer holds for a transformers model and its tokenizer (the dry
    run passed, unless `dry_run` is False: these files passed it before, `load`); stamp: the files it was read from
    (`Card.stamp`)."""
    reader = TransformersTokenizer(tokenizer, model, kind == "decoder")
    if dry_run:
        confirm(model, reader.segment, name)
    text_config = config.get("text_config")
    text = text_config if isinstance(text_config, dict) else config
    max_len = int(text.get("max_position_embeddings") or text.get("n_positions") or 0) or DEFAULT_CONTEXT
    arch = (config.get("architectures") or [type(model).__name__])[0]
    card = Card(
        name=name,
        max_len=max_len,
        architecture=texts.text("model.transformers", "en", arch=arch),
        architecture_zh=texts.text("model.transformers", "zh", arch=arch),
        positions=sources.position_scheme(text, model),
        kind=kind,
        unknown_hint=UNKNOWN_HINT,
        loaded=how,
        stamp=stamp,
    )
    return model, reader, card


def confirm(model: torch.nn.Module, segment, name: str) -> None:
    """The dry run: `model` on DRY_RUN_TEXT inside `selfattn.intercept`, counting the attention calls.
    Refused (ValueError, naming the model type and why) unless every layer of the config called
    `selfattn.attention`, and a model whose attention is causal has a language-model head."""
    config: Any = model.config  # a transformers config (torch's Module.__getattr__ types it a Tensor)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers = getattr(text, "num_hidden_layers", None)
    who = f"{name}: model_type {getattr(config, 'model_type', '?')!r} ({type(model).__name__}) is not supported"
    tokens, ids, extra, _ = segment(DRY_RUN_TEXT)
    calls: list[bool] = []

    def count(request, compute):
        calls.append(bool(request.causal))
        return compute(request)

    try:
        with torch.no_grad(), intercept(count):
            out = model(ids[None], **extra)
    except ValueError as e:  # selfattn.hf refuses what it cannot honour (attention sinks, a position bias, …)
        raise ValueError(f"{who}: {e}") from None
    if not calls or (isinstance(layers, int) and len(calls) != layers):
        seen = f"{len(calls)} of its {layers} layers" if isinstance(layers, int) else f"{len(calls)} layers"
        raise ValueError(
            f"{who}: its attention bypasses transformers' attention interface (a dry run saw {seen} call "
            "selfattn.attention), so the explainer cannot see it"
        )
    if any(calls) and not isinstance(getattr(out, "logits", None), torch.Tensor):
        raise ValueError(
            f"{who}: its attention is causal but it has no language-model head (no logits to predict from); "
            "give the folder of its …ForCausalLM"
        )
