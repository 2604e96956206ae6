"""The HTML report as a file: self-contained, lossless data, no way for a token to become markup.

What the page *shows* is checked in a real browser (test_browser.py); here, what it *holds*.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess

import numpy as np
import pytest
import torch

from selfattn.explainer import tracing
from selfattn.explainer.interventions import REGISTRY, Intervention
from selfattn.explainer.views import bundle, controls, export, packing, report, tables
from selfattn.explainer.views.texts import TEXTS, text
from selfattn.limits import TEMPERATURE_RANGE
from tests.explainer import truth
from tests.explainer.documents import both, explained, explanation
from tests.explainer.tiny import slash_explainer, tiny_explainer
from tests.tolerances import TOL

EVIL = "</script><script>window.__pwned=1</script>"
TEXT = "一只蓝色怪兽走进森林"


@pytest.fixture(scope="module")
def pair():
    return both(tiny_explainer(), TEXT)


@pytest.fixture(scope="module")
def doc(pair):
    return pair[1]


def embedded(page: str) -> dict:
    """The JSON data block of a rendered page, parsed."""
    m = re.search(r'<script type="application/json" id="selfattn-data">(.*?)</script>', page, re.S)
    assert m, "no data block in the page"
    return json.loads(m.group(1))


def inline(page: str, tag: str) -> str:
    m = re.search(rf"<{tag}>(.*?)</{tag}>", page, re.S)
    assert m, f"no inline <{tag}> in the page"
    return m.group(1)


def _top_dimensions(vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row the k dimensions of largest |value| (the lower first among equals) and their values: torch's sort,
    not the package's."""
    t = torch.from_numpy(vectors)
    dims = torch.sort(-t.abs(), dim=-1, stable=True).indices[:, :k]
    return dims.numpy(), torch.gather(t, -1, dims).numpy()


def test_pack_keeps_every_array_at_the_precision_the_page_shows_it(pair):
    e, doc = pair
    shown = doc["selected"]["layer"]
    assert doc["full_layers"] == [shown] and doc["vector_top"] == tables.TOP_DIMENSIONS
    assert "omitted" not in doc and not any(layer.get("omitted") for layer in doc["layers"])  # every layer held
    for l, layer in enumerate(e.trace.layers):
        page = doc["layers"][l]
        for name in ("x", "attn_out", "output"):  # each row's length from the exact vector, to 4 decimals
            exact = getattr(layer, name).double().numpy()  # the page rounds each value as float64
            norms = report.unpack(page["norms"][name])
            np.testing.assert_array_equal(norms, np.round(np.sqrt((exact**2).sum(-1)), 4))
            if l == shown:  # held in full: every value, to the 4 decimals shown
                np.testing.assert_array_equal(report.unpack(page[name]), np.round(exact, 4))
                assert "top" not in page
            else:  # the others: the terminal's top dimensions of each row, to 4 decimals
                assert name not in page
                dims, values = _top_dimensions(exact, tables.TOP_DIMENSIONS)
                np.testing.assert_array_equal(report.unpack(page["top"][name]["dims"]), dims)
                np.testing.assert_array_equal(report.unpack(page["top"][name]["values"]), np.round(values, 4))
        np.testing.assert_array_equal(report.unpack(page["visible"]), layer.visible.bool().numpy())
        for h in range(layer.n_heads):
            kv = layer.kv_head(h)
            for name, values in (("q", layer.q[h]), ("k", layer.k[kv]), ("v", layer.v[kv])):  # float16: as shown
                got = report.unpack(page["heads"][h][name])
                want = values.double().numpy().astype(np.float16).astype(np.float64)
                np.testing.assert_array_equal(got, want, err_msg=f"layer {l} head {h} {name}")
                assert page["heads"][h][name]["dtype"] == "f16"
            np.testing.assert_array_equal(report.unpack(page["heads"][h]["lse"]), layer.lse[h].double().numpy())
    assert doc["layers"][0]["heads"][0]["lse"]["dtype"] == "f32"  # a float32 capture's lse goes as float32


