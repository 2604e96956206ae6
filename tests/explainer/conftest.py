import pytest

from selfattn.explainer.session import Explainer
from tests.explainer.tiny import save_tiny


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """`tiny.save_tiny`: the tests' one tiny decoder (GQA, max_len 1024) as a checkpoint folder."""
    return save_tiny(tmp_path_factory.mktemp("ckpt") / "tiny")


@pytest.fixture(scope="session")
def tiny(tiny_checkpoint):
    return Explainer.load(tiny_checkpoint)


@pytest.fixture(scope="module")
def bundled():
    """The bundled model's Explainer, loaded once a module."""
    return Explainer.load()


@pytest.fixture
def cli_on_bundled(bundled, monkeypatch):
    """`selfattn explain` answering with `bundled` (Explainer.load not called per command)."""
    monkeypatch.setattr(Explainer, "load", classmethod(lambda cls, path=None, dtype=None: bundled))
