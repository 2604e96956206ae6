"""The commands keep the induction probe's measures on disk (`probe_store`): a model read from files pays the probe's
forward pass once; what is read back equals the measures of a fresh forward pass; a model changed on disk, a damaged
entry or an unwritable folder never gives another model's measures; the Python API keeps nothing."""

import json
import os

import pytest

from selfattn import cli
from selfattn.explainer import tracing
from selfattn.explainer.analysis import heads
from selfattn.explainer.probe_store import ProbeStore
from selfattn.explainer.session import Explainer
from selfattn.explainer.source.stamps import ENTRIES, stamp
from tests.hf import models

TEXT = "a blue monster walks into the forest"


@pytest.fixture
def folder(tmp_path):
    return models.save("llama", tmp_path / "llama")


@pytest.fixture
def forwards(monkeypatch):
    """The model runs made (each `tracing.traced` call is one forward pass, batched or not)."""
    calls: list[int] = []
    real = tracing.traced

    def counted(ex, cuts, *args, **kwargs):
        calls.append(len(cuts))
        return real(ex, cuts, *args, **kwargs)

    monkeypatch.setattr(tracing, "traced", counted)
    return calls


def fresh(folder):
    """The probe's measures of a new Explainer of `folder`, from its own forward pass (no store)."""
    return heads.measures(tracing.probe_trace(Explainer.load(folder)))


def test_a_second_load_of_the_same_files_reads_the_measures_of_a_fresh_forward(folder, tmp_path, forwards):
    store = ProbeStore(tmp_path / "probe")
    first = tracing.probe(Explainer.load(folder), store=store)
    assert len(forwards) == 1 and len(list(store.folder.glob("*.json"))) == 1
    again = tracing.probe(Explainer.load(folder), store=store)
    assert len(forwards) == 1  # read back: no forward pass
    want = fresh(folder)
    assert again == first == want
    assert json.dumps(again, sort_keys=True) == json.dumps(want, sort_keys=True)


def test_files_written_since_name_another_entry(folder, tmp_path, forwards):
    store = ProbeStore(tmp_path / "probe")
    seed0 = tracing.probe(Explainer.load(folder), store=store)
    models.save("llama", folder, seed=1)  # other weights in the same files, under the same names
    seed1 = tracing.probe(Explainer.load(folder), store=store)
    assert len(forwards) == 2  # measured again
    assert seed1 == fresh(folder) and seed1 != seed0
    config = folder / "config.json"
    before, named = os.stat(config), stamp([config])
    config.write_bytes(config.read_bytes())  # the same bytes, the mtime put back: the ctime still moves
    os.utime(config, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(config).st_mtime_ns == before.st_mtime_ns and stamp([config]) != named
    runs = len(forwards)
    tracing.probe(Explainer.load(folder), store=store)
    assert len(forwards) == runs + 1


@pytest.mark.parametrize(
    "damage",
    [
        lambda entry: entry | {"value": entry["value"][:-1]},  # a layer short, its digest made to match
        lambda entry: entry | {"sha256": "0" * 64},  # a measure changed since it was written
        lambda entry: entry | {"key": "another"},
        lambda entry: None,  # not JSON
    ],
    ids=["shape", "digest", "key", "truncated"],
)
def test_an_entry_that_is_not_whole_is_measured_again_and_replaced(damage, folder, tmp_path, forwards):
    from selfattn.explainer.source import stamps

    store = ProbeStore(tmp_path / "probe")
    tracing.probe(Explainer.load(folder), store=store)
    (path,) = store.folder.glob("*.json")
    entry = json.loads(path.read_text())
    changed = damage(entry)
    if changed is None:
        path.write_text(path.read_text()[:100])
    else:
        if changed["value"] is not entry["value"]:
            changed["sha256"] = stamps._digest(changed["value"])
        path.write_text(json.dumps(changed))
    got = tracing.probe(Explainer.load(folder), store=store)
    assert len(forwards) == 2 and got == fresh(folder)
    assert json.loads(path.read_text()) == entry  # written whole again


def test_a_model_built_in_memory_keeps_nothing(tmp_path, forwards):
    from tests.explainer.tiny import tiny_explainer

    store = ProbeStore(tmp_path / "probe")
    ex = tiny_explainer()
    assert ex.card.stamp is None
    tracing.probe(ex, store=store)
    tracing.probe(ex, store=store)
    assert len(forwards) == 2 and not store.folder.exists()
    assert Explainer.load().card.stamp is None  # the default model: from our checkpoint


def test_a_folder_that_cannot_be_written_still_answers(folder, tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the store's folder would be")
    got = tracing.probe(Explainer.load(folder), store=ProbeStore(blocked / "probe"))
    assert got == fresh(folder) and blocked.read_text().startswith("a file")


def test_the_least_recently_used_entries_go_first(tmp_path):
    store = ProbeStore(tmp_path).entries
    for i in range(ENTRIES + 3):
        path = tmp_path / f"{i:064x}.json"
        path.write_text("{}")
        os.utime(path, ns=(i * 10**9, i * 10**9))
    os.utime(tmp_path / f"{0:064x}.json")  # read just now
    removed = store.evict()
    assert sorted(p.name for p in removed) == [f"{i:064x}.json" for i in (1, 2, 3)]
    assert len(list(tmp_path.glob("*.json"))) == ENTRIES


def test_explain_and_heads_read_the_probe_once_across_commands_and_the_api_keeps_nothing(
    folder, tmp_path, monkeypatch, capsys, forwards
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    entries = tmp_path / "cache" / "selfattn" / "probe"
    assert cli.main(["explain", TEXT, "--model", str(folder), "--lang", "en"]) == 0
    first = capsys.readouterr().out
    runs = len(forwards)
    assert len(list(entries.glob("*.json"))) == 1
    assert cli.main(["explain", TEXT, "--model", str(folder), "--lang", "en"]) == 0
    assert capsys.readouterr().out == first  # the same answer
    assert len(forwards) == 2 * runs - 1  # but for the probe's forward pass
    assert cli.main(["heads", "--model", str(folder), "--json"]) == 0
    assert len(forwards) == 2 * runs - 1  # `heads` reads the same entry
    assert json.loads(capsys.readouterr().out)["heads"]
    import selfattn

    for path in entries.glob("*.json"):
        path.unlink()
    selfattn.explain(TEXT, model=Explainer.load(folder))
    assert not list(entries.glob("*.json"))  # the caller may change the weights it holds: nothing kept
