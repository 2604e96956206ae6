"""selfattn.detect_head equals TransformerLens' detector on the same string: TransformerLens' tokens (the model's
BOS first where the tokenizer puts none: `to_tokens` with prepend_bos), its three patterns and its
`compute_head_attention_similarity_score`, written out here from TransformerLens' code and run on the eager attention
weights transformers itself gives (`output_attentions=True`) of a tiny Llama and a tiny GPT-2, with and without the
BOS; and refuses and warns where TransformerLens does."""

import warnings

import numpy as np
import pytest
import torch

import selfattn
from tests.tolerances import CLEARLY_APART, TOL

transformers = pytest.importorskip("transformers")

from ...hf import models  # noqa: E402 - needs transformers

PROMPT = "the cat cat sleeps in the house the cat cat sleeps"
"""A token twice in a row (cat cat): TransformerLens' induction pattern then targets the query itself."""
BOS = 2
"""The models' BOS id ([CLS] of the tokenizer's vocabulary)."""
NAMES = ("previous_token_head", "duplicate_token_head", "induction_head")


def bare_tokenizer():
    """The tests' word tokenizer that puts nothing before a text (as GPT-2's and Llama-3's puts no BOS)."""
    from tokenizers import Tokenizer, pre_tokenizers, trainers
    from tokenizers import models as tm

    tok = Tokenizer(tm.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        models.SENTENCES, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", bos_token="[CLS]", sep_token="[SEP]"
    )


def model(kind: str, bos: int | None = BOS):
    m = models.build(kind, "eager")
    m.config.bos_token_id = bos
    return m


# --- TransformerLens, written out from transformer_lens/head_detector.py ---------------------------------------------


def tl_tokens(tok, prompt: str, prepend_bos: bool) -> list[int]:
    ids = tok(prompt)["input_ids"]
    assert BOS not in ids  # the tokenizer puts no BOS: TransformerLens prepends it
    return [BOS, *ids] if prepend_bos else ids


def tl_duplicate(tokens: torch.Tensor) -> torch.Tensor:
    token_pattern = tokens.repeat(tokens.shape[-1], 1).numpy()
    eq_mask = np.equal(token_pattern, token_pattern.T).astype(int)
    np.fill_diagonal(eq_mask, 0)
    return torch.tril(torch.as_tensor(eq_mask).float())


def tl_detection_pattern(name: str, ids: list[int]) -> torch.Tensor:
    tokens = torch.tensor([ids])
    if name == "previous_token_head":
        p = torch.zeros(tokens.shape[-1], tokens.shape[-1])
        p[1:, :-1] = torch.eye(tokens.shape[-1] - 1)
        return torch.tril(p)
    dup = tl_duplicate(tokens)
    if name == "duplicate_token_head":
        return dup
    shifted = torch.roll(dup, shifts=1, dims=1)
    return torch.tril(torch.cat((torch.zeros(dup.shape[0], 1), shifted[:, 1:]), dim=1))


def tl_score(attention: torch.Tensor, detection: torch.Tensor, *, exclude_bos, exclude_current_token, measure) -> float:
    attention = attention.clone()
    if measure == "mul":
        if exclude_bos:
            attention[:, 0] = 0
        if exclude_current_token:
            attention.fill_diagonal_(0)
        return ((attention * detection).sum() / attention.sum()).item()
    abs_diff = (attention - detection).abs()
    assert (abs_diff - torch.tril(abs_diff)).sum() == 0
    size = len(abs_diff)
    if exclude_bos:
        abs_diff[:, 0] = 0
    if exclude_current_token:
        abs_diff.fill_diagonal_(0)
    return 1 - round((abs_diff.mean() * size).item(), 3)


def eager_patterns(kind: str, ids: list[int]) -> list[torch.Tensor]:
    """Per layer the (H, L, L) weights of the eager model: what TransformerLens' cache["pattern", l] holds."""
    with torch.no_grad():
        out = model(kind)(torch.tensor([ids]), output_attentions=True)
    return [a[0].double() for a in out.attentions]