def test_every_layer_asked_holds_its_vectors_in_full():
    ex = tiny_explainer()
    e, doc = both(ex, TEXT, layers=[0, 1], layer=1, head=0)
    assert doc["full_layers"] == [0, 1]
    for l, layer in enumerate(e.trace.layers):
        assert "top" not in doc["layers"][l]
        want = np.round(layer.x.double().numpy(), 4)  # each value rounded as float64, as the page does
        np.testing.assert_array_equal(report.unpack(doc["layers"][l]["x"]), want)
    one = explained(ex, TEXT, layers="selected", layer=1, head=0)
    assert one["full_layers"] == [1] and one["layers"][0]["omitted"]


def test_heads_that_share_a_key_value_head_carry_its_k_and_v_once():
    e, doc = both(tiny_explainer(n_heads=4, n_kv_heads=2), TEXT)
    for l, layer in enumerate(e.trace.layers):
        heads = doc["layers"][l]["heads"]
        first: dict[int, int] = {}
        for h in range(layer.n_heads):
            kv = layer.kv_head(h)
            assert heads[h]["kv_head"] == kv
            owner = first.setdefault(kv, h)
            for name, values in (("k", layer.k[kv]), ("v", layer.v[kv])):
                if owner == h:
                    got = report.unpack(heads[h][name])
                else:  # a reference to the first head of its kv head, whose arrays are this head's
                    assert heads[h][name] == {"of_head": owner}, (l, h, name)
                    got = report.unpack(heads[owner][name])
                want = values.double().numpy().astype(np.float16).astype(np.float64)
                np.testing.assert_array_equal(got, want, err_msg=f"layer {l} head {h} {name}")
        assert sorted(first) == [0, 1] and len(heads) == 4


def test_the_page_estimate_counts_vectors_that_go_as_float64():
    ex = tiny_explainer()
    layer = tracing.trace(ex, TEXT).layers[0]
    before, estimated = packing.packed_bytes(packing.pack_layer(layer, full=True)[0]), export.layer_page_bytes(layer)
    for name in ("x", "attn_out", "output"):  # beyond int32 at 4 decimals: 8 bytes a value, not 4
        setattr(layer, name, getattr(layer, name) * 1e6)
    packed = packing.pack_layer(layer, full=True)[0]
    assert all(packed[name]["dtype"] == "f64" for name in ("x", "attn_out", "output"))
    grown = packing.packed_bytes(packed) - before
    assert export.layer_page_bytes(layer) - estimated >= grown > 0  # the bound grows with what the page holds
    assert packing.packed_bytes(packed) <= export.layer_page_bytes(layer)


def test_pack_keeps_float64_and_infinities_exactly():
    layer = tracing.trace(tiny_explainer(), TEXT).layers[0]
    lse = layer.lse.double()
    lse[0, 1] = 0.1  # not a float32 value: the array goes as float64
    lse[0, 0] = -np.inf  # a row that may look at nothing
    x = layer.x.double()
    x[0, 0] = 3e5  # beyond 2^31 at 4 decimals: the vector goes as float64
    layer.lse, layer.x = lse, x
    packed = packing.pack_layer(layer, full=True)[0]
    assert packed["heads"][0]["lse"]["dtype"] == "f64"
    assert report.unpack(packed["heads"][0]["lse"])[1] == 0.1
    assert packed["x"]["dtype"] == "f64" and report.unpack(packed["x"])[0, 0] == 3e5
    assert report.unpack(packed["heads"][0]["lse"])[0] == -np.inf


def test_a_page_refuses_what_is_not_a_pages_document(doc):
    with pytest.raises(ValueError, match="layers"):
        report.render_html({k: v for k, v in doc.items() if k != "layers"})
    with pytest.raises(TypeError, match="page's document"):
        report.render_html([doc])
    with pytest.raises(ValueError, match="scale_words"):  # the --json document is not a page's
        report.render_html(export.document(explanation(tiny_explainer(), TEXT), layers=[], display=False))


