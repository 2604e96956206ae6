"""The library's surface of the hostile campaign: attention and its neighbours under hostile arguments.

The regressions (named cases the campaign once found wrong) are ordinary tests; the random attention calls are a
hypothesis property (as many examples as the "hostile" profile says) and, with the other case tables, marked
`hostile` (run when chosen: tests/adversarial/conftest.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ..tally import Tally, assert_clean
from . import cases, edges


def _clean(name: str, fn, *args) -> None:
    tally = Tally(name)
    fn(tally, *args)
    assert_clean([tally])


@pytest.mark.parametrize(
    "name, fn",
    [
        ("named attention calls", cases.named_attention_cases),
        ("huge finite masks", edges.huge_mask_cases),
        ("DecoderLM caches", edges.cache_cases),
        ("backward Lk=0", edges.backward_empty_cases),
        ("interceptors", edges.interceptor_cases),
        ("sparse, nested, meta", edges.layout_cases),
    ],
)
def test_the_regressions_stay_fixed(name, fn):
    _clean(name, fn)


@pytest.mark.parametrize(
    "name, fn",
    [
        ("tokenizer files", edges.tokenizer_cases),
        ("file permissions", edges.permission_cases),
    ],
)
def test_the_file_regressions_stay_fixed(name, fn, tmp_path):
    _clean(name, fn, tmp_path)


@pytest.mark.hostile
@given(data=st.data(), seed=st.integers(0, 10**6))
def test_random_attention_calls_equal_the_reference_or_are_refused(data, seed):
    tally = Tally("attention (random)")
    cases.attention_case(tally, cases.Drawn(data), seed)
    assert_clean([tally])


@pytest.mark.hostile
@pytest.mark.parametrize(
    "name, fn",
    [
        ("attention_weights", cases.attention_weights_cases),
        ("modules, KVCache", cases.module_cases),
        ("auto and flex", edges.flex_cases),
    ],
)
def test_the_campaign_tables(name, fn):
    _clean(name, fn)


@pytest.mark.hostile
@pytest.mark.parametrize(
    "name, fn",
    [
        ("model folders", cases.model_folder_cases),
        ("transformers folders", edges.transformers_cases),
        ("in a child (hangs, memory, failed saves)", edges.run_children),
    ],
)
def test_the_campaign_folders(name, fn, tmp_path):
    _clean(name, fn, tmp_path)


def test_a_float32_score_that_overflows_is_not_taken_for_a_masked_key():
    """Found by the hypothesis property: a float32 score past −3.4e38 was taken for a masked key (output 0 where
    float64 gives v); `selfattn.functional.check_overflow` refuses it now (tests/test_hostile.py has every backend)."""
    import torch

    import selfattn
    from tests.helpers import make_inputs, reference_of

    q, k, v = make_inputs(1, 1, 1, 1, 1, 1, 1, dtype=torch.float32, seed=0, magnitude=1e20)  # q·k = -4.5e39
    tally = Tally("float32 overflow")
    check = cases._check_attention(
        q, k, v, {"causal": True, "mask": None, "window": None, "scale": None, "softcap": None}, 0.0, nan_inputs=False
    )
    cases.call(tally, "one key, q·k beyond float32", lambda: selfattn.attention(q, k, v, causal=True), check)
    assert reference_of(q, k, v, causal=True)[0].item() == pytest.approx(v.item())  # the spec: the one key's v
    assert_clean([tally])
