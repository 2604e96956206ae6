"""The experiments (taxonomy, ablation, patching, the logit lens) on a tiny random Llama, every number
recomputed on its twin running transformers' own "eager" attention: `output_attentions` for the head
types, plain forward hooks on o_proj and on the decoder layers for ablation and the lens. No selfattn code
on the reference side."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from rich.cells import cell_len

import selfattn.hf
from selfattn.cli import main
from selfattn.explainer import experiments as X
from selfattn.explainer import tracing
from selfattn.explainer.analysis import head_types
from selfattn.explainer.analysis.chance import ALPHA, against_chance
from selfattn.explainer.interventions import Intervention
from selfattn.explainer.session import Explainer
from selfattn.explainer.views import findings
from tests.explainer.documents import checked, explained
from tests.tolerances import TOL

VOCAB = 97
N_LAYERS, N_HEADS, N_KV = 3, 12, 4  # 12 query heads over 4 key/value heads: grouped-query attention
HIDDEN = 48
DV = HIDDEN // N_HEADS
TEXT = "w5 w9 w17 w3 w22 w9 w41 w7"
CORRUPTED = "w5 w9 w17 w3 w22 w30 w41 w7"


@pytest.fixture(scope="module")
def llamas():
    """The same tiny Llama twice: attention by selfattn, and transformers' own eager attention."""
    from transformers import LlamaConfig, LlamaForCausalLM

    selfattn.hf.register()
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=96,
        num_hidden_layers=N_LAYERS,
        num_attention_heads=N_HEADS,
        num_key_value_heads=N_KV,
        max_position_embeddings=128,
    )
    ours = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # peaked attention: a random model's heads then differ from one another
        for layer in ours.model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)
    eager = LlamaForCausalLM(copy.deepcopy(cfg)).eval()
    eager.load_state_dict(ours.state_dict())
    ours.set_attn_implementation("selfattn")
    eager.set_attn_implementation("eager")
    return ours, eager


@pytest.fixture(scope="module")
def ex(llamas):
    """An Explainer over the selfattn twin: words "w0" … "w96" are ids 1 … 96 after a <s> (id 0) it adds."""
    ours, _ = llamas

    def tokenize(text: str):
        words = text.split()
        ids = [0] + [int(w[1:]) if w[:1] == "w" and w[1:].isdigit() and 0 < int(w[1:]) < VOCAB else 0 for w in words]
        return [decode(i) for i in ids], torch.tensor(ids), {"use_cache": False}

    def decode(i: int) -> str:
        return "<s>" if i == 0 else f"w{i}"

    return Explainer.from_functions(ours, tokenize, decode, name="tiny llama", max_len=128)


def ids_of(text: str) -> torch.Tensor:
    return torch.tensor([[0] + [int(w[1:]) for w in text.split()]])


def eager_attentions(eager, ids) -> list[np.ndarray]:
    with torch.no_grad():
        out = eager(ids, output_attentions=True, use_cache=False)
    return [a[0].double().numpy() for a in out.attentions]  # per layer (H, L, L)


def o_proj_inputs(eager, ids) -> tuple[torch.Tensor, list[torch.Tensor]]:
    got = []
    hooks = [
        layer.self_attn.o_proj.register_forward_pre_hook(lambda m, a: got.append(a[0].detach().clone()))
        for layer in eager.model.layers
    ]
    try:
        with torch.no_grad():
            logits = eager(ids, use_cache=False).logits
    finally:
        for h in hooks:
            h.remove()
    return logits, got


def eager_ablated(eager, ids, heads: list[tuple[int, int]], mode: str) -> torch.Tensor:
    """Logits with each (layer, head)'s slice of the o_proj input replaced by 0 or its clean mean over positions."""
    _, clean = o_proj_inputs(eager, ids)
    hooks = []
    for layer in {l for l, _ in heads}:
        mine = [h for l, h in heads if l == layer]

        def swap(m, a, layer=layer, mine=mine):
            x = a[0].clone()
            for h in mine:
                part = slice(h * DV, (h + 1) * DV)
                x[..., part] = 0 if mode == "zero" else clean[layer][..., part].mean(dim=1, keepdim=True)
            return (x,)

        hooks.append(eager.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(swap))
    try:
        with torch.no_grad():
            return eager(ids, use_cache=False).logits
    finally:
        for h in hooks:
            h.remove()