def test_page_embeds_the_doc_and_nothing_from_outside(doc):
    page = report.render_html(doc)
    data = embedded(page)
    assert data["mode"] == "report"
    assert data["doc"] == json.loads(json.dumps(doc))
    # no address of anything anywhere: no CDN, no font link, no external script or image. The one URL-shaped
    # string is the SVG namespace name of createElementNS (the head view's lines): a name, never fetched.
    named = page.replace('"http://www.w3.org/2000/svg"', '"svg-namespace"')
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", named, re.I), "an external URL is in the page"
    assert not re.search(r"<(link|img|iframe|object|embed)\b(?![^>]*href=\"data:,\")", page), "an external resource"
    assert "WenQuanYi Micro Hei" in inline(page, "style")


def test_policy_allows_only_the_inline_script_and_style(doc):
    page = report.render_html(doc)
    m = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    policy = m.group(1).replace("&#x27;", "'")
    script, style = inline(page, "script"), inline(page, "style")
    sha = lambda text: base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()  # noqa: E731
    assert f"script-src 'sha256-{sha(script)}'" in policy
    assert f"style-src 'sha256-{sha(style)}'" in policy
    assert "connect-src 'none'" in policy and "default-src 'none'" in policy
    assert policy == report.policy(live=False)


def test_token_text_cannot_close_the_data_script():
    ex = slash_explainer()
    doc = explained(ex, f"一只 / {EVIL} / <img src=x onerror=alert(1)> / 森林")
    page = report.render_html(doc)
    assert page.count("<script") == 2  # the data block and the explorer, nothing injected
    assert "</script><script>window" not in page and "<img src=x" not in page
    assert embedded(page)["doc"]["tokens"] == ["<bos>", "一只", EVIL, "<img src=x onerror=alert(1)>", "森林"]
    assert "&lt;/script&gt;" in page.split("<title>")[1].split("</title>")[0]


def test_slots_are_filled_once(doc):
    """A token that looks like a template slot stays a token."""
    ex = slash_explainer()
    page = report.render_html(explained(ex, "一只 / {{SCRIPT}} / {{DATA}}"))
    assert embedded(page)["doc"]["tokens"][2:4] == ["{{SCRIPT}}", "{{DATA}}"]
    assert page.count("selfattn explorer: one page for the HTML report") == 1


def test_write_html_refuses_to_overwrite(doc, tmp_path):
    path = tmp_path / "report.html"
    assert report.write_html(doc, path) == path
    first = path.read_text(encoding="utf-8")
    assert first.startswith("<!DOCTYPE html>")
    with pytest.raises(FileExistsError, match=re.escape(str(path))):
        report.write_html(doc, path)
    assert path.read_text(encoding="utf-8") == first
    other = explained(tiny_explainer(), "两条红色鱼游进大海")
    report.write_html(other, path, force=True)
    assert embedded(path.read_text(encoding="utf-8"))["doc"]["text"] == "两条红色鱼游进大海"


def test_live_page_may_talk_only_to_its_server(doc):
    page = report.render_app(doc, max_chars=4000, max_tokens=1024, error="too long")
    data = embedded(page)
    assert data["mode"] == "live" and data["limits"] == {"max_chars": 4000, "max_tokens": 1024}
    assert data["error"] == "too long" and data["api"] == "/api/explain"
    assert "connect-src 'self'" in report.policy(live=True)
    assert inline(page, "script") == report.script()  # the same modules, bundled once


def test_write_html_and_pictures_are_atomic(doc, tmp_path, monkeypatch):
    e = explanation(tiny_explainer(), TEXT)
    from selfattn.explainer.views import plots

    target = tmp_path / "report.html"
    target.write_text("old", encoding="utf-8")

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("selfattn.files.os.replace", broken)
    with pytest.raises(OSError, match="disk full"):
        report.write_html(doc, target, force=True)
    with pytest.raises(OSError, match="disk full"):
        plots.save(e, tmp_path / "pics", formats=("png",))
    assert target.read_text(encoding="utf-8") == "old"  # the old file, whole; no temp file left
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["report.html"]


# --- what the page reads: every number computed by Python (views/packing.py) -----------------


