"""Models loaded in bfloat16 / float16 (`--dtype`, `selfattn.explain(..., dtype=)`): the weights shown are
eager transformers' `output_attentions` in the same dtype by the tolerance rule (error against a float64 eager
pass at most twice eager's own, plus the dtype's floor); a loaded model keeps its own dtype; the parameter
budget counts the dtype's bytes."""

import pytest
import torch

import selfattn
from selfattn import limits
from selfattn.cli import main
from selfattn.explainer import tracing
from selfattn.explainer.session import Explainer, dtype_name
from tests.explainer.documents import both, weights
from tests.hf.models import build, save, tokenizer
from tests.tolerances import max_error, tolerance

TEXT = "a blue monster walks into the forest the cat sleeps"


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save("llama", tmp_path_factory.mktemp("dtype") / "llama")


def _eager(dtype: torch.dtype, ids: torch.Tensor):
    model = build("llama", "eager").to(dtype)  # the saved folder's weights (same seed), cast as the loader casts
    with torch.no_grad():
        return model(ids, output_attentions=True, use_cache=False).attentions


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_weights_are_eagers_in_the_same_dtype_by_the_rule(llama, dtype):
    ex = Explainer.load(llama, dtype=str(dtype).removeprefix("torch."))
    assert ex.model.dtype == dtype and all(p.dtype == dtype for p in ex.model.parameters())
    e, doc = both(ex, TEXT)
    assert doc["model"]["dtype"] == str(dtype).removeprefix("torch.")
    ids = tracing.trace(ex, TEXT).token_ids[None]
    half, exact = _eager(dtype, ids), _eager(torch.float64, ids)
    for layer in range(len(exact)):
        for head in range(exact[layer].shape[1]):
            mine = torch.from_numpy(weights(e, layer, head))
            naive = max_error(half[layer][0, head], exact[layer][0, head])
            error = max_error(mine, exact[layer][0, head])
            assert error <= tolerance(dtype, naive), (layer, head, error, naive)


def test_a_loaded_model_keeps_its_own_dtype(llama):
    model = build("llama", "eager").to(torch.bfloat16)
    e = selfattn.explain(TEXT, model=(model, tokenizer()))
    assert e.doc["model"]["dtype"] == "bfloat16" and model.dtype == torch.bfloat16
    assert selfattn.explain(TEXT, model=(model, tokenizer()), dtype="bfloat16").doc["model"]["dtype"] == "bfloat16"
    with pytest.raises(ValueError, match=r"keeps its own dtype \(bfloat16\)"):
        selfattn.explain(TEXT, model=(model, tokenizer()), dtype="float32")
    assert selfattn.explain(TEXT, model=llama, dtype=torch.float16).doc["model"]["dtype"] == "float16"


@pytest.mark.parametrize("bad", ["float64", "bf16", "", "int8"])
def test_a_dtype_not_offered_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=repr(bad)):
        dtype_name(bad)
    with pytest.raises(ValueError, match=repr(bad)):
        selfattn.explain(TEXT, dtype=bad)
    with pytest.raises(TypeError, match="int"):
        dtype_name(2)
    with pytest.raises(ValueError, match="float64"):
        dtype_name(torch.float64)


def test_the_budget_counts_the_dtypes_bytes():
    gib = 2**30
    seven_b = 7_000_000_000  # 26 GiB in float32, 13 GiB in bfloat16: a 24 GiB machine holds only the second
    available = 30 * gib  # weights may take MEMORY_SHARE (half) of it: 15 GiB
    with pytest.raises(ValueError, match="26.1 GiB as float32"):
        limits.check_parameters(seven_b, "m", available=available)
    limits.check_parameters(seven_b, "m", available=available, dtype="bfloat16")
    limits.check_parameters(seven_b, "m", available=available, dtype="float16")
    assert limits.parameter_budget(available, "bfloat16") == 2 * limits.parameter_budget(available, "float32")
    with pytest.raises(ValueError, match="13.0 GiB as bfloat16"):
        limits.check_parameters(seven_b, "m", available=20 * gib, dtype="bfloat16")


def test_the_cli_takes_dtype_and_refuses_others(llama, capsys):
    assert main(["explain", TEXT, "--model", str(llama), "--dtype", "bfloat16", "--json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["model"]["dtype"] == "bfloat16"
    with pytest.raises(SystemExit) as stop:
        main(["explain", TEXT, "--model", str(llama), "--dtype", "float64"])
    assert stop.value.code != 0 and "float64" in capsys.readouterr().err
