"""Weight files: written and read by safetensors, with checks that name things.

    save_weights(model, path)    `safetensors.torch.save` of the state dict, tied tensors once, through
                                 a temporary file and a rename (`selfattn.files.write_atomic`)
    read_safetensors(path)       every tensor of a file; FileNotFoundError / ValueError naming it
    assign(model, tensors, src)  copy them into the model after checking every name and shape
                                 (`load_model` would raise torch's RuntimeError without the names)

Only safetensors: a weights file is parsed as data, never executed (no pickle, no torch.load).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from ..files import open_regular, write_atomic

__all__ = ["read_safetensors", "save_weights", "assign"]


def save_weights(
    module: nn.Module, path: str | os.PathLike, metadata: dict[str, str] | None = None, *, force: bool = False
) -> Path:
    """Write `module`'s tensors to `path` atomically, tied tensors once (under their first name).

    Not `safetensors.torch.save_model`: that records tied names as extra metadata keys, and safetensors
    writes metadata in hash-map order, so the same model would not give the same bytes twice (a
    training run is reproducible bit for bit, its file too). Metadata here should hold one key."""
    from safetensors.torch import save

    first, _ = _tied_names(module)
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in first.items()}
    return write_atomic(path, save(tensors, metadata=metadata), force=force)


def read_safetensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """All tensors of a .safetensors file; FileNotFoundError / ValueError naming the file."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    with open_regular(path, what="weights file"):  # missing, or a FIFO / device / folder: named, never waited on
        pass
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise ValueError(f"{path} is not a readable safetensors file ({e})") from None


def _tied_names(module: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(first name -> tensor for each distinct tensor of the state dict, every name -> its first name)."""
    first, alias, seen = {}, {}, {}
    for name, t in module.state_dict(keep_vars=True).items():
        key = (t.data_ptr(), tuple(t.shape), t.dtype)
        if key not in seen:
            seen[key] = name
            first[name] = t
        alias[name] = seen[key]
    return first, alias


def assign(module: nn.Module, tensors: dict[str, torch.Tensor], source: str) -> None:
    """Copy `tensors` into `module`, after checking every name and shape.

    tensors  name -> tensor, one per distinct tensor of the module: tied tensors (a GPT-2 LM head
             sharing the token embedding) under any one of their names
    source   what to call the origin in errors, e.g. the file's path
    Raises ValueError naming a missing or unexpected tensor, one whose shape or dtype is wrong, or one
    holding NaN or infinity.
    """
    want, alias = _tied_names(module)
    given: dict[str, torch.Tensor] = {}
    unexpected = []
    for name, t in tensors.items():
        if name in alias:
            given[alias[name]] = t
        else:
            unexpected.append(name)
    missing = [name for name in want if name not in given]
    if missing:
        raise ValueError(
            f"{source} is missing tensor {missing[0]!r} (shape {tuple(want[missing[0]].shape)})"
            + (f" and {len(missing) - 1} more: {missing[1:6]}" if len(missing) > 1 else "")
        )
    unexpected.sort()
    if unexpected:
        raise ValueError(
            f"{source} has unexpected tensor {unexpected[0]!r}"
            + (f" and {len(unexpected) - 1} more: {unexpected[1:6]}" if len(unexpected) > 1 else "")
        )
    for name in want:  # in the module's order: the first layer first
        t = given[name]
        if tuple(t.shape) != tuple(want[name].shape):
            raise ValueError(
                f"{source}: tensor {name!r} has shape {tuple(t.shape)}, the model expects {tuple(want[name].shape)}"
            )
        if not t.is_floating_point() and want[name].is_floating_point():
            raise ValueError(f"{source}: tensor {name!r} has dtype {t.dtype}, the model expects floating point")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ValueError(f"{source}: tensor {name!r} holds NaN or infinite values; a model with them computes NaN")
    with torch.no_grad():
        for name, t in given.items():
            want[name].copy_(t)