def tl_detect(kind, tok, prompt, name, *, prepend_bos, **kw):
    return tl_detect_ids(kind, tl_tokens(tok, prompt, prepend_bos), name, **kw)


def tl_detect_ids(kind, ids, name, *, exclude_bos=False, exclude_current_token=False, measure="mul"):
    detection = tl_detection_pattern(name, ids).double()
    kw = {"exclude_bos": exclude_bos, "exclude_current_token": exclude_current_token, "measure": measure}
    layers = eager_patterns(kind, ids)
    return np.array([[tl_score(w[h], detection, **kw) for h in range(w.shape[0])] for w in layers])


@pytest.fixture(scope="module")
def tok():
    return bare_tokenizer()


def ours(kind, tok, prompt, pattern, bos=BOS, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning where TransformerLens gives none
        return selfattn.detect_head((model(kind, bos), tok), prompt, pattern, **kw).numpy()


# --- the scores -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("prepend_bos", [None, True, False])
def test_named_heads_equal_transformer_lens_with_and_without_bos(tok, kind, name, prepend_bos):
    with_bos = prepend_bos is not False
    expected = tl_detect(kind, tok, PROMPT, name, prepend_bos=with_bos)
    got = ours(kind, tok, PROMPT, name, prepend_bos=prepend_bos)
    np.testing.assert_allclose(got, expected, atol=TOL["float32_vs_transformers"])
    assert np.ptp(expected) > CLEARLY_APART * TOL["float32_vs_transformers"]  # the heads differ: a swap is seen


@pytest.mark.parametrize("prepend_bos", [None, True, False])
def test_a_tokenizer_that_puts_the_bos_first(prepend_bos):
    """Llama's tokenizer puts its BOS first: TransformerLens adds none, and prepend_bos=False removes it."""
    own = models.tokenizer()  # [CLS] (the models' BOS here) first
    ids = own(PROMPT)["input_ids"]
    assert ids[0] == BOS and BOS not in ids[1:]
    expected = tl_detect_ids("llama", ids if prepend_bos is not False else ids[1:], "induction_head")
    got = ours("llama", own, PROMPT, "induction_head", prepend_bos=prepend_bos)
    np.testing.assert_allclose(got, expected, atol=TOL["float32_vs_transformers"])


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_the_bos_changes_the_scores(tok, kind):
    """The default (the model's BOS first) is TransformerLens' call; without it the same string scores otherwise."""
    with_bos = ours(kind, tok, PROMPT, "previous_token_head")
    without = ours(kind, tok, PROMPT, "previous_token_head", prepend_bos=False)
    assert np.abs(with_bos - without).max() > CLEARLY_APART * TOL["float32_vs_transformers"]


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
@pytest.mark.parametrize("measure", ["mul", "abs"])
@pytest.mark.parametrize(("exclude_bos", "exclude_current_token"), [(True, False), (False, True), (True, True)])
def test_the_options_equal_transformer_lens(tok, kind, measure, exclude_bos, exclude_current_token):
    kw = {"exclude_bos": exclude_bos, "exclude_current_token": exclude_current_token}
    expected = tl_detect(kind, tok, PROMPT, "induction_head", prepend_bos=True, measure=measure, **kw)
    got = ours(kind, tok, PROMPT, "induction_head", error_measure=measure, **kw)
    tol = TOL["transformer_lens_rounding"] if measure == "abs" else TOL["float32_vs_transformers"]
    np.testing.assert_allclose(got, expected, atol=tol)


# --- cache= -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("batched", [False, True])
def test_a_transformer_lens_cache_is_scored_as_transformer_lens_scores_it(tok, batched):
    ids = tl_tokens(tok, PROMPT, True)
    layers = eager_patterns("llama", ids)
    cache = {f"blocks.{l}.attn.hook_pattern": (w[None] if batched else w).float() for l, w in enumerate(layers)}
    expected = tl_detect("llama", tok, PROMPT, "duplicate_token_head", prepend_bos=True)
    other = model("llama")
    with torch.no_grad():  # a model whose own weights are others: the scores are the cache's
        for p in other.parameters():
            p.mul_(0.5)
    got = selfattn.detect_head((other, tok), PROMPT, "duplicate_token_head", cache=cache).numpy()
    np.testing.assert_allclose(got, expected, atol=TOL["float32_vs_transformers"])
    assert torch.equal(cache["blocks.0.attn.hook_pattern"], (layers[0][None] if batched else layers[0]).float())
    by_item = selfattn.detect_head((other, tok), PROMPT, "duplicate_token_head", cache=ItemsOnly(cache)).numpy()
    np.testing.assert_array_equal(by_item, got)


class ItemsOnly:
    """A cache read by item only, as TransformerLens' ActivationCache: a missing name is a KeyError."""

    def __init__(self, d):
        self.d = d

    def __getitem__(self, key):
        return self.d[key]


def test_an_explanation_is_a_cache(tok):
    m = model("gpt2")
    e = selfattn.explain(PROMPT, (m, tok))
    assert e.doc["token_ids"] == tl_tokens(tok, PROMPT, True)  # explain puts the BOS first as the detector does
    got = selfattn.detect_head(m, PROMPT, "induction_head", tokenizer=tok, cache=e).numpy()
    expected = tl_detect("gpt2", tok, PROMPT, "induction_head", prepend_bos=True)
    np.testing.assert_allclose(got, expected, atol=TOL["float32_vs_transformers"])
    with pytest.raises(ValueError, match="other tokens"):
        selfattn.detect_head(m, PROMPT, "induction_head", tokenizer=tok, cache=e, prepend_bos=False)


def test_a_cache_of_another_length_is_refused(tok):
    layers = eager_patterns("llama", tl_tokens(tok, PROMPT, False))  # cut without the BOS
    cache = {f"blocks.{l}.attn.hook_pattern": w for l, w in enumerate(layers)}
    with pytest.raises(ValueError, match="the prompt is 12 tokens"):
        selfattn.detect_head((model("llama"), tok), PROMPT, "induction_head", cache=cache)


# --- what TransformerLens refuses and warns of ------------------------------------------------------------------------


def test_a_pattern_not_lower_triangular_is_refused(tok):
    L = len(tl_tokens(tok, PROMPT, True))
    upper = torch.triu(torch.ones(L, L))
    with pytest.raises(ValueError, match="lower triangular.*query 0, key 1"):
        selfattn.detect_head((model("llama"), tok), PROMPT, upper)


def test_mul_with_values_other_than_0_and_1_warns(tok):
    L = len(tl_tokens(tok, PROMPT, True))
    half = torch.tril(torch.full((L, L), 0.5))
    with pytest.warns(UserWarning, match="values other than 0 or 1"):
        selfattn.detect_head((model("llama"), tok), PROMPT, half)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        selfattn.detect_head((model("llama"), tok), PROMPT, half, error_measure="abs")


def test_a_model_without_bos(tok):
    """No BOS token (Qwen): none is prepended, True is refused, and exclude_bos warns that key 0 is a word."""
    got = ours("llama", tok, PROMPT, "previous_token_head", bos=None)
    expected = tl_detect("llama", tok, PROMPT, "previous_token_head", prepend_bos=False)
    np.testing.assert_allclose(got, expected, atol=TOL["float32_vs_transformers"])
    with pytest.raises(ValueError, match="has no BOS token"):
        selfattn.detect_head((model("llama", None), tok), PROMPT, "previous_token_head", prepend_bos=True)
    with pytest.warns(UserWarning, match="key 0 .* is its first token 'the', not a BOS"):
        selfattn.detect_head((model("llama", None), tok), PROMPT, "previous_token_head", exclude_bos=True)


def test_one_token_is_refused(tok):
    with pytest.raises(ValueError, match="at least 2"):
        selfattn.detect_head((model("llama"), tok), "cat", "previous_token_head", prepend_bos=False)