# --- taxonomy -----------------------------------------------------------------------------------------


def test_probe_is_the_tokenizers_frame_around_random_tokens_twice(ex):
    assert X.frame(ex) == ([0], [])
    ids = X.probe_ids(ex, 20, seed=3)
    r = ids[1:21]
    assert ids[0] == 0 and len(ids) == 41 and ids[21:] == r and len(set(r)) == 20 and 0 not in r
    assert X.probe_ids(ex, 20, seed=3) == ids and X.probe_ids(ex, 20, seed=4) != ids


def test_taxonomy_scores_equal_plain_output_attentions(ex, llamas):
    _, eager = llamas
    t = X.taxonomy(ex, TEXT, length=20)
    ids = t["probe"]["ids"]
    att = eager_attentions(eager, torch.tensor([ids]))
    n = t["probe"]["length"]
    assert n == 20
    for l in range(N_LAYERS):
        for h in range(N_HEADS):
            w = att[l][h]
            second = range(1 + n, 1 + 2 * n)  # the second copy: token at i occurred at i − n; what followed: i − n + 1
            induction = np.mean([w[i, i - n + 1] for i in second])
            chance = np.mean([1 / (i + 1) for i in second])
            previous = np.mean([w[i, i - 1] for i in range(1, len(ids))])
            m = t["heads"][l][h]["probe"]
            assert m["induction"]["score"] == pytest.approx(induction, abs=TOL["float32_weight_mean"])
            assert m["induction"]["chance"] == pytest.approx(chance, abs=TOL["float64"])
            assert m["previous"]["score"] == pytest.approx(previous, abs=TOL["float32_weight_mean"])
            # the permutation test on the eager weights: the targets built here, row by row
            targets = np.zeros((n, len(ids)), dtype=bool)
            targets[np.arange(n), [i - n + 1 for i in second]] = True
            seen = np.tril(np.ones((len(ids), len(ids)), dtype=bool))[list(second)]
            ev = against_chance(w[list(second)], targets, seen)
            assert m["induction"]["p"] == pytest.approx(
                ev.p, rel=TOL["p_value_same_weights_rel"], abs=TOL["p_value_floor"]
            )
            credited = (
                n >= head_types.MIN_ROWS
                and ev.p < ALPHA
                and induction >= head_types.CREDIT_MIN
                and (induction >= 2 * chance or 1 - induction <= (1 - chance) / 2)
            )
            assert m["induction"]["credited"] == credited
            cell = t["heads"][l][h]
            names = [e["type"] for e in cell["types"]]
            assert cell["type"] == (names[0] if names else None)
            lifts = [e["score"] / e["chance"] for e in cell["types"]]
            assert lifts == sorted(lifts, reverse=True)
    assert any(c["type"] for row in t["heads"] for c in row)  # the peaked random model has typed heads
    assert t["findings"]["zh"][0].startswith(f"{N_LAYERS * N_HEADS} 个 head：")
    assert t["findings"]["en"][0].startswith(f"{N_LAYERS * N_HEADS} heads: ")


