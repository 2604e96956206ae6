"""The cache of dequantized GGUF weights (`explainer.gguf_cache`), on the real SmolLM2-135M GGUF file: the second
load reads no GGUF tensor (transformers' GGUF reader is never called) and gives the same weights bit for bit and
the same tokens; a changed or truncated cache file is never trusted (the entry is rebuilt); the cache stays under
its limit, the oldest entries removed first.

Each test has its own cache folder ($XDG_CACHE_HOME in a temporary folder)."""

import json
import os
import time
from pathlib import Path

import pytest
import torch
import transformers.modeling_gguf_pytorch_utils as gguf_utils

from selfattn.explainer.session import Explainer
from selfattn.explainer.source import gguf_cache
from tests.explainer.source.test_real_model import CHINESE, GGUF, MARY, _folder


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture
def reads(monkeypatch):
    """How many times transformers' GGUF reader runs (config, tokenizer or tensors)."""
    calls = []
    real = gguf_utils.load_gguf_checkpoint

    def counted(*args, **kwargs):
        calls.append(kwargs.get("return_tensors", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(gguf_utils, "load_gguf_checkpoint", counted)  # transformers imports it at each use
    return calls


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same_bits(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert torch.equal(a[name].view(torch.uint8), b[name].view(torch.uint8)), name  # bits, not values


def _entry() -> Path:
    (entry,) = [p for p in gguf_cache.root().iterdir() if not p.name.startswith(".")]
    return entry


def test_the_second_load_reads_the_cache_and_gives_the_same_weights_bit_for_bit(cache, reads):
    path = _folder() / GGUF
    first = Explainer.load(path)
    assert True in reads, "the first load dequantizes the GGUF tensors"
    weights = _state(first.model)
    tokens = [first.tokenize(t)[1].tolist() for t in (CHINESE, MARY)]
    entry = _entry()
    assert entry.parent == cache / "selfattn" / "gguf" and (entry / gguf_cache.WEIGHTS).is_file()
    del first

    reads.clear()
    second = Explainer.load(path)
    assert reads == [], "the second load parses no GGUF metadata and dequantizes nothing"
    _same_bits(weights, _state(second.model))
    assert [second.tokenize(t)[1].tolist() for t in (CHINESE, MARY)] == tokens
    assert second.card.loaded["format"] == "gguf" and second.model.dtype == torch.float32
    del second

    data = entry / gguf_cache.WEIGHTS  # one byte of one weight changed: the entry is not trusted, but rebuilt
    with open(data, "r+b") as f:
        f.seek(os.path.getsize(data) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x40]))
    reads.clear()
    third = Explainer.load(path)
    assert True in reads, "a changed cache file is rebuilt from the GGUF file, never read"
    _same_bits(weights, _state(third.model))
    assert gguf_cache.find(path, torch.float32) == entry, "the rebuilt entry is whole again"


def test_a_truncated_or_unlisted_entry_is_removed_not_trusted(cache, tmp_path):
    path = _folder() / GGUF
    ident = gguf_cache.identity(path, torch.float32)
    folder = gguf_cache.root() / gguf_cache._key(ident)
    folder.mkdir(parents=True)
    (folder / gguf_cache.WEIGHTS).write_bytes(b"\0" * 64)
    (folder / "config.json").write_bytes(b'{"model_type": "llama"}')
    files = {
        n: {"size": (folder / n).stat().st_size, "crc32": gguf_cache._crc(folder / n)}
        for n in (gguf_cache.WEIGHTS, "config.json")
    }
    (folder / gguf_cache.MANIFEST).write_text(json.dumps({"identity": ident, "files": files}))
    assert gguf_cache.find(path, torch.float32) == folder and gguf_cache.cached_config(path) == {"model_type": "llama"}
    with open(folder / gguf_cache.WEIGHTS, "r+b") as f:
        f.truncate(32)
    assert gguf_cache.cached_config(path) == {"model_type": "llama"}  # the config file itself is whole
    assert gguf_cache.find(path, torch.float32) is None and not folder.exists()
    assert gguf_cache.cached_config(path) is None
    folder.mkdir()
    (folder / gguf_cache.WEIGHTS).write_bytes(b"\0" * 64)  # no manifest: a killed writer's leftovers
    assert gguf_cache.find(path, torch.float32) is None and not folder.exists()


def test_the_identity_follows_the_file_and_the_dtype(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + b"\1" * 100)
    one = gguf_cache.identity(path, torch.float32)
    assert gguf_cache.identity(path, torch.bfloat16)["dtype"] == "bfloat16" != one["dtype"]
    mtime = path.stat().st_mtime_ns
    os.utime(path, ns=(mtime + 10**9, mtime + 10**9))  # touched, the same bytes: the same entry (the content's)
    assert gguf_cache._key(gguf_cache.identity(path, torch.float32)) == gguf_cache._key(one)
    path.write_bytes(b"GGUF" + b"\2" * 100)
    os.utime(path, ns=(mtime, mtime))  # same size and time, other bytes
    again = gguf_cache.identity(path, torch.float32)
    assert path.stat().st_mtime_ns == mtime and again["size"] == one["size"]
    assert gguf_cache._key(again) != gguf_cache._key(one)


def test_eviction_removes_the_oldest_entries_beyond_the_limit(tmp_path):
    base = tmp_path / "gguf"
    now = time.time()
    for i, name in enumerate(["old", "mid", "new"]):
        folder = base / name
        folder.mkdir(parents=True)
        (folder / gguf_cache.WEIGHTS).write_bytes(b"x" * 1000)
        (folder / gguf_cache.MANIFEST).write_text("{}")
        os.utime(folder / gguf_cache.MANIFEST, (now + i, now + i))
    assert [p.name for _, _, p in gguf_cache.entries(base)] == ["old", "mid", "new"]
    removed = gguf_cache.evict(base, 2100, keep=base / "old")
    assert [p.name for p in removed] == ["mid"] and sorted(p.name for p in base.iterdir()) == ["new", "old"]
    assert gguf_cache.evict(base, 10_000) == []


STORE_IN_A_FRESH_PROCESS = """
import sys
from pathlib import Path

import torch

from selfattn.bench.memory import peak_extra_bytes
from selfattn.explainer.source import gguf_cache


class Tokenizer:
    def save_pretrained(self, folder):
        Path(folder, "tokenizer.json").write_text("{}")


torch.manual_seed(0)
model = torch.nn.Linear(8192, 8192, bias=False)  # 256 MiB of float32 weights
stored, extra = peak_extra_bytes(lambda: gguf_cache.store(Path(sys.argv[1]), torch.float32, model, Tokenizer(), {}))
torch.save(model.weight, sys.argv[2])
print(stored, extra)
"""


def test_storing_an_entry_holds_no_second_copy_of_the_weights(cache, tmp_path):
    import subprocess
    import sys

    from safetensors import safe_open

    if not os.path.exists("/proc/self/clear_refs"):
        pytest.skip("the peak is read from Linux /proc")
    source = tmp_path / "model.gguf"
    source.write_bytes(os.urandom(1 << 16))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), XDG_CACHE_HOME=str(cache))
    done = subprocess.run(
        [sys.executable, "-c", STORE_IN_A_FRESH_PROCESS, str(source), str(tmp_path / "weight.pt")],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    stored, extra = done.stdout.split()
    assert int(extra) < 64 << 20  # the weights are 256 MiB: written from their own memory, not serialized first
    with safe_open(str(Path(stored) / gguf_cache.WEIGHTS), framework="pt") as f:
        assert f.metadata() == {"format": "pt"}  # transformers reads "format"
        assert torch.equal(f.get_tensor("weight"), torch.load(tmp_path / "weight.pt"))
