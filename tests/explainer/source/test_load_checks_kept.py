"""A transformers folder's load checks (the weights' NaN/inf scan and the dry run) are done once per files: a later
load of the same files skips both, files changed since (or bad ones) are checked, and refused, every time."""

import pytest
import torch

from selfattn.explainer.session import Explainer
from selfattn.explainer.source import build, resolve
from selfattn.explainer.source.stamps import Entries
from tests.hf import models


@pytest.fixture
def checks(monkeypatch, tmp_path):
    """The cache folder a new one; counts of the scanned tensors and of the dry runs."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    done = {"scanned": 0, "dry runs": 0}
    finite, confirm = resolve._finite, build.confirm

    def scanned(t):
        done["scanned"] += 1
        return finite(t)

    def dry_run(*args, **kwargs):
        done["dry runs"] += 1
        return confirm(*args, **kwargs)

    monkeypatch.setattr(resolve, "_finite", scanned)
    monkeypatch.setattr(build, "confirm", dry_run)
    return done


def test_the_same_files_are_checked_once(tmp_path, checks):
    folder = models.save("llama", tmp_path / "llama")
    first = Explainer.load(folder)
    assert checks["scanned"] > 0 and checks["dry runs"] == 1
    scanned = checks["scanned"]
    again = Explainer.load(folder)
    assert checks == {"scanned": scanned, "dry runs": 1}  # neither again
    assert again.card.stamp == first.card.stamp is not None
    for (name, p), (_, q) in zip(first.model.named_parameters(), again.model.named_parameters(), strict=True):
        assert torch.equal(p, q), name
    Explainer.load(folder, dtype="bfloat16")  # another dtype: checked
    assert checks["dry runs"] == 2


def test_weights_changed_since_are_scanned_and_refused(tmp_path, checks):
    folder = models.save("llama", tmp_path / "llama")
    Explainer.load(folder)
    nan = models.variant(folder, tmp_path / "nan", weights=lambda t: t["model.norm.weight"].fill_(float("nan")))
    for _ in range(2):  # refused each time: a refusal keeps nothing
        with pytest.raises(ValueError, match="NaN or infinite values in 1 tensor"):
            Explainer.load(nan)
    # the first folder's files rewritten with a NaN: their ctime moves, whatever the mtime says
    (folder / "model.safetensors").write_bytes((nan / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="NaN or infinite"):
        Explainer.load(folder)


def test_files_written_under_the_load_are_not_named(tmp_path, checks, monkeypatch):
    folder = models.save("llama", tmp_path / "llama")
    from selfattn.explainer.source import stamps

    seen = iter(['[["a"]]', '[["b"]]'])  # the stamp before the load, and another after it
    monkeypatch.setattr(stamps, "stamp", lambda paths: next(seen))
    ex = Explainer.load(folder)
    assert ex.card.stamp is None and checks["dry runs"] == 1
    assert not Entries(build.PASSED).folder.exists()  # nothing kept of weights with no name
