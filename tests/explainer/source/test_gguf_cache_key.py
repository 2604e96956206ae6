"""The key of the GGUF cache (`explainer.gguf_cache.identity`) covers every byte of the file: a byte changed
anywhere — past any prefix that was once hashed alone — with the file's size and mtime kept as they were (`touch
-r`, `cp -p`, `rsync -t` restore them) gives another key, so the old entry's weights are never loaded for it.

The files are written by the `gguf` package itself (a header, metadata and tensors), so they are GGUF files as a
loader reads them; the changed byte is the last of the last tensor's data, in a file larger than 32 MiB (the
prefix that was hashed alone before)."""

import os
import shutil

import numpy as np
import pytest
import torch

from selfattn.explainer.source import gguf_cache
from tests.explainer.source.test_real_model import GGUF, _folder

gguf = pytest.importorskip("gguf")


LARGE = 3 << 20
"""Floats in each tensor of the test file: 3 tensors of 12 MiB, a 36 MiB file."""


def _write_gguf(path, n_tensors: int = 3, width: int = LARGE) -> None:
    """A small GGUF file: a llama-architecture header, a few metadata fields, `n_tensors` float32 tensors."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_string("general.name", "selfattn-test")
    rng = np.random.default_rng(0)
    for i in range(n_tensors):
        writer.add_tensor(f"blk.0.t{i}.weight", rng.standard_normal(width).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _change_byte_keeping_stat(path, offset: int) -> None:
    """Flip one byte at `offset` (negative: from the end) in place, then put the mtime back as `touch -r` does."""
    before = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset, os.SEEK_END if offset < 0 else os.SEEK_SET)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def test_a_byte_changed_at_the_end_with_size_and_mtime_kept_gives_a_new_key(tmp_path):
    path = tmp_path / "m.gguf"
    _write_gguf(path)
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"
    assert path.stat().st_size > 32 << 20
    before = gguf_cache._key(gguf_cache.identity(path, torch.float32))
    _change_byte_keeping_stat(path, -1)  # the last byte of the last tensor's data
    after = gguf_cache._key(gguf_cache.identity(path, torch.float32))
    assert after != before, "a changed byte anywhere in the file names another entry"
    _change_byte_keeping_stat(path, -1)  # back to the first bytes: the first key again (it is the content's)
    assert gguf_cache._key(gguf_cache.identity(path, torch.float32)) == before


def test_an_entry_stored_before_the_change_is_not_found_after_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "m.gguf"
    _write_gguf(path, width=4096)
    ident = gguf_cache.identity(path, torch.float32)
    folder = gguf_cache.root() / gguf_cache._key(ident)
    folder.mkdir(parents=True)
    (folder / gguf_cache.WEIGHTS).write_bytes(b"\0" * 64)
    files = {gguf_cache.WEIGHTS: {"size": 64, "crc32": gguf_cache._crc(folder / gguf_cache.WEIGHTS)}}
    (folder / gguf_cache.MANIFEST).write_text(__import__("json").dumps({"identity": ident, "files": files}))
    assert gguf_cache.find(path, torch.float32) == folder
    _change_byte_keeping_stat(path, -1)
    assert gguf_cache.find(path, torch.float32) is None, "the old weights would be loaded for other bytes"
    assert folder.is_dir(), "the other file's entry stays (it is still right for the bytes it was made from)"


def test_the_real_file_zeroed_past_32_mib_with_its_mtime_restored_gives_a_new_key(tmp_path):
    """The attack as it was reported: 1 MiB zeroed at 64 MiB of SmolLM2's 98 MB file, its mtime restored."""
    path = tmp_path / GGUF
    shutil.copyfile(_folder() / GGUF, path)
    assert path.stat().st_size > (65 << 20)
    before = gguf_cache._key(gguf_cache.identity(path, torch.float32))
    stat = path.stat()
    with open(path, "r+b") as f:
        f.seek(64 << 20)
        f.write(b"\0" * (1 << 20))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    assert gguf_cache._key(gguf_cache.identity(path, torch.float32)) != before


