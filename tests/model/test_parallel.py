"""Context parallelism on the model side, in one process (no group): DecoderLM's `positions`, what a
Sharded input refuses before anything is sent, the torchrun entry point's arguments, and that the
library `selfattn.distributed` imports nothing of the model. The equality with one process runs in
real processes (tests/distributed/workers.py: `decoder_case`, `train_step_case`, `train_entry_point`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from selfattn.distributed import Sharded
from selfattn.model.decoder import DecoderConfig, DecoderLM

V = 23


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return DecoderLM(DecoderConfig(vocab_size=V, d_model=16, n_layers=2, n_heads=2, max_len=20)).double().eval()


def test_positions_equal_start_and_place_each_row():
    torch.manual_seed(1)
    m = DecoderLM(DecoderConfig(vocab_size=V, d_model=16, n_layers=1, n_heads=2, max_len=20)).double().eval()
    ids = torch.randint(0, V, (2, 6))
    assert torch.equal(m(ids, positions=torch.arange(4, 10)), m(ids, start=4))
    per_row = torch.stack([torch.arange(0, 6), torch.arange(9, 15)])  # (B, L)
    assert torch.equal(m(ids, positions=per_row), m(ids, start=torch.tensor([0, 9])))
    assert torch.equal(m(ids[0], positions=torch.arange(3, 9)), m(ids[0], start=3))
    # any positions, not only a run: attention mixes rows by order, the embedding reads each row's position
    scattered = torch.tensor([0, 1, 2, 17, 18, 19])
    x = m.tok_emb(ids) + m.pos_emb(scattered)
    for block in m.blocks:
        x = block(x)
    assert torch.equal(m(ids, positions=scattered), m.lm_head(m.ln_f(x)))


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(positions=torch.arange(5)), ValueError, r"positions must have shape \(6,\) or \(2, 6\)"),
        (dict(positions=torch.arange(15, 21)), ValueError, r"positions must be in \[0, max_len=20\), got \[15, 20\]"),
        (dict(positions=-torch.arange(6)), ValueError, r"got \[-5, 0\]"),
        (dict(positions=torch.arange(6.0)), TypeError, "positions must be an int64/int32 tensor, got torch.float32"),
        (dict(positions=[0, 1, 2, 3, 4, 5]), TypeError, "got list"),
        (dict(positions=torch.arange(6), start=2), ValueError, "pass positions or start/cache, not both"),
        (dict(group=object()), TypeError, "group is for context parallelism: pass input_ids as the Sharded"),
    ],
)
def test_bad_positions_and_group_are_named(model, kwargs, err, match):
    with pytest.raises(err, match=match):
        model(torch.zeros(2, 6, dtype=torch.int64), **kwargs)


def test_positions_of_one_row_input_are_one_row(model):
    with pytest.raises(ValueError, match=r"positions must have shape \(6,\) \(one per input id\), got \(1, 6\)"):
        model(torch.zeros(6, dtype=torch.int64), positions=torch.arange(6)[None])
    with pytest.raises(ValueError, match="pass positions or start/cache, not both"):
        model(torch.zeros(6, dtype=torch.int64), model.new_cache(), positions=torch.arange(6))


def _sharded(tensor, seq_len=7, dim=1):
    return Sharded(tensor, seq_len=seq_len, layout="zigzag", dim=dim, world=2, rank=0)


@pytest.mark.parametrize(
    "ids, kwargs, err, match",
    [
        (
            _sharded(torch.zeros(1, 4, dtype=torch.int64)),
            dict(cache="new"),
            ValueError,
            r"with Sharded input_ids \(context parallelism\) pass no cache",
        ),
        (_sharded(torch.zeros(1, 4, dtype=torch.int64)), dict(start=3), ValueError, "pass no start"),
        (
            _sharded(torch.zeros(1, 4, dtype=torch.int64)),
            dict(positions=torch.arange(4)),
            ValueError,
            "pass no positions",
        ),
        (
            _sharded(torch.zeros(1, 4, dtype=torch.int64), dim=0),
            {},
            ValueError,
            r"\(B, Lr\) sharded along dim 1 or \(Lr,\) along dim 0, got shape \(1, 4\) sharded along dim 0",
        ),
        (
            _sharded(torch.zeros(1, 12, dtype=torch.int64), seq_len=23),
            {},
            ValueError,
            "the sequence has 23 positions, over max_len=20",
        ),
        (_sharded(torch.zeros(1, 4, dtype=torch.int64)), {}, RuntimeError, "torch.distributed is not initialised"),
    ],
)
def test_sharded_input_refusals_come_before_any_communication(model, ids, kwargs, err, match):
    if kwargs.get("cache") == "new":
        kwargs = dict(kwargs, cache=model.new_cache())
    with pytest.raises(err, match=match):
        model(ids, **kwargs)


def test_the_distributed_library_imports_nothing_of_the_model():
    """issue 16: distributed/ held an application (training) that imported model/, which imports distributed/."""
    folder = Path(__file__).parents[2] / "src/selfattn/distributed"
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = ("." * node.level) + (node.module or "")
                assert not target.startswith(("..model", "selfattn.model")), f"{path.name} imports {target}"
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("selfattn.model") for a in node.names), path.name


@pytest.mark.parametrize(
    "argv, err, match",
    [
        (["--backend", "nope"], ValueError, "unknown backend 'nope'; choose 'auto' or one of"),
        (["--seq-len", "0"], ValueError, "seq_len must be >= 1, got 0"),
        (["--lr", "0"], ValueError, "lr must be > 0"),
        (["--timeout", "-1"], ValueError, "timeout must be > 0"),
    ],
)
def test_the_torchrun_entry_point_names_a_bad_argument(argv, err, match):
    from selfattn.model.train.parallel import parse_args

    with pytest.raises(err, match=match):
        parse_args(argv)


def test_the_torchrun_entry_point_runs_as_a_module():
    """`python -m selfattn.model.train.parallel --help`: the module the README's torchrun line names exists."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "selfattn.model.train.parallel", "--help"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "torchrun ... -m selfattn.model.train.parallel" in proc.stdout and "--seq-len" in proc.stdout


def test_a_batch_that_is_not_b_by_l_plus_1_is_named_before_any_communication(model):
    from selfattn.model.train.parallel import train_step

    with pytest.raises(ValueError, match=r"batch must be \(B, L \+ 1\) token ids with L >= 1, got \(2, 1\)"):
        train_step(model, torch.zeros(2, 1, dtype=torch.int64), 0)
    with pytest.raises(ValueError, match="unknown layout 'striped'"):
        train_step(model, torch.zeros(2, 5, dtype=torch.int64), 0, layout="striped")
