"""A user's code typed against the public API passes `mypy --strict`, and a wrong use of it is an error.

The user's files are written to a temporary folder and checked by the venv's mypy, with the package's source
folder on MYPYPATH (this checkout, not an installed copy) and --follow-imports=silent: the package is read for its
types, and only the user's file is judged, as for an installed package.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import selfattn

SOURCE = Path(selfattn.__file__).resolve().parent.parent
MYPY = Path(sys.executable).with_name("mypy")

GOOD = """\
from __future__ import annotations

import torch

import selfattn
from selfattn.compat import (
    BlockDiagonalMask,
    LowerTriangularMask,
    flash_attn_func,
    flash_attn_varlen_func,
    memory_efficient_attention,
    scaled_dot_product_attention,
)


def use(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = selfattn.attention(q, k, v)
    causal: torch.Tensor = selfattn.attention(q, k, v, causal=True, window=(4, 0), scale=0.5, softcap=30.0)
    res = selfattn.attention(q, k, v, return_weights=True)
    weights: torch.Tensor | None = res.weights
    lse: torch.Tensor | None = selfattn.attention(q, k, v, return_lse=True).lse
    both: selfattn.AttentionOutput = selfattn.attention(q, k, v, return_weights=True, return_lse=True)
    flag: bool = bool(q.numel())
    either: torch.Tensor | selfattn.AttentionOutput = selfattn.attention(q, k, v, return_weights=flag)
    flash: torch.Tensor = flash_attn_func(q, k, v, causal=True, window_size=(8, 0))
    o, flash_lse, probs = flash_attn_func(q, k, v, return_attn_probs=True)
    packed: torch.Tensor = flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 4, 4, causal=True)
    sdpa: torch.Tensor = selfattn.compat.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    sdpa = scaled_dot_product_attention(q, k, v, attn_mask=None, scale=0.25)
    xf: torch.Tensor = memory_efficient_attention(q, k, v, attn_bias=LowerTriangularMask())
    xb: torch.Tensor = memory_efficient_attention(q, k, v, attn_bias=BlockDiagonalMask.from_seqlens([2]).make_causal())
    e: selfattn.Explanation = selfattn.explain("一只蓝色怪兽走进森林", layer=0, head=1)
    del causal, weights, lse, both, either, flash, o, flash_lse, probs, packed, sdpa, xf, xb, e
    return out
"""

BAD = {
    "weights_as_tensor": "out: torch.Tensor = selfattn.attention(q, q, q, return_weights=True)",
    "lse_of_a_tensor": "lse = selfattn.attention(q, q, q).lse",
    "flash_probs_as_tensor": "out: torch.Tensor = selfattn.compat.flash_attn_func(q, q, q, return_attn_probs=True)",
    "explain_as_int": 'n: int = selfattn.explain("一只蓝色怪兽走进森林")',
    "causal_as_text": 'out: torch.Tensor = selfattn.attention(q, q, q, causal="yes")',
}
"""One wrong use per line: each must be reported by mypy --strict on its line."""


def _mypy(folder: Path, cache: Path, *files: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MYPYPATH": str(SOURCE)}
    command = [str(MYPY), "--strict", "--follow-imports=silent", "--no-error-summary", "--cache-dir", str(cache)]
    return subprocess.run([*command, *files], cwd=folder, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def cache(pytestconfig, tmp_path_factory) -> Path:
    """mypy's cache kept between runs (pytest's cache folder, when the cache plugin runs): a warm check of torch's
    stubs takes a second, a cold one half a minute."""
    kept = getattr(pytestconfig, "cache", None)
    return Path(kept.mkdir("mypy_strict")) if kept is not None else tmp_path_factory.mktemp("mypy_cache")


def test_a_users_typed_code_passes_mypy_strict(tmp_path, cache):
    (tmp_path / "user.py").write_text(GOOD, encoding="utf-8")
    done = _mypy(tmp_path, cache, "user.py")
    assert done.returncode == 0, done.stdout + done.stderr


def test_wrong_uses_are_type_errors_each_on_its_line(tmp_path, cache):
    lines = ["import torch", "import selfattn", "", "", "def use(q: torch.Tensor) -> None:"]
    first = len(lines) + 1
    lines += [f"    {code}" for code in BAD.values()]
    (tmp_path / "bad.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = _mypy(tmp_path, cache, "bad.py")
    assert done.returncode == 1, done.stdout + done.stderr
    flagged = {int(n) for n in re.findall(r"^bad\.py:(\d+): error", done.stdout, flags=re.MULTILINE)}
    missed = [name for i, name in enumerate(BAD, start=first) if i not in flagged]
    assert not missed, f"mypy --strict let these through: {missed}\n{done.stdout}"