def test_pack_ships_the_stages_the_page_shows(doc):
    """Every stage of every head, against selfattn.reference on the model's own weights (float64)."""
    ex = tiny_explainer()
    _, ids, _ = ex.tokenize(TEXT)
    L = len(doc["tokens"])
    for l, layer in enumerate(doc["layers"]):
        for h, head in enumerate(layer["heads"]):
            ref = truth.stages(ex.model, ids, l, h)
            keys = report.unpack(head["keys"])
            assert keys.shape == (L, L) and (keys == np.arange(L)).all()  # a short text: every key, every row
            np.testing.assert_allclose(report.unpack(head["weights"]), ref["weights"], rtol=0, atol=TOL["page_weight"])
            assert head["weights"]["digits"] == 4 and head["weights"]["dtype"] == "u16"  # 0.01 %: what is shown
            scores, scaled, masked = report.unpack(head["key_stages"]).transpose(0, 2, 1)  # (3, K, L) → per row
            np.testing.assert_allclose(scores, ref["scores"], rtol=0, atol=TOL["page_number"])
            np.testing.assert_allclose(scaled, ref["scaled"], rtol=0, atol=TOL["page_number"])
            hidden = np.isinf(ref["masked"])
            assert (masked[hidden] == -np.inf).all() and np.isfinite(masked[~hidden]).all()
            np.testing.assert_allclose(masked[~hidden], ref["masked"][~hidden], rtol=0, atol=TOL["page_number"])
            assert "key_weights" not in head  # every weight is in `weights`, as shown
            np.testing.assert_allclose(report.unpack(head["weighted"]), ref["weighted"], atol=TOL["page_number"])
            np.testing.assert_array_equal(report.unpack(head["sums"]), 1.0)  # 100.00 %, as shown


