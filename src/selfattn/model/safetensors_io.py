"""Reading safetensors files and putting their tensors into a module, with errors that name things.

Only safetensors: a weights file is parsed as data, never executed (no pickle, no torch.load).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

__all__ = ["read_safetensors", "write_safetensors", "unique_state", "assign"]


def read_safetensors(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """All tensors of a .safetensors file; FileNotFoundError / ValueError naming the file."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weights file not found: {path}")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise ValueError(f"{path} is not a readable safetensors file ({e})") from None


def write_safetensors(tensors: dict[str, torch.Tensor], path: str | os.PathLike, metadata: dict | None = None) -> Path:
    """Write tensors (made contiguous, on CPU) to a .safetensors file."""
    from safetensors.torch import save_file

    path = Path(path)
    save_file({k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}, str(path), metadata=metadata)
    return path


def unique_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The module's state dict with tied tensors listed once (under the first name)."""
    out, seen = {}, set()
    for name, t in module.state_dict(keep_vars=True).items():
        key = (t.data_ptr(), tuple(t.shape), t.dtype)
        if key in seen:
            continue
        seen.add(key)
        out[name] = t
    return out


def assign(module: nn.Module, tensors: dict[str, torch.Tensor], source: str) -> None:
    """Copy `tensors` into `module`, after checking every name and shape.

    tensors  name -> tensor, named as in `unique_state(module)` (tied copies are not needed)
    source   what to call the origin in errors, e.g. the file's path
    Raises ValueError naming a missing or unexpected tensor, or one whose shape is wrong.
    """
    want = unique_state(module)
    missing = [name for name in want if name not in tensors]
    if missing:
        raise ValueError(f"{source} is missing tensor {missing[0]!r} (shape {tuple(want[missing[0]].shape)})"
                         + (f" and {len(missing) - 1} more: {missing[1:6]}" if len(missing) > 1 else ""))
    unexpected = sorted(set(tensors) - set(want))
    if unexpected:
        raise ValueError(f"{source} has unexpected tensor {unexpected[0]!r}"
                         + (f" and {len(unexpected) - 1} more: {unexpected[1:6]}" if len(unexpected) > 1 else ""))
    for name in want:                                   # in the module's order: the first layer first
        t = tensors[name]
        if tuple(t.shape) != tuple(want[name].shape):
            raise ValueError(f"{source}: tensor {name!r} has shape {tuple(t.shape)}, "
                             f"the model expects {tuple(want[name].shape)}")
        if not t.is_floating_point() and want[name].is_floating_point():
            raise ValueError(f"{source}: tensor {name!r} has dtype {t.dtype}, the model expects floating point")
    with torch.no_grad():
        for name, t in tensors.items():
            want[name].copy_(t)
