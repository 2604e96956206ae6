"""An `Explainer`: a model, its tokenizer and its name, ready to explain a text.

    ex = Explainer.load()                 # the bundled default model
    ex = Explainer.load("runs/my-model")  # a checkpoint written by `selfattn train`
    doc = ex.explain("一只蓝色怪兽走进森林")  # the export dict of `selfattn.explain.export`

The CLI, the HTML report and the web app all go through `explain`, so they show one set of numbers.

Not thread-safe: an `Intervention` is applied by setting the model's attention modules for the
duration of one forward pass, so concurrent calls on one Explainer must be serialised (the web
app holds a lock around each request).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from . import export, summary
from .trace import Intervention, ModelTrace, capture

DEFAULT_TEXT = "一只蓝色怪兽走进森林"
MAX_CHARS = 4000
"""Longest text accepted (characters), whatever the model's context."""


@dataclass
class Explainer:
    """model: a DecoderLM (or encoder) built from selfattn modules.
    tokenize(text) -> (token strings, ids (L,), extra model kwargs); decode(id) -> str."""

    model: torch.nn.Module
    name: str
    tokenize: Callable[[str], tuple[list[str], torch.Tensor, dict]]
    decode: Callable[[int], str]
    max_len: int

    @classmethod
    def load(cls, path: str | Path | None = None) -> "Explainer":
        """The default model (path None), a checkpoint folder written by `selfattn train`, or a
        Hugging Face GPT-2 / BERT-style folder (config.json + model.safetensors + tokenizer files)."""
        if path is None:
            from ..model import checkpoint

            return cls._from_checkpoint(*checkpoint.load_default()[:2], name="selfattn default model")
        folder = Path(path)
        if not folder.is_dir():
            raise FileNotFoundError(f"model folder not found: {folder}")
        kind = _folder_kind(folder)
        if kind == "selfattn":
            from ..model import checkpoint

            return cls._from_checkpoint(*checkpoint.load_checkpoint(folder)[:2], name=folder.name)
        return cls._from_hugging_face(folder, kind)

    @classmethod
    def _from_checkpoint(cls, model, tokenizer, *, name: str) -> "Explainer":
        def tokenize(text: str):
            ids = tokenizer.encode(text, bos=True)
            return [tokenizer.tokens[i] for i in ids], torch.tensor(ids), {}

        return cls(model=model.eval(), name=name, tokenize=tokenize,
                   decode=lambda i: tokenizer.tokens[i], max_len=model.max_len)

    @classmethod
    def _from_hugging_face(cls, folder: Path, kind: str) -> "Explainer":
        from ..model import hf

        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise ValueError(f"{folder} is a Hugging Face {kind} folder; reading its tokenizer needs the "
                             f"`transformers` package (pip install transformers)") from None
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except (OSError, ValueError) as e:
            raise ValueError(f"{folder}: no usable tokenizer files ({e})") from None
        model = hf.load_gpt2(folder) if kind == "gpt2" else hf.load_bert(folder)

        def tokenize(text: str):
            ids = tokenizer(text, add_special_tokens=True)["input_ids"]
            tokens = [tokenizer.decode([i]) for i in ids]
            extra = {} if kind == "gpt2" else {"attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
            return tokens, torch.tensor(ids), extra

        return cls(model=model.eval(), name=folder.name, tokenize=tokenize,
                   decode=lambda i: tokenizer.decode([i]), max_len=model.config.max_len)

    def check_text(self, text) -> str:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not text.strip():
            raise ValueError("text is empty: give a sentence such as 一只蓝色怪兽走进森林")
        if len(text) > MAX_CHARS:
            raise ValueError(f"text has {len(text)} characters; the limit is {MAX_CHARS}")
        bad = [ch for ch in text if not ch.isprintable() and ch not in "\n\t"]
        if bad:
            raise ValueError(f"text contains a control character {bad[0]!r}")
        return text

    def trace(self, text: str, intervention: Intervention = Intervention()) -> ModelTrace:
        tokens, ids, kwargs = self.tokenize(self.check_text(text))
        if len(ids) > self.max_len:
            raise ValueError(f"the text has {len(ids)} tokens; {self.name} reads at most {self.max_len}")
        return capture(self.model, ids, tokens, intervention, **kwargs)

    def explain(self, text: str = DEFAULT_TEXT, *, layer: int | None = None, head: int | None = None,
                intervention: Intervention = Intervention(), stages: bool | None = None) -> dict:
        """The whole export dict for `text`; the shown head is (layer, head), or picked by the rule."""
        trace = self.trace(text, intervention)
        table = summary.summaries(trace)
        selected = self.select(trace, table, layer, head)
        return export.to_dict(trace, model=export.model_info(self.model, self.name, trace), text=text,
                              selected=selected, summaries=table,
                              prediction=export.predictions(trace, self.decode), stages=stages)

    @staticmethod
    def select(trace: ModelTrace, table, layer, head) -> dict:
        for name, value, n in (("layer", layer, trace.n_layers), ("head", head, trace.n_heads)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n):
                raise ValueError(f"{name} must be in [0, {n - 1}], got {value!r}")
        if layer is not None and head is not None:
            return {"layer": layer, "head": head, "rule": None}
        if layer is not None:  # best head of that layer
            best = summary.pick_head([table[layer]])
            return {"layer": layer, "head": best[1], "rule": "within layer"}
        picked_layer, picked_head = summary.pick_head(table)
        if head is not None:
            best_layer = min(range(trace.n_layers), key=lambda l: table[l][head]["entropy"])
            return {"layer": best_layer, "head": head, "rule": "within head"}
        return {"layer": picked_layer, "head": picked_head, "rule": "auto"}


def _folder_kind(folder: Path) -> str:
    """"selfattn" (a `selfattn train` checkpoint), "gpt2" or "bert", from the folder's config.json."""
    import json

    config = folder / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{folder} has no config.json: not a model folder")
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{config} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{config} does not hold a JSON object")
    if data.get("format") == "selfattn.decoder-lm":
        return "selfattn"
    kind = data.get("model_type")
    if kind in ("gpt2", "bert"):
        return kind
    raise ValueError(f"{folder}: model_type {kind!r} is not supported; selfattn reads its own checkpoints, "
                     f"GPT-2 and BERT-style folders")