def test_a_long_row_ships_its_top_keys_the_first_token_and_itself():
    """Beyond SHOWN_ALL tokens each row keeps TOP_KEYS keys by weight (ties: the lower position) plus key 0
    and itself, checked against weights NumPy computes from the trace's own q, k (a softmax, not the lse)."""
    ex = tiny_explainer()
    text = "一只蓝色怪兽走进森林" * 20  # 101 tokens
    e, doc = both(ex, text, layer=0, head=1, layers=[0])
    head = doc["layers"][0]["heads"][1]
    layer = e.trace.layers[0]
    q, k = (t.double().numpy() for t in (layer.q[1], layer.k[layer.kv_head(1)]))  # the page computes in float64
    visible = layer.visible.bool().numpy()
    logits = np.where(visible, q @ k.T * layer.scale, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    L = len(doc["tokens"])
    assert L > packing.SHOWN_ALL
    keys = report.unpack(head["keys"])
    assert keys.shape == (L, packing.TOP_KEYS + 2)
    for i in range(L):
        want = sorted(set(np.argsort(-weights[i], kind="stable")[: packing.TOP_KEYS].tolist()) | {0, i})
        got = keys[i][keys[i] < 2**16 - 1].tolist()
        assert got == want, f"row {i}"
    scores = report.unpack(head["key_stages"])[0].T  # (K, L): slot-major → per row (L, K)
    stored = np.take_along_axis(q @ k.T, np.minimum(keys, L - 1), axis=1)
    np.testing.assert_allclose(scores[keys < L], stored[keys < L], rtol=0, atol=TOL["rounded_to_4_decimals"])


def test_page_data_carries_texts_controls_and_the_applied_interventions(doc):
    data = embedded(report.render_html(doc))
    assert data["texts"] == report.page_texts() and set(data["texts"]) <= set(report.TEXTS)
    assert [iv["name"] for iv in data["interventions"]] == list(REGISTRY)  # the registry, as data
    for iv in data["interventions"]:  # contract 3
        assert {"name", "label", "params", "needs_baseline", "neutral"} <= set(iv) and set(iv["label"]) == {"zh", "en"}
        for p in iv["params"]:
            assert set(p) == {"name", "type", "min", "max", "default", "label"} and set(p["label"]) == {"zh", "en"}
    (temperature,) = next(iv for iv in data["interventions"] if iv["name"] == "temperature")["params"]
    assert (temperature["min"], temperature["max"], temperature["default"]) == (*TEMPERATURE_RANGE, 1.0)
    assert data["doc"]["experiment"]["applied"] == {"layer": None, "head": None}  # nothing applied
    assert data["doc"]["scale_words"]["how"] == {"zh": "1/√16", "en": "1/√16"}
    assert data["doc"]["shown_keys"] == {"all_up_to": packing.SHOWN_ALL, "top": packing.TOP_KEYS}


def test_scale_words_follow_the_intervention():
    words = controls.scale_words(Intervention(scaling=False, temperature=0.37).as_applied(), 24)
    assert words["how"]["en"] == "1/T, T = 0.37 (no ÷√d_k)" and words["stage"]["zh"] == "不除以 √d_k"
    assert controls.scale_words(Intervention(temperature=2.0).as_applied(), 24)["how"]["zh"] == "1/(√24·T)，T = 2"


# --- the words: one table, the page holds none ------------------------------------------------


def test_texts_have_both_languages_and_only_name_placeholders():
    for key, entry in TEXTS.items():
        assert set(entry) == {"zh", "en"}, key
        for lang, s in entry.items():
            assert re.sub(r"\{\w+\}", "", s).count("{") == 0 and "}" not in re.sub(r"\{\w+\}", "", s), (key, lang)
        assert sorted(re.findall(r"\{(\w+)\}", entry["zh"])) == sorted(re.findall(r"\{(\w+)\}", entry["en"])), key
    assert text("page.search_row", "en", layer=0, head=1, weight="42.00%") == "layer 0 · head 1: 42.00%"
    with pytest.raises(KeyError, match="nosuchkey"):
        text("nosuchkey", "zh")
    with pytest.raises(ValueError, match="'fr'"):
        text("page.title", "fr")


def test_every_text_the_page_names_is_shipped():
    script = report.script()
    template = report.template(report.PAGE)
    named = set(re.findall(r'\bt\("([\w.]+)"', script)) | set(re.findall(r'\btext: "([\w.]+)"', script))
    named |= set(re.findall(r'data-i18n="([\w.]+)"', template))
    assert named and named <= set(report.page_texts()), named - set(report.page_texts())


JS_LITERAL = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|`(?:[^`\\]|\\.)*`')


def js_code(js: str) -> str:
    """The script without its comments (string literals kept whole)."""
    out, i = [], 0
    while i < len(js):
        if js.startswith("/*", i):
            i = js.index("*/", i) + 2
        elif js.startswith("//", i):
            i = js.find("\n", i) if "\n" in js[i:] else len(js)
        elif m := JS_LITERAL.match(js, i):
            out.append(m.group(0))
            i = m.end()
        else:
            out.append(js[i])
            i += 1
    return "".join(out)


def sentences(js: str) -> list[str]:
    """String literals of a script that hold words: a CJK character, or three lower-case words in a row."""
    found = []
    for m in JS_LITERAL.finditer(js_code(js)):
        s = re.sub(r"\$\{[^}]*\}", " ", m.group(0)[1:-1])
        if re.search(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]", s) or re.search(
            r"\b[a-z]{2,}(?:[ ,;:]+[a-z]{2,}){2}", s
        ):
            found.append(s)
    return found


def test_the_page_holds_no_sentence():
    assert sentences(report.script()) == []
    # the check finds what the page used to hold
    assert sentences('const T = { zh: { busy: "计算中…" }, en: { busy: `the ${n} keys with the largest weights` } };')


SCORE_FORMULA = [
    (r"Math\.(exp|expm1|tanh|log|log1p|log2)\s*\(", "an exponential, tanh or logarithm (softmax, softcap, lse)"),
    (r"softcap", "the softcap"),
    (
        r"(\.scale\b|\blse\b|\.lse\b)\s*[-+*/]|[-+*/]\s*[\w.\[\]]*(\.scale|\blse)\b",
        "arithmetic on the scale or the lse",
    ),
    (r":\s*-Infinity\b|=\s*-Infinity\s*;", "a score set to −inf (the mask)"),
]


def formulas(js: str) -> list[str]:
    code = js_code(js)
    return [why for pattern, why in SCORE_FORMULA if re.search(pattern, code)]


def test_the_page_computes_no_score_formula():
    """No softmax, softcap, scaling or masking in the shipped script (the page reads them: the browser
    test `test_report_shows_what_python_computed` changes them in Python and sees the page follow)."""
    assert formulas(report.script()) == [], formulas(report.script())
    # the check finds the formulas the page used to carry (its old weightOf and scaleScore)
    old = (
        "function weightOf(masked, lse) { return masked !== -Infinity ? Math.exp(masked - lse) : 0; }\n"
        "function scaleScore(score, rule) { const s = score * rule.scale; return rule.softcap * Math.tanh(s); }\n"
        "masked[j] = visible[j] ? scaled[j] : -Infinity;\n"
    )
    assert len(formulas(old)) == 4


# --- the modules, bundled into one script (views/bundle.py) -----------------------------------


def write_modules(folder, files: dict[str, str]):
    for name, body in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(body, encoding="utf-8")
    return folder


def run_node(script: str) -> str:
    return subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True, timeout=30).stdout


def test_bundle_runs_the_modules_in_dependency_order(tmp_path):
    folder = write_modules(
        tmp_path,
        {
            "main.js": 'import { twice } from "./lib/math.js";\nimport { log, tag as label } from "./log.js";\n'
            "log(label + twice(21));\nexport const unused = 1;\n",
            "lib/math.js": 'import { log } from "../log.js";\nlog("math");\n'
            "export function twice(x) {\n  return 2 * x;\n}\n",
            "log.js": 'export const tag = "=";\nexport function log(s) {\n  console.log(s);\n}\nconst hidden = 3;\n',
        },
    )
    assert bundle.modules(folder, "main.js") == ["log.js", "lib/math.js", "main.js"]
    script = bundle.bundle(folder, "main.js")
    assert "import " not in script and "export " not in script
    assert run_node(script) == "math\n=42\n"
    # a module's own names stay its own: `hidden` is not visible to the others
    assert run_node(script + "console.log(typeof hidden);\n").endswith("undefined\n")


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"main.js": "export let x = 1;\n"}, r"main\.js:1: only `import"),
        ({"main.js": 'import * as m from "./a.js";\n', "a.js": ""}, r"main\.js:1: only `import"),
        ({"main.js": "export default function () {}\n"}, r"main\.js:1: only `import"),
        ({"main.js": 'const m = import("./a.js");\n'}, r"main\.js:1: a dynamic import"),
        (
            {
                "main.js": 'import { a } from "./a.js";\n',
                "a.js": 'import { b } from "./main.js";\nexport const a = 1;\n',
            },
            r"circle: main\.js → a\.js → main\.js",
        ),
        (
            {"main.js": 'import { nope } from "./a.js";\n', "a.js": "export const a = 1;\n"},
            r"a\.js does not export nope",
        ),
        ({"main.js": 'import { a } from "./gone.js";\n'}, r"gone\.js does not exist"),
        ({"main.js": 'import { a } from "../up.js";\n'}, r"leaves the page's folder"),
    ],
)
def test_bundle_refuses_what_it_cannot_keep(tmp_path, files, message):
    with pytest.raises(ValueError, match=message):
        bundle.bundle(write_modules(tmp_path, files), "main.js")


def test_the_page_is_every_module_of_the_static_folder(tmp_path):
    """Every .js file under web/static is reached from main.js or the attention page's attention.js (none
    left behind), and both bundles parse."""
    shipped = set(bundle.modules(report.STATIC_DIR, report.ENTRY))
    shipped |= set(bundle.modules(report.STATIC_DIR, report.ATTENTION_ENTRY))
    on_disk = {str(p.relative_to(report.STATIC_DIR).as_posix()) for p in report.STATIC_DIR.rglob("*.js")}
    assert shipped == on_disk and len(shipped) >= 10
    for entry in (report.ENTRY, report.ATTENTION_ENTRY):
        (tmp_path / "page.js").write_text(report.script(entry), encoding="utf-8")
        subprocess.run(["node", "--check", str(tmp_path / "page.js")], check=True, timeout=30)