def _counted(monkeypatch, name: str) -> list:
    """Each call of gguf_cache's `hashlib.sha256` ("sha256") or `_crc` ("crc"), counted."""
    calls: list = []
    if name == "sha256":
        real = gguf_cache.hashlib.sha256
        fake = __import__("types").SimpleNamespace(sha256=lambda *a: calls.append(1) or real(*a))
        monkeypatch.setattr(gguf_cache, "hashlib", fake)
    else:
        real_crc = gguf_cache._crc
        monkeypatch.setattr(gguf_cache, "_crc", lambda path: calls.append(path) or real_crc(path))
    return calls


def test_a_files_hash_is_kept_across_commands_while_its_stamp_holds(tmp_path, monkeypatch):
    """The SHA-256 of a GGUF file is read by the next command from a "gguf_sha" entry named by the file's stamp
    (path, device, inode, size, mtime, ctime): not hashed again while the file is unchanged; the same bytes written
    again with the mtime put back move the ctime, and a damaged entry is not read: hashed again, each time."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf_cache, "RACY_NS", 0)  # the file was written just now: no 2 s wait for its ctime
    path = tmp_path / "m.gguf"
    _write_gguf(path, width=4096)
    hashed = _counted(monkeypatch, "sha256")
    first = gguf_cache.identity(path, torch.float32)
    assert len(hashed) == 1
    gguf_cache._hashed.clear()  # as in a new process
    assert gguf_cache.identity(path, torch.float32) == first and len(hashed) == 1  # read from the entry
    _change_byte_keeping_stat(path, -1)
    _change_byte_keeping_stat(path, -1)  # the same bytes again, the mtime put back: only the ctime moved
    gguf_cache._hashed.clear()
    assert gguf_cache.identity(path, torch.float32) == first and len(hashed) == 2  # hashed again
    kept_entries = (tmp_path / "cache" / "selfattn" / gguf_cache.SHA_ENTRIES).glob("*.json")
    entry = max(kept_entries, key=lambda p: p.stat().st_mtime_ns)  # the one of the stamp the file has now
    kept = __import__("json").loads(entry.read_text())
    kept["value"]["sha256"] = "0" * 64  # another hash, its digest not matching
    entry.write_text(__import__("json").dumps(kept))
    gguf_cache._hashed.clear()
    assert gguf_cache.identity(path, torch.float32) == first and len(hashed) == 3


def test_a_hash_taken_within_racy_ns_of_the_files_change_is_not_kept(tmp_path, monkeypatch):
    """A file changed moments before its hash (times tick in steps) may change again with the same stamp: no entry."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "m.gguf"
    _write_gguf(path, width=4096)
    gguf_cache.identity(path, torch.float32)
    assert not list((tmp_path / "cache").rglob(f"{gguf_cache.SHA_ENTRIES}/*.json"))


def test_an_entrys_crcs_are_read_once_per_stamp_of_its_files(tmp_path, monkeypatch):
    """A cache entry verified once is not read again by the next command while its files keep their stamps; a file
    rewritten (its size kept, its mtime put back) is checked again, and the entry removed for its other bytes."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf_cache, "RACY_NS", 0)
    path = tmp_path / "m.gguf"
    _write_gguf(path, width=4096)
    ident = gguf_cache.identity(path, torch.float32)
    folder = gguf_cache.root() / gguf_cache._key(ident)
    folder.mkdir(parents=True)
    (folder / gguf_cache.WEIGHTS).write_bytes(bytes(range(64)))
    files = {gguf_cache.WEIGHTS: {"size": 64, "crc32": gguf_cache._crc(folder / gguf_cache.WEIGHTS)}}
    (folder / gguf_cache.MANIFEST).write_text(__import__("json").dumps({"identity": ident, "files": files}))
    crcs = _counted(monkeypatch, "crc")
    assert gguf_cache.find(path, torch.float32) == folder and len(crcs) == 1
    gguf_cache._hashed.clear()
    assert gguf_cache.find(path, torch.float32) == folder and len(crcs) == 1  # the kept verification
    _change_byte_keeping_stat(folder / gguf_cache.WEIGHTS, 0)
    assert gguf_cache.find(path, torch.float32) is None and len(crcs) == 2  # checked again: its CRC is another
    assert not folder.exists()