def test_heads_command_prints_every_head_within_80_columns(ex, monkeypatch, capsys):
    monkeypatch.setattr(Explainer, "load", classmethod(lambda cls, path=None, dtype=None: ex))
    assert main(["heads", "--json", "--probe-length", "20"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == json.loads(json.dumps(X.taxonomy(ex, length=20), ensure_ascii=False))
    for lang in ("zh", "en"):
        assert main(["heads", "--probe-length", "20", "--lang", lang]) == 0
        out = capsys.readouterr().out
        assert max(cell_len(line) for line in out.splitlines()) <= 80
        for h in range(N_HEADS):  # the heads split into blocks, none dropped
            assert f"H{h}" in out
        assert doc["findings"][lang][0] in " ".join(out.split())


# --- ablation -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mean", [False, True])
@pytest.mark.parametrize("head", [5, None])  # one head of a grouped-query layer; the whole layer
def test_ablate_entry_equals_plain_hooks(ex, llamas, mean, head):
    _, eager = llamas
    trace = tracing.trace(ex, TEXT, Intervention({"ablate": {"mean": mean}}, layer=1, head=head))
    heads = [(1, head)] if head is not None else [(1, h) for h in range(N_HEADS)]
    want = eager_ablated(eager, ids_of(TEXT), heads, "mean" if mean else "zero")[0]
    torch.testing.assert_close(trace.logits, want, atol=TOL["float32_logits"], rtol=0)
    base = tracing.trace(ex, TEXT)
    assert not torch.allclose(trace.logits, base.logits, atol=TOL["must_differ_logits"])
    for h in range(N_HEADS):  # an ablated head still looks where it looked
        torch.testing.assert_close(trace.layers[1].stages(h)["weights"], base.layers[1].stages(h)["weights"])


def test_ablation_equals_plain_hooks_and_the_registry(ex, llamas):
    _, eager = llamas
    got = X.ablation(ex, TEXT, "1.5,2.0", "mean")
    want = eager_ablated(eager, ids_of(TEXT), [(1, 5), (2, 0)], "mean")[0]
    clean = o_proj_inputs(eager, ids_of(TEXT))[0][0]
    p, q = clean[-1].double().softmax(-1), want[-1].double().softmax(-1)
    assert got["kl_bits"] == pytest.approx(float((p * (p.log() - q.log())).sum() / np.log(2)), abs=TOL["float32_loss"])
    loss = torch.nn.functional.cross_entropy(want[:-1].double(), ids_of(TEXT)[0, 1:])
    assert got["after"]["loss"] == pytest.approx(float(loss), abs=TOL["float32_loss"])
    assert got["after"]["top"][0]["id"] == int(want[-1].argmax())
    assert got["target"]["after"] == pytest.approx(float(q[got["target"]["id"]]), abs=TOL["float32_probability"])
    for lang in ("zh", "en"):
        assert "L1H5" in got["text"][lang] and "L2H0" in got["text"][lang]
        assert f"{got['kl_bits']:.3f}" in got["text"][lang] and f"{got['after']['loss']:.3f}" in got["text"][lang]
    # one head: the registry's entry (the page's and the server's way) gives the same numbers
    one = X.ablation(ex, TEXT, [(1, 5)], "mean")
    doc = explained(ex, TEXT, layer=1, head=5, intervention=Intervention({"ablate": {"mean": True}}, layer=1, head=5))
    assert doc["prediction"][0]["prob"] == pytest.approx(one["after"]["top"][0]["prob"], abs=TOL["float32_same_model"])
    assert doc["experiment"]["kl_bits"] == pytest.approx(one["kl_bits"], abs=TOL["float32_same_model"])
    assert doc["experiment"]["loss"] == pytest.approx(
        [one["before"]["loss"], one["after"]["loss"]], abs=TOL["float32_same_model"]
    )
    assert "weights stay as they were" in doc["experiment"]["text"]["en"]


def test_bad_ablations_are_named(ex):
    with pytest.raises(ValueError, match=r"layer must be in \[0, 2\], got 7 \(head 7.0\)"):
        X.ablation(ex, TEXT, "7.0")
    with pytest.raises(ValueError, match=r"head must be in \[0, 11\], got 12"):
        X.ablation(ex, TEXT, [(0, 12)])
    with pytest.raises(ValueError, match="LAYER.HEAD"):
        X.parse_heads("1,2")
    with pytest.raises(ValueError, match="given twice"):
        X.parse_heads("1.2,1.2")
    with pytest.raises(ValueError, match="ablation mode"):
        X.ablation(ex, TEXT, "1.1", "half")


# --- patching -----------------------------------------------------------------------------------------


def test_patching_names_heads_that_plain_hooks_confirm(ex, llamas):
    _, eager = llamas
    p = X.patching(ex, TEXT, CORRUPTED)
    clean_logits, clean_in = o_proj_inputs(eager, ids_of(TEXT))
    corr_logits, _ = o_proj_inputs(eager, ids_of(CORRUPTED))
    assert p["target"]["id"] == int(clean_logits[0, -1].argmax()) and p["foil"]["id"] == int(
        corr_logits[0, -1].argmax()
    )
    t, f = p["target"]["id"], p["foil"]["id"]
    ld = [float(x[0, -1, t] - x[0, -1, f]) for x in (clean_logits, corr_logits)]
    assert (p["clean_ld"], p["corrupted_ld"]) == pytest.approx(ld, abs=TOL["float32_logits"])
    assert p["differ"] == [6] and len(p["heads"]) == N_LAYERS and len(p["residual"][0]) == 9
    assert p["top_heads"] and all(x["recovered"] >= findings.NAMED_MIN for x in p["top_heads"])
    for x in p["top_heads"]:
        l, h = x["layer"], x["head"]

        def swap(m, a, h=h, l=l):
            y = a[0].clone()
            y[..., h * DV : (h + 1) * DV] = clean_in[l][..., h * DV : (h + 1) * DV]
            return (y,)

        hook = eager.model.layers[l].self_attn.o_proj.register_forward_pre_hook(swap)
        try:
            with torch.no_grad():
                out = eager(ids_of(CORRUPTED), use_cache=False).logits
        finally:
            hook.remove()
        share = (float(out[0, -1, t] - out[0, -1, f]) - ld[1]) / (ld[0] - ld[1])
        assert x["recovered"] == pytest.approx(share, abs=TOL["float32_logit_ratio"])
        for lang in ("zh", "en"):
            assert f"L{l}H{h} {round(100 * share)}%" in p["text"][lang]


def test_patching_says_when_each_long_step_starts_and_ends(ex):
    from selfattn.kernels.notice import notices

    heard = []
    with notices(heard.append):
        X.patching(ex, TEXT, CORRUPTED)
    steps = [(n.source, n.stage, n.what) for n in heard]
    heads = f"patching each of {N_LAYERS * ex.shape()[1]} heads from the clean run (9 tokens)"
    residual = "patching each layer's residual at each of 9 positions"
    assert steps == [
        ("patching", "start", heads),
        ("patching", "done", heads),
        ("patching", "start", residual),
        ("patching", "done", residual),
    ]
    assert all(n.seconds >= 0 for n in heard if n.stage == "done")


def test_patching_refusals_are_named(ex):
    with pytest.raises(ValueError, match=r"same token length: the clean text has 9 tokens .*, the corrupted text 8"):
        X.patching(ex, TEXT, "w5 w9 w17 w3 w22 w9 w41")
    with pytest.raises(ValueError, match="the target and the foil are the same token 'w3'"):
        X.patching(ex, TEXT, CORRUPTED, target="w3", foil="w3")
    with pytest.raises(ValueError, match=r"'w3 w4' is 2 tokens \('w3' / 'w4'\), not one"):
        X.patching(ex, TEXT, CORRUPTED, target="w3 w4", foil="w5")


# --- the logit lens -------------------------------------------------------------------------------------


def test_lens_equals_the_norm_and_unembedding_of_each_layer_output(ex, llamas):
    _, eager = llamas
    got = X.logit_lens(ex, TEXT, position=4, top_k=3)
    outs = []
    hooks = [
        layer.register_forward_hook(lambda m, a, o: outs.append(o[0] if isinstance(o, tuple) else o))
        for layer in eager.model.layers
    ]
    try:
        with torch.no_grad():
            final = eager(ids_of(TEXT), use_cache=False).logits
    finally:
        for h in hooks:
            h.remove()
    for l, row in enumerate(got["layers"]):
        with torch.no_grad():
            probs = eager.lm_head(eager.model.norm(outs[l][0, 4])).double().softmax(-1)
        top = probs.topk(3)
        assert [e["id"] for e in row["top"]] == top.indices.tolist()
        assert [e["prob"] for e in row["top"]] == pytest.approx(
            top.values.tolist(), abs=TOL["float32_lens_probability"]
        )
    assert got["layers"][-1]["top"][0]["id"] == int(final[0, 4].argmax())
    assert got["token"] == "w3" and got["position"] == 4
    with pytest.raises(ValueError, match=r"position must be in \[0, 8\]"):
        X.logit_lens(ex, TEXT, position=9)


# --- the CLI -------------------------------------------------------------------------------------------


@pytest.fixture
def cli(ex, monkeypatch):
    monkeypatch.setattr(Explainer, "load", classmethod(lambda cls, path=None, dtype=None: ex))


def test_explain_json_carries_each_experiment(cli, ex, capsys):
    args = ["explain", TEXT, "--ablate", "1.5", "--ablate-mode", "mean", "--patch", CORRUPTED, "--logit-lens"]
    assert main([*args, "--position", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    same = json.loads(
        json.dumps(
            {
                "ablation": X.ablation(ex, TEXT, "1.5", "mean"),
                "patching": X.patching(ex, TEXT, CORRUPTED),
                "lens": X.logit_lens(ex, TEXT, position=3),
            },
            ensure_ascii=False,
        )
    )
    for name, want in same.items():
        assert doc[name] == want, name
    assert (doc["selected"]["layer"], doc["selected"]["head"], doc["selected"]["rule"]) == (1, 5, "ablated")


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_explain_experiments_fit_80_columns(cli, capsys, tmp_path, lang):
    pics = tmp_path / "pics"
    args = ["explain", TEXT, "--ablate", "1.5,0.2", "--patch", CORRUPTED, "--logit-lens", "--lang", lang]
    assert main([*args, "--plots", str(pics)]) == 0
    out = capsys.readouterr().out
    assert max(cell_len(line) for line in out.splitlines()) <= 80
    flat = " ".join(out.split())
    for h in range(N_HEADS):
        assert f"H{h}" in out
    assert (
        ("激活修补" in flat and "逻辑透镜" in flat and "消融" in flat)
        if lang == "zh"
        else ("Activation patching" in flat)
    )
    png = (pics / "patching.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000 and "<svg" in (pics / "patching.svg").read_text()


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["--target", "w3"], 2, "--target goes with --patch or --ablate; give one too"),
        (["--foil", "w3"], 2, "--foil goes with --patch or --ablate"),
        (["--reference", "refs.txt"], 2, "--reference goes with --ablate; give --ablate too"),
        (["--position", "2"], 2, "--position goes with --logit-lens"),
        (["--ablate-mode", "mean"], 2, "--ablate-mode goes with --ablate"),
        (["--ablate", "1"], 2, "argument --ablate: a head is LAYER.HEAD, counted from 0 (e.g. 3.1), got '1'"),
        (["--ablate", "9.0"], 1, "layer must be in [0, 2], got 9"),
        (["--patch", "w1 w2"], 1, "patching needs a clean and a corrupted text of the same token length"),
        (["--logit-lens", "--position", "40"], 1, "position must be in [0, 8]"),
        (["--only-head", "2"], 2, "--only-head limit an intervention to one layer / head; give one too"),
    ],
)
def test_experiment_flags_are_refused_in_one_line(cli, capsys, args, code, message):
    try:
        got = main(["explain", TEXT, *args])
    except SystemExit as exc:
        got = exc.code
    err = capsys.readouterr().err
    assert got == code and message in err and len(err.strip().splitlines()) == 1, err


def test_a_limited_intervention_shows_the_head_it_changed(cli, capsys):
    assert main(["explain", TEXT, "--no-causal", "--only-layer", "2", "--only-head", "7", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["selected"]["layer"], doc["selected"]["head"], doc["selected"]["rule"]) == (2, 7, "intervened")
    assert doc["experiment"]["layer"] == 2 and doc["experiment"]["head"] == 7 and doc["experiment"]["same_x"]
    assert main(["explain", TEXT, "--temperature", "3", "--only-head", "7"]) == 0
    out = capsys.readouterr().out
    assert "只在 head 7" in out and "（干预作用的 head）" not in out  # a head limit alone: the layer is picked


def test_the_server_takes_the_ablate_entry_from_the_registry(ex):
    """POST /api/explain accepts {"interventions": {"ablate": {"mean": true}, "layer": L, "head": H}} (its body
    is generated from the registry) and answers what the library answers."""
    from fastapi.testclient import TestClient

    from selfattn.explainer.web import server

    client = TestClient(server.create_app(ex))
    body = {"text": TEXT, "interventions": {"ablate": {"mean": True}, "layer": 1, "head": 5}, "layer": 1, "head": 5}
    r = client.post("/api/explain", json=body)
    assert r.status_code == 200, r.text
    got = r.json()
    iv = Intervention({"ablate": {"mean": True}}, layer=1, head=5)
    want = checked(ex, TEXT, layer=1, head=5, intervention=iv)  # what `selfattn explain --json` prints
    assert got["prediction"] == want["prediction"] and got["experiment"] == want["experiment"]
    assert got["experiment"]["applied"] == {"ablate": {"mean": True}, "layer": 1, "head": 5}
    bad = client.post("/api/explain", json={"text": TEXT, "interventions": {"ablate": {"mean": 1}}})
    assert bad.status_code == 422 and "interventions.ablate.mean" in bad.json()["detail"]
